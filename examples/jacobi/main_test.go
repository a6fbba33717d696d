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

// TestJacobi runs the iteration on device processes (halo rows go between
// them), on host devices, mixed, and on the initial device alone; run
// verifies every grid against plain Go.
func TestJacobi(t *testing.T) {
	for _, devices := range []string{"", "host:2", "host,local:2", "local:3", "host"} {
		if devices != "" {
			t.Setenv("GOFFLOAD_DEVICES", devices)
		}
		if err := run(67, 30, devices == ""); err != nil {
			t.Fatalf("GOFFLOAD_DEVICES=%q: %v", devices, err)
		}
	}
}

// TestJacobiBadInput: a grid too small is an error, not a panic.
func TestJacobiBadInput(t *testing.T) {
	if err := run(2, 1, false); err == nil {
		t.Fatal("run(2, 1) = nil; want an error")
	}
}

// TestJacobiFakeGPU runs the iteration on fake GPUs
// (internal/cudadrv/cudafake), alone and beside the host device: the cuda
// kind loads the PTX goffload-gen made from the Go bodies (its .entry
// parameters parsed and checked against Step's and StepRows' and the
// hidden ones), packs the arguments as the entries declare them, and the
// fake GPU runs each entry's Go body over them (cudafake.SetGenerated);
// the halo rows go between GPUs, within one GPU shared by
// two devices, and between a GPU and the host device. run checks the grid
// against plain Go each time.
func TestJacobiFakeGPU(t *testing.T) {
	const n, iters = 67, 30
	for _, c := range []struct {
		gpus     int
		devices  string
		step     int // launches of step: a block alone on a GPU
		stepRows int // of steprows: 3 an iteration for each GPU block of several
	}{
		// A GPU block and a host block, then (compare) the GPU alone.
		{1, "cuda,host", iters, 3 * iters},
		// The host block first: the GPU runs only the blocks' steps.
		{1, "host,cuda", 0, 3 * iters},
		{2, "cuda", iters, 2 * 3 * iters},
		{1, "cuda:0,cuda:0", iters, 2 * 3 * iters},
		{1, "cuda", iters, 0},
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
		err := run(n, iters, true)
		restore()
		if err != nil {
			t.Fatalf("%d fake GPUs, GOFFLOAD_DEVICES=%s: %v", c.gpus, c.devices, err)
		}
		if got := drv.Launches("jacobi_step"); got != c.step {
			t.Errorf("%d fake GPUs, GOFFLOAD_DEVICES=%s: the fake GPUs ran step %d times, want %d", c.gpus, c.devices, got, c.step)
		}
		if got := drv.Launches("jacobi_steprows"); got != c.stepRows {
			t.Errorf("%d fake GPUs, GOFFLOAD_DEVICES=%s: the fake GPUs ran steprows %d times, want %d", c.gpus, c.devices, got, c.stepRows)
		}
	}
}
