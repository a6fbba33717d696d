package main

//go:generate clang -x cuda --cuda-device-only --cuda-gpu-arch=sm_50 -nocudainc -nocudalib -O3 -S cuda.cu -o cuda.ptx

import (
	"bytes"
	_ "embed"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/goffload/offload"
	"github.com/goffload/offload/internal/cudadrv"
	"github.com/goffload/offload/plugins/cuda"
)

// Suite cuda: GPU 0 through goffload's cuda kind against the same work
// done straight through the CUDA driver API in the same run (the same
// driver binding, on the same GPU and primary context):
//
//   - cuda.empty_launch: a synchronous target region running bench.empty's
//     PTX against cuLaunchKernel of the same entry, with the same grid, and
//     cuStreamSynchronize (goal ≤ 1.5);
//   - cuda.submit_256MiB: a synchronous 256 MiB omp_target_memcpy from Go
//     memory to the GPU (goffload stages it through pinned buffers) against
//     one cuMemcpyHtoD of 256 MiB of pinned memory (goal: at least 0.9 of
//     its bandwidth, a ratio ≤ 1.11);
//   - cuda.submit_256MiB_pageable: the same copy against cuMemcpyHtoD of
//     the same Go memory, which the driver stages itself (what LLVM's CUDA
//     plugin does with a program's memory: report);
//   - cuda.retrieve_256MiB, cuda.retrieve_256MiB_pageable: 256 MiB back
//     into Go memory against cuMemcpyDtoHAsync + cuStreamSynchronize into
//     pinned memory, and into the same Go memory (report).
//
// The suite is skipped, saying why, where there is no driver or no GPU.

func init() {
	register("cuda", Suite{Devices: "cuda:0", Run: runCUDA, Skip: func() string {
		if _, _, err := cuda.Driver(); err != nil {
			return err.Error()
		}
		return ""
	}})
}

//go:embed cuda.ptx
var benchPTX []byte

// cudaCopyBytes is the size of the cuda suite's copies (metrics
// cuda.submit_256MiB and the rest, named after it); the tests, on a fake
// GPU, make it smaller.
var cudaCopyBytes int64 = 256 << 20

// rawCUDA is the baselines' own use of the driver: GPU 0's primary
// context, current on the suite's locked thread, a module of benchPTX and a
// stream.
type rawCUDA struct {
	drv    cudadrv.Driver
	ctx    cudadrv.Context
	mod    cudadrv.Module
	empty  cudadrv.Function
	stream cudadrv.Stream
}

func runCUDA(env *Env) error {
	dev := offload.On(0)
	info, err := dev.Info()
	if err != nil {
		return err
	}
	if info.Kind != "cuda" {
		return fmt.Errorf("device 0 is a %q device, want a cuda device", info.Kind)
	}
	env.Comment("device 0: %s, %d SMs, %.1f GiB", info.Name, info.Cores, float64(info.Memory)/(1<<30))
	drv, _, err := cuda.Driver()
	if err != nil {
		return err
	}
	// The raw calls need the context current on their thread: the suite
	// stays on this one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	raw := &rawCUDA{drv: drv}
	if raw.ctx, err = drv.DevicePrimaryCtxRetain(0); err != nil {
		return err
	}
	defer drv.DevicePrimaryCtxRelease(0)
	if err := drv.CtxSetCurrent(raw.ctx); err != nil {
		return err
	}
	if raw.mod, err = drv.ModuleLoadData(benchPTX); err != nil {
		return err
	}
	defer drv.ModuleUnload(raw.mod)
	if raw.empty, err = drv.ModuleGetFunction(raw.mod, "empty"); err != nil {
		return err
	}
	if raw.stream, err = drv.StreamCreate(cudadrv.StreamNonBlocking); err != nil {
		return err
	}
	defer drv.StreamDestroy(raw.stream)
	for _, m := range []func(*Env, offload.Device, *rawCUDA) error{cudaEmptyLaunch, cudaCopies} {
		// goffload's calls set the context on this thread too (the same
		// primary context).
		if err := drv.CtxSetCurrent(raw.ctx); err != nil {
			return err
		}
		if err := m(env, dev, raw); err != nil {
			return err
		}
	}
	return nil
}

// cudaEmptyLaunch: a synchronous target region with bench.empty (its PTX:
// one block of 256 threads, as goffload launches a kernel without slices)
// against the same launch and a stream synchronization through the driver.
func cudaEmptyLaunch(env *Env, dev offload.Device, raw *rawCUDA) error {
	region := func(n int) error {
		for range n {
			if err := dev.Run(benchEmpty); err != nil {
				return err
			}
		}
		return nil
	}
	baseline := func(n int) error {
		for range n {
			if err := raw.drv.LaunchKernel(raw.empty, [3]uint32{1, 1, 1}, [3]uint32{256, 1, 1}, 0, raw.stream, nil); err != nil {
				return err
			}
			if err := raw.drv.StreamSynchronize(raw.stream); err != nil {
				return err
			}
		}
		return nil
	}
	t, b, err := env.Compare(region, baseline)
	if err != nil {
		return err
	}
	env.Report(Result{Metric: "cuda.empty_launch", Goffload: t, Baseline: b,
		Note: "empty kernel, synchronous region vs cuLaunchKernel + cuStreamSynchronize (goal ≤ 1.5)"})
	return nil
}

// cudaCopies: 256 MiB between Go memory and the GPU, synchronous, each
// way, against the driver's copy of pinned memory (the hardware's rate)
// and its copy of the same Go memory (pageable: the driver stages it
// itself, as LLVM's CUDA plugin leaves it to, passing the program's
// pointer to cuMemcpyHtoDAsync). The three are measured in the same
// rounds.
func cudaCopies(env *Env, dev offload.Device, raw *rawCUDA) error {
	n := cudaCopyBytes
	size := fmt.Sprintf("%dMiB", n>>20)
	buf := fill(make([]byte, n))
	dp, err := dev.Alloc(n)
	if err != nil {
		return err
	}
	defer offload.Free(dp)
	pinned, err := raw.drv.MemHostAlloc(n, 0)
	if err != nil {
		return err
	}
	defer raw.drv.MemFreeHost(pinned)
	copy(unsafe.Slice((*byte)(pinned), n), buf)
	rp, err := raw.drv.MemAlloc(n)
	if err != nil {
		return err
	}
	defer raw.drv.MemFree(rp)
	goMem := unsafe.Pointer(&buf[0]) // pageable; the heap does not move it, and buf lives to the end
	times := func(f func() error) func(n int) error {
		return func(n int) error {
			for range n {
				if err := f(); err != nil {
					return err
				}
			}
			return nil
		}
	}
	src := offload.HostPtr(buf)
	sub, err := env.measure(
		times(func() error { return offload.Memcpy(dp, src, n) }),
		times(func() error { return raw.drv.MemcpyHtoD(rp, pinned, n) }),
		times(func() error { return raw.drv.MemcpyHtoD(rp, goMem, n) }))
	if err != nil {
		return err
	}
	// The data arrived: read a few bytes back.
	probe := make([]byte, 4096)
	if err := offload.Memcpy(offload.HostPtr(probe), dp.Offset(n-4096), 4096); err != nil {
		return err
	}
	for i := range probe {
		if probe[i] != buf[n-4096+int64(i)] {
			return fmt.Errorf("cuda.submit_%s: byte %d of the GPU's copy is %d, want %d", size, n-4096+int64(i), probe[i], buf[n-4096+int64(i)])
		}
	}
	env.Report(Result{Metric: "cuda.submit_" + size, Goffload: sub[0], Baseline: sub[1], Bytes: n,
		Note: fmt.Sprintf("host→device: %s from Go memory (staged) vs %s cuMemcpyHtoD of pinned memory (goal ≥ 0.9×)", gbps(n, sub[0]), gbps(n, sub[1]))})
	env.Report(Result{Metric: "cuda.submit_" + size + "_pageable", Goffload: sub[0], Baseline: sub[2], Bytes: n,
		Note: fmt.Sprintf("host→device: %s from Go memory (staged) vs %s cuMemcpyHtoD of the same Go memory (the driver stages it)", gbps(n, sub[0]), gbps(n, sub[2]))})

	// Back: into Go memory, against the driver's copy into pinned memory
	// and into the same Go memory (for pageable memory the call returns
	// once the copy is done; the stream is synchronized anyway).
	out := make([]byte, n)
	if err := offload.Memcpy(offload.HostPtr(out), dp, n); err != nil {
		return err
	}
	if !bytes.Equal(out, buf) {
		return fmt.Errorf("cuda.retrieve_%s: the copy back differs from what was sent", size)
	}
	goOut := unsafe.Pointer(&out[0])
	dtoh := func(dst unsafe.Pointer) func() error {
		return func() error {
			if err := raw.drv.MemcpyDtoHAsync(dst, rp, n, raw.stream); err != nil {
				return err
			}
			return raw.drv.StreamSynchronize(raw.stream)
		}
	}
	ret, err := env.measure(
		times(func() error { return offload.Memcpy(offload.HostPtr(out), dp, n) }),
		times(dtoh(pinned)),
		times(dtoh(goOut)))
	if err != nil {
		return err
	}
	env.Report(Result{Metric: "cuda.retrieve_" + size, Goffload: ret[0], Baseline: ret[1], Bytes: n,
		Note: fmt.Sprintf("device→host: %s into Go memory (staged) vs %s cuMemcpyDtoHAsync into pinned memory", gbps(n, ret[0]), gbps(n, ret[1]))})
	env.Report(Result{Metric: "cuda.retrieve_" + size + "_pageable", Goffload: ret[0], Baseline: ret[2], Bytes: n,
		Note: fmt.Sprintf("device→host: %s into Go memory (staged) vs %s cuMemcpyDtoHAsync into the same Go memory", gbps(n, ret[0]), gbps(n, ret[2]))})
	runtime.KeepAlive(buf)
	runtime.KeepAlive(out)
	return nil
}
