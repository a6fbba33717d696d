package main

import (
	"fmt"
	"os"
	"testing"

	"github.com/goffload/offload/internal/cudadrv/cudafake"
	"github.com/goffload/offload/internal/ptxgen"
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
// kind loads jacobi.ptx (its .entry parameters parsed and checked against
// Step's and StepRows'), packs the arguments as the entries declare them,
// and the fake GPU runs each entry as the PTX would (fakeStep,
// fakeStepRows); the halo rows go between GPUs, within one GPU shared by
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
		drv.SetKernel("step", fakeStep)
		drv.SetKernel("steprows", fakeStepRows)
		restore := cuda.UseDriverForTests(drv)
		t.Setenv("GOFFLOAD_DEVICES", c.devices)
		t.Setenv("OMP_TARGET_OFFLOAD", "MANDATORY")
		err := run(n, iters, true)
		restore()
		if err != nil {
			t.Fatalf("%d fake GPUs, GOFFLOAD_DEVICES=%s: %v", c.gpus, c.devices, err)
		}
		if got := drv.Launches("step"); got != c.step {
			t.Errorf("%d fake GPUs, GOFFLOAD_DEVICES=%s: the fake GPUs ran step %d times, want %d", c.gpus, c.devices, got, c.step)
		}
		if got := drv.Launches("steprows"); got != c.stepRows {
			t.Errorf("%d fake GPUs, GOFFLOAD_DEVICES=%s: the fake GPUs ran steprows %d times, want %d", c.gpus, c.devices, got, c.stepRows)
		}
	}
}

// fakeStep is jacobi.ptx's step on a fake GPU: parameters next and cur
// (device addresses), cols and rows (8 bytes each).
func fakeStep(l *cudafake.Launch) error {
	return fakeCells(l, l.Int64(2), 1, l.Int64(3))
}

// fakeStepRows is jacobi.ptx's steprows: next, cur, cols, lo and hi.
func fakeStepRows(l *cudafake.Launch) error {
	lo := l.Int64(3)
	return fakeCells(l, l.Int64(2), lo, l.Int64(4)-lo)
}

// fakeCells is jacobi.cu's cell, run by every thread of the launch: thread
// i computes interior cell i of rows [lo, lo+count) of next. A launch with
// fewer threads than cells is an error (the GPU would leave cells alone).
func fakeCells(l *cudafake.Launch, cols, lo, count int64) error {
	w := cols - 2
	if w <= 0 || count <= 0 {
		return nil
	}
	if l.Threads() < count*w {
		return fmt.Errorf("%d threads for %d cells", l.Threads(), count*w)
	}
	n := (lo + count + 1) * cols // down to the halo row below the last
	next, err := cudafake.Slice[float64](l, 0, n)
	if err != nil {
		return err
	}
	cur, err := cudafake.Slice[float64](l, 1, n)
	if err != nil {
		return err
	}
	for i := range l.Threads() {
		if i < count*w {
			r, c := lo+i/w, 1+i%w
			row, up, down := cur[r*cols:], cur[(r-1)*cols:], cur[(r+1)*cols:]
			next[r*cols+c] = 0.25 * (up[c] + down[c] + row[c-1] + row[c+1])
		}
	}
	return nil
}

// TestJacobiPTXGenerated: examples/apps/jacobi's jacobi.ptx is what go
// generate makes of jacobi.cu, where clang with the NVPTX target is
// installed.
func TestJacobiPTXGenerated(t *testing.T) {
	ptxgen.UpToDate(t, "../apps/jacobi/jacobi.go")
}
