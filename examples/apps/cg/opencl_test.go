package cg

import (
	"testing"

	"github.com/goffload/offload"
	"github.com/goffload/offload/internal/opencltest"
)

// TestSolveOpenCL runs the iteration on an OpenCL device (PoCL in CI),
// mandatory, so its three kernels run their OpenCL C generated from the Go
// bodies (two of them offload.Reduce), and checks x against Reference;
// the recorded iteration too (its kernels write the state on the device).
func TestSolveOpenCL(t *testing.T) {
	opencltest.Need(t)
	if err := offload.Start(offload.WithDevices("opencl:0"), offload.WithOffload("MANDATORY")); err != nil {
		t.Fatal(err)
	}
	defer offload.Stop()
	dev := offload.On(0)
	if in, err := dev.Info(); err != nil || in.Kind != "opencl" {
		t.Fatalf("device 0: %+v, %v; want the OpenCL device", in, err)
	}
	for _, c := range []struct{ n, iters int }{{1, 1}, {7, 5}, {33, 20}} {
		want, _, err := Reference(c.n, c.iters)
		if err != nil {
			t.Fatal(err)
		}
		x, _, err := Solve(dev, c.n, c.iters)
		if err != nil {
			t.Fatalf("Solve(%d, %d) on PoCL: %v", c.n, c.iters, err)
		}
		if err := Check(x, want); err != nil {
			t.Errorf("n=%d iters=%d on PoCL: %v", c.n, c.iters, err)
		}
		x, _, err = SolveRecorded(dev, c.n, c.iters)
		if err != nil {
			t.Fatalf("SolveRecorded(%d, %d) on PoCL: %v", c.n, c.iters, err)
		}
		if err := Check(x, want); err != nil {
			t.Errorf("n=%d iters=%d, recorded, on PoCL: %v", c.n, c.iters, err)
		}
	}
}
