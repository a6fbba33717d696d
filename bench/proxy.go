package main

import (
	"fmt"
	"time"

	"github.com/goffload/offload"
	"github.com/goffload/offload/examples/apps/jacobi"
	"github.com/goffload/offload/plugins/opencl"
)

// Suite proxy: OpenCL device 0 (PoCL's CPU device in CI) served by a local
// device process (local:1[opencl], device 0) against the same device in
// this process (opencl:0, device 1), in the same run (issue 45):
//
//   - proxy.empty_launch: a synchronous region of bench.empty on device 0
//     vs the same region on device 1 plus one raw 8-byte ping-pong over a
//     shared-memory ring pair, as the device's link (goal ≤ 1.3);
//   - proxy.submit_64MiB, proxy.retrieve_64MiB: synchronous 64 MiB
//     omp_target_memcpy to and from device 0 vs device 1 (goal ≤ 1.2).
//
// Suite proxy2: the device served by two local device processes
// (local:2[opencl], devices 0 and 1) against it in this process (device 2):
//
//   - proxy2.jacobi_2048: 2048² Jacobi, 20 iterations, OpenCL C on
//     devices 0 and 1 (halos between the two processes) vs on device 2
//     alone (report: on two cores it measures the overhead).
func init() {
	register("proxy", Suite{Devices: "local:1[opencl],opencl:0", Run: runProxy, Skip: noOpenCL})
	register("proxy2", Suite{Devices: "local:2[opencl],opencl:0", Run: runProxy2, Skip: noOpenCL})
}

// noOpenCL says why there is no OpenCL driver here, or "".
func noOpenCL() string {
	if _, _, err := opencl.Library(); err != nil {
		return err.Error()
	}
	return ""
}

func runProxy(env *Env) error {
	proxied, direct := offload.On(0), offload.On(1)
	pi, err := proxied.Info()
	if err != nil {
		return err
	}
	di, err := direct.Info()
	if err != nil {
		return err
	}
	if pi.Serves != "opencl" || di.Kind != "opencl" {
		return fmt.Errorf("devices %q: device 0 is %s serving %q, device 1 %s; want local serving opencl, then opencl", env.Devices, pi.Kind, pi.Serves, di.Kind)
	}
	env.Comment("device 0: %s, served by local device process %d; device 1: the same OpenCL device in this process", pi.Name, pi.PID)
	region := func(dev offload.Device) func(n int) error {
		return func(n int) error {
			for range n {
				if err := dev.Run(benchEmpty); err != nil {
					return err
				}
			}
			return nil
		}
	}
	for _, dev := range []offload.Device{proxied, direct} {
		if err := region(dev)(100); err != nil { // warm up: the kernel built, the queues made
			return err
		}
	}
	p, err := startShmPeer("echo", 0)
	err = usePeer(p, err, func(p *peer) error {
		if err := p.pingPong(100); err != nil {
			return err
		}
		t, b, err := env.Compare(region(proxied), func(n int) error {
			for range n {
				if err := direct.Run(benchEmpty); err != nil {
					return err
				}
				if err := p.pingPong(1); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		env.Report(Result{Metric: "proxy.empty_launch", Goffload: t, Baseline: b,
			Note: "empty kernel, synchronous, on PoCL served by local:1 vs on PoCL in this process + one 8-byte ping-pong over a shared-memory ring pair (goal ≤ 1.3)"})
		return nil
	})
	if err != nil {
		return err
	}
	const size = size64MiB
	src := fill(make([]byte, size))
	dst := make([]byte, size)
	var ptrs [2]offload.DevicePtr
	for i, dev := range []offload.Device{proxied, direct} {
		if ptrs[i], err = dev.Alloc(size); err != nil {
			return err
		}
		defer offload.Free(ptrs[i])
		for _, f := range []func(int) error{memcpyTo(ptrs[i], src)(size), memcpyFrom(dst, ptrs[i], src, "proxy.retrieve_")(size)} {
			if err := f(1); err != nil { // warm up: memory faulted in
				return err
			}
		}
	}
	t, b, err := env.Compare(memcpyTo(ptrs[0], src)(size), memcpyTo(ptrs[1], src)(size))
	if err != nil {
		return err
	}
	if err := checkOnDevice(ptrs[0], src); err != nil {
		return fmt.Errorf("proxy.submit_64MiB: %w", err)
	}
	env.Report(Result{Metric: "proxy.submit_64MiB", Goffload: t, Baseline: b, Bytes: size,
		Note: fmt.Sprintf("host→device, synchronous: proxied %s vs direct %s (goal ≤ 1.2)", gbps(size, t), gbps(size, b))})
	t, b, err = env.Compare(memcpyFrom(dst, ptrs[0], src, "proxy.retrieve_")(size), memcpyFrom(dst, ptrs[1], src, "proxy.retrieve_")(size))
	if err != nil {
		return err
	}
	env.Report(Result{Metric: "proxy.retrieve_64MiB", Goffload: t, Baseline: b, Bytes: size,
		Note: fmt.Sprintf("device→host, synchronous: proxied %s vs direct %s (goal ≤ 1.2)", gbps(size, t), gbps(size, b))})
	return nil
}

func runProxy2(env *Env) error {
	if err := describeDevicesOf(env, 3, "two local device processes serving opencl, then opencl", "local", "opencl"); err != nil {
		return err
	}
	const n, iters = 2048, 20
	want, _ := jacobi.Reference(n, iters)
	solve := func(devs ...offload.Device) func() (time.Duration, error) {
		return func() (time.Duration, error) {
			grid, t, err := jacobi.Solve(devs, n, iters)
			if err == nil {
				err = jacobi.Check(grid, want, n)
			}
			return t, err
		}
	}
	ts, err := env.CompareSelfTimed(solve(offload.On(0), offload.On(1)), solve(offload.On(2)))
	if err != nil {
		return fmt.Errorf("proxy2.jacobi_2048: %w", err)
	}
	env.Report(Result{Metric: "proxy2.jacobi_2048", Goffload: ts[0], Baseline: ts[1],
		Note: "2048² Jacobi, 20 iterations, OpenCL C: on PoCL served by two local device processes vs on PoCL in this process (report)"})
	return nil
}
