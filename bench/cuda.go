package main

//go:generate clang -x cuda --cuda-device-only --cuda-gpu-arch=sm_50 -nocudainc -nocudalib -O3 -S cuda.cu -o cuda.ptx

import (
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
//     its bandwidth, a ratio ≤ 1.11).
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

const size256MiB = 256 << 20

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
	for _, m := range []func(*Env, offload.Device, *rawCUDA) error{cudaEmptyLaunch, cudaSubmit} {
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
			if err := benchEmpty.Run(dev); err != nil {
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

// cudaSubmit: 256 MiB from Go memory to the GPU, synchronous, against one
// cuMemcpyHtoD of pinned memory.
func cudaSubmit(env *Env, dev offload.Device, raw *rawCUDA) error {
	buf := fill(make([]byte, size256MiB))
	dp, err := dev.Alloc(size256MiB)
	if err != nil {
		return err
	}
	defer offload.Free(dp)
	pinned, err := raw.drv.MemHostAlloc(size256MiB, 0)
	if err != nil {
		return err
	}
	defer raw.drv.MemFreeHost(pinned)
	copy(unsafe.Slice((*byte)(pinned), size256MiB), buf)
	rp, err := raw.drv.MemAlloc(size256MiB)
	if err != nil {
		return err
	}
	defer raw.drv.MemFree(rp)
	src := offload.HostPtr(buf)
	submit := func(n int) error {
		for range n {
			if err := offload.Memcpy(dp, src, size256MiB); err != nil {
				return err
			}
		}
		return nil
	}
	baseline := func(n int) error {
		for range n {
			if err := raw.drv.MemcpyHtoD(rp, pinned, size256MiB); err != nil {
				return err
			}
		}
		return nil
	}
	t, b, err := env.Compare(submit, baseline)
	if err != nil {
		return err
	}
	// The data arrived: read a few bytes back.
	probe := make([]byte, 4096)
	if err := offload.Memcpy(offload.HostPtr(probe), dp.Offset(size256MiB-4096), 4096); err != nil {
		return err
	}
	for i := range probe {
		if probe[i] != buf[size256MiB-4096+i] {
			return fmt.Errorf("cuda.submit_256MiB: byte %d of the GPU's copy is %d, want %d", size256MiB-4096+i, probe[i], buf[size256MiB-4096+i])
		}
	}
	env.Report(Result{Metric: "cuda.submit_256MiB", Goffload: t, Baseline: b, Bytes: size256MiB,
		Note: fmt.Sprintf("host→device: %s from Go memory (staged) vs %s cuMemcpyHtoD of pinned memory (goal ≥ 0.9×)", gbps(size256MiB, t), gbps(size256MiB, b))})
	return nil
}
