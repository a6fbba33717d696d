package main

import (
	"os"
	"testing"

	"github.com/goffload/offload/internal/cudadrv/cudafake"
	"github.com/goffload/offload/plugins/cuda"
	"github.com/goffload/offload/role"
)

// The device processes this test starts are this test binary.
func TestMain(m *testing.M) {
	role.ServeDevice()
	os.Exit(m.Run())
}

// TestCholesky factors on device processes, on host devices, mixed, and on
// the initial device alone; run checks L against plain Go every time.
func TestCholesky(t *testing.T) {
	for _, devices := range []string{"", "host:2", "host,local:2", "host"} {
		if devices != "" {
			t.Setenv("GOFFLOAD_DEVICES", devices)
		}
		if err := run(4, 16, false); err != nil {
			t.Fatalf("GOFFLOAD_DEVICES=%q: %v", devices, err)
		}
	}
	// -any: the runtime places the tasks.
	t.Setenv("GOFFLOAD_DEVICES", "host:2")
	if err := run(4, 16, true); err != nil {
		t.Fatalf("-any, GOFFLOAD_DEVICES=host:2: %v", err)
	}
	if err := run(0, 16, false); err == nil {
		t.Error("run(0 tiles) = nil; want an error")
	}
}

// TestCholeskyFakeGPU factors on fake GPUs (internal/cudadrv/cudafake),
// alone and beside the host device: the cuda kind loads the PTX
// goffload-gen made from the Go bodies (its .entry parameters parsed and
// checked against the kernels' and the hidden ones), packs the arguments
// as the entries declare them, and the fake GPU runs each entry's Go body
// over them (cudafake.SetGenerated); final tiles
// go between GPUs, within one GPU shared by two devices, and between a GPU
// and the host device. run checks L against plain Go each time.
func TestCholeskyFakeGPU(t *testing.T) {
	const tiles, b = 4, 16
	all := []int{0, 1, 2, 3}
	for _, c := range []struct {
		gpus    int
		devices string
		gpuRows []int // the rows of tiles on GPU devices
	}{
		// Factor deals the heaviest row (3) to the first device, the rest to
		// the second.
		{1, "cuda,host", []int{3}},
		{1, "host,cuda", []int{0, 1, 2}},
		{2, "cuda", all},
		{1, "cuda:0,cuda:0", all},
		{1, "cuda", all},
	} {
		gpus := make([]cudafake.GPU, c.gpus)
		for i := range gpus {
			gpus[i] = cudafake.H100
		}
		drv := cudafake.New(cudafake.Config{GPUs: gpus})
		drv.SetGenerated()
		restore := cuda.UseDriverForTests(drv)
		t.Setenv("GOFFLOAD_DEVICES", c.devices)
		t.Setenv("OMP_TARGET_OFFLOAD", "MANDATORY")
		err := run(tiles, b, false)
		restore()
		if err != nil {
			t.Fatalf("%d fake GPUs, GOFFLOAD_DEVICES=%s: %v", c.gpus, c.devices, err)
		}
		// A task runs where the tile it writes lives, on its row's device.
		onGPU := map[int]bool{}
		for _, i := range c.gpuRows {
			onGPU[i] = true
		}
		want := map[string]int{}
		for k := range tiles {
			if onGPU[k] {
				want["cholesky_potrf"]++
			}
			for i := k + 1; i < tiles; i++ {
				if onGPU[i] {
					want["cholesky_trsm"]++
					want["cholesky_syrk"]++
					want["cholesky_gemm"] += i - k - 1
				}
			}
		}
		for _, entry := range []string{"cholesky_potrf", "cholesky_trsm", "cholesky_syrk", "cholesky_gemm"} {
			if got := drv.Launches(entry); got != want[entry] {
				t.Errorf("%d fake GPUs, GOFFLOAD_DEVICES=%s: the fake GPUs ran %s %d times, want %d", c.gpus, c.devices, entry, got, want[entry])
			}
		}
	}
}

// TestCholeskyAnyFakeGPU runs -any on a fake GPU beside the host device:
// the runtime places each task on a device that has code for it (the GPU
// runs the generated PTX's entries, cudafake.SetGenerated's fakes) and
// moves the tiles; run checks L against plain Go.
func TestCholeskyAnyFakeGPU(t *testing.T) {
	drv := cudafake.New(cudafake.Config{GPUs: []cudafake.GPU{cudafake.H100}})
	drv.SetGenerated()
	defer cuda.UseDriverForTests(drv)()
	t.Setenv("OMP_TARGET_OFFLOAD", "MANDATORY")
	for _, devices := range []string{"cuda", "cuda,host"} {
		t.Setenv("GOFFLOAD_DEVICES", devices)
		before := 0
		for _, e := range []string{"cholesky_potrf", "cholesky_trsm", "cholesky_syrk", "cholesky_gemm"} {
			before += drv.Launches(e)
		}
		if err := run(4, 16, true); err != nil {
			t.Fatalf("-any, GOFFLOAD_DEVICES=%s: %v", devices, err)
		}
		gpu := -before
		for _, e := range []string{"cholesky_potrf", "cholesky_trsm", "cholesky_syrk", "cholesky_gemm"} {
			gpu += drv.Launches(e)
		}
		// 4 potrf, 6 trsm, 6 syrk, 4 gemm: all on the GPU when it is the
		// only device, some of them at most beside the host device.
		if devices == "cuda" && gpu != 20 || gpu > 20 {
			t.Errorf("-any, GOFFLOAD_DEVICES=%s: the fake GPU ran %d kernels of the 20", devices, gpu)
		}
	}
}
