package main

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"
	"unsafe"

	"github.com/goffload/offload"
	"github.com/goffload/offload/examples/apps/jacobi"
	"github.com/goffload/offload/internal/cldrv"
	"github.com/goffload/offload/plugins/opencl"
)

// Suite opencl: OpenCL device 0 ("opencl:0": the first GPU where there is
// one, the kind numbering GPUs first, then accelerators, then CPUs; PoCL's
// CPU device in CI) through goffload's opencl kind, against the same work through the OpenCL API in the same run (the
// same binding, device and context), and against Go bodies on host:1:
//
//   - opencl.empty_launch: a synchronous region of bench.empty's OpenCL C
//     vs clEnqueueNDRangeKernel + clFinish (goal ≤ 1.5);
//   - opencl.submit_64MiB, opencl.retrieve_64MiB: synchronous 64 MiB
//     copies from and to Go memory vs blocking clEnqueueWriteBuffer /
//     ReadBuffer of a buffer (goal ≥ 0.9× bandwidth, ratio ≤ 1.11);
//   - opencl.nbody_4096: one N-body step of 4096 float32 bodies, OpenCL C on
//     device 0 vs the same kernel's Go body on host:1 (goal ≤ 0.5);
//   - opencl.jacobi_2048: 2048² Jacobi, 20 iterations, OpenCL C vs the Go
//     kernel on host:1 (report; goal ≤ 1.0);
//   - opencl.stencil_512: peer.stencil_512's workload (512², 100
//     iterations), OpenCL C vs the Go kernel on host:1 (LLVM's vectorized
//     C is the yardstick: peer suite, where LLVM 22 is installed);
//   - opencl.chain_per_op: a chain of 256 dependent nowait empty kernels on
//     device 0, per kernel, vs 256 clEnqueueNDRangeKernel on one in-order
//     queue and a clFinish (goal ≤ 2);
//   - opencl.gen_vs_hand_* and opencl.checked_vs_unchecked_*: kernels'
//     generated OpenCL C against hand-written, and without Go's checks
//     (opencl_gen.go).
func init() {
	register("opencl", Suite{Devices: "opencl:0,host:1", Run: runOpenCL, Skip: func() string {
		if _, _, err := opencl.Library(); err != nil {
			return err.Error()
		}
		return ""
	}})
}

// benchEmptyCL is bench.empty's OpenCL C, a program of its own: NVIDIA's
// compiler (driver 580) failed, in ptxas, the program of both kernels
// with the kind's -cl-kernel-arg-info (the raw baseline's build of it,
// without options, passed), and a kernel without parameters is the one
// thing that program had that none that built there had; the kind builds
// such a program again without the option, and nbody keeps its own, with
// argument info.
const benchEmptyCL = "kernel void empty(void) { }\n"

const benchCL = `
// nbody: one step of n bodies (x, y, z, mass in pos; velocities in vel),
// one work-item per body.
kernel void nbody(global const float4 *pos, global float4 *vel, global float4 *out, long n, float dt, float eps) {
	long i = get_global_id(0);
	if (i >= n) return;
	float4 p = pos[i];
	float ax = 0, ay = 0, az = 0;
	for (long j = 0; j < n; j++) {
		float4 q = pos[j];
		float dx = q.x - p.x, dy = q.y - p.y, dz = q.z - p.z;
		float r2 = dx*dx + dy*dy + dz*dz + eps;
		float inv = rsqrt(r2);
		float s = q.w * inv * inv * inv;
		ax += dx * s; ay += dy * s; az += dz * s;
	}
	float4 v = vel[i];
	v.x += ax * dt; v.y += ay * dt; v.z += az * dt;
	vel[i] = v;
	out[i] = (float4)(p.x + v.x * dt, p.y + v.y * dt, p.z + v.z * dt, p.w);
}
`

// body is a body's x, y, z and mass, or its velocity (w unused).
type body [4]float32

var benchNBody = offload.MustKernel6("bench.nbody", func(ctx offload.Ctx, pos offload.In[body], vel offload.InOut[body], out offload.Out[body], n int, dt, eps float32) {
	ctx.For(n, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			p := pos[i]
			var ax, ay, az float32
			for j := range n {
				q := pos[j]
				dx, dy, dz := q[0]-p[0], q[1]-p[1], q[2]-p[2]
				r2 := dx*dx + dy*dy + dz*dz + eps
				inv := 1 / float32(math.Sqrt(float64(r2)))
				s := q[3] * inv * inv * inv
				ax, ay, az = ax+dx*s, ay+dy*s, az+dz*s
			}
			v := vel[i]
			v[0], v[1], v[2] = v[0]+ax*dt, v[1]+ay*dt, v[2]+az*dt
			vel[i] = v
			out[i] = body{p[0] + v[0]*dt, p[1] + v[1]*dt, p[2] + v[2]*dt, p[3]}
		}
	})
}).OpenCL([]byte(benchCL), "nbody")

func runOpenCL(env *Env) error {
	dev, host := offload.On(0), offload.On(1)
	info, err := dev.Info()
	if err != nil {
		return err
	}
	if info.Kind != "opencl" {
		return fmt.Errorf("device 0 is a %q device, want an opencl device", info.Kind)
	}
	env.Comment("device 0: %s; device 1: host:1", info.Name)
	lib, devs, err := opencl.Library()
	if err != nil {
		return err
	}
	rd := devs[0] // the raw baselines' device: opencl:0 too
	if !strings.HasPrefix(info.Name, rd.Name+" (") {
		return fmt.Errorf("the baselines' OpenCL device 0 is %q, goffload's device 0 is %q: want the same device", rd.Name, info.Name)
	}
	q, err := lib.CreateQueue(rd.Context, rd.Device, false, true)
	if err != nil {
		return err
	}
	defer lib.ReleaseQueue(q)
	pr, err := lib.CreateProgram(rd.Context, []byte(benchEmptyCL))
	if err != nil {
		return err
	}
	defer lib.ReleaseProgram(pr)
	if err := lib.BuildProgram(pr, []cldrv.Device{rd.Device}, ""); err != nil {
		return err
	}
	empty, err := lib.CreateKernel(pr, "empty")
	if err != nil {
		return err
	}
	defer lib.ReleaseKernel(empty)
	global := [3]uintptr{1, 1, 1}

	// Empty launch.
	t, b, err := env.Compare(func(n int) error {
		for range n {
			if err := dev.Run(benchEmpty); err != nil {
				return err
			}
		}
		return nil
	}, func(n int) error {
		for range n {
			if err := lib.EnqueueKernel(q, empty, 1, &global, nil, nil, nil); err != nil {
				return err
			}
			if err := lib.Finish(q); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	env.Report(Result{Metric: "opencl.empty_launch", Goffload: t, Baseline: b, Note: "empty kernel, synchronous region vs clEnqueueNDRangeKernel + clFinish (goal ≤ 1.5)"})

	// Chain of dependent nowait kernels.
	const chain = 256
	x := make([]int64, 1)
	if err := dev.EnterData(offload.To(x)); err != nil {
		return err
	}
	t, b, err = env.Compare(func(n int) error {
		for range n {
			for range chain {
				dev.Nowait(offload.DependInOut(x)).Run(benchEmpty)
			}
			if err := offload.Taskwait(context.Background()); err != nil {
				return err
			}
		}
		return nil
	}, func(n int) error {
		for range n {
			for range chain {
				if err := lib.EnqueueKernel(q, empty, 1, &global, nil, nil, nil); err != nil {
					return err
				}
			}
			if err := lib.Finish(q); err != nil {
				return err
			}
		}
		return nil
	})
	dev.ExitData(offload.Release(x))
	if err != nil {
		return err
	}
	env.Report(Result{Metric: "opencl.chain_per_op", Goffload: t / chain, Baseline: b / chain, Note: fmt.Sprintf("%d dependent nowait empty kernels + Taskwait vs in-order enqueues + clFinish, per kernel (goal ≤ 2)", chain)})

	// 64 MiB copies.
	const size = 64 << 20
	buf := fill(make([]byte, size))
	back := make([]byte, size)
	dp, err := dev.Alloc(size)
	if err != nil {
		return err
	}
	defer offload.Free(dp)
	rb, err := lib.CreateBuffer(rd.Context, size)
	if err != nil {
		return err
	}
	defer lib.ReleaseMem(rb)
	for _, dir := range []string{"submit", "retrieve"} {
		t, b, err := env.Compare(func(n int) error {
			for range n {
				var err error
				if dir == "submit" {
					err = offload.Memcpy(dp, offload.HostPtr(buf), size)
				} else {
					err = offload.Memcpy(offload.HostPtr(back), dp, size)
				}
				if err != nil {
					return err
				}
			}
			return nil
		}, func(n int) error {
			for range n {
				var err error
				if dir == "submit" {
					err = lib.WriteBuffer(q, rb, true, 0, size, unsafe.Pointer(&buf[0]), nil, nil)
				} else {
					err = lib.ReadBuffer(q, rb, true, 0, size, unsafe.Pointer(&back[0]), nil, nil)
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		env.Report(Result{Metric: "opencl." + dir + "_64MiB", Goffload: t, Baseline: b, Bytes: size,
			Note: fmt.Sprintf("%s from/to Go memory vs blocking clEnqueue%sBuffer (goal ≥ 0.9×)", gbps(size, t), map[string]string{"submit": "Write", "retrieve": "Read"}[dir])})
	}
	if err := offload.Memcpy(offload.HostPtr(back), dp, size); err != nil {
		return err
	}
	for i := 0; i < size; i += 4093 {
		if back[i] != buf[i] {
			return fmt.Errorf("opencl: byte %d came back %d, want %d", i, back[i], buf[i])
		}
	}

	// N-body.
	const nb = 4096
	pos, vel, out := make([]body, nb), make([]body, nb), make([]body, nb)
	for i := range pos {
		f := float32(i)
		pos[i] = body{float32(math.Sin(float64(f))) * 10, float32(math.Cos(float64(f)*0.7)) * 10, f / nb, 1 + f/nb}
	}
	step := func(d offload.Device) func(n int) error {
		return func(n int) error {
			for range n {
				if err := benchNBody.Run(d, pos, vel, out, nb, float32(0.001), float32(0.01)); err != nil {
					return err
				}
			}
			return nil
		}
	}
	t, b, err = env.Compare(step(dev), step(host))
	if err != nil {
		return err
	}
	env.Report(Result{Metric: "opencl.nbody_4096", Goffload: t, Baseline: b, Note: "one step of 4096 float32 bodies: OpenCL C on device 0 vs the Go body on host:1 (goal ≤ 0.5)"})

	// Jacobi and the peer suite's stencil.
	for _, c := range []struct {
		metric   string
		n, iters int
		note     string
	}{
		{"opencl.jacobi_2048", 2048, 20, "2048² Jacobi, 20 iterations: OpenCL C vs the Go kernel on host:1 (report; goal ≤ 1.0)"},
		{"opencl.stencil_512", stencilN, stencilIters, "peer.stencil_512's workload: OpenCL C vs the Go kernel on host:1 (LLVM 22's C is the issue's yardstick: not installed here)"},
	} {
		want, _ := jacobi.Reference(c.n, c.iters)
		solve := func(d offload.Device) func() (time.Duration, error) {
			return func() (time.Duration, error) {
				grid, t, err := jacobi.Solve([]offload.Device{d}, c.n, c.iters)
				if err == nil {
					err = jacobi.Check(grid, want, c.n)
				}
				return t, err
			}
		}
		ts, err := env.CompareSelfTimed(solve(dev), solve(host))
		if err != nil {
			return fmt.Errorf("%s: %w", c.metric, err)
		}
		env.Report(Result{Metric: c.metric, Goffload: ts[0], Baseline: ts[1], Note: c.note})
	}
	return runOpenCLGenerated(env, dev)
}
