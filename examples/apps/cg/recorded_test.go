package cg

import (
	"errors"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/goffload/offload"
	"github.com/goffload/offload/role"
)

// TestMain serves as a device in the device processes that
// TestSolveRecorded's local devices start (this test binary, run again).
func TestMain(m *testing.M) {
	role.ServeDevice()
	os.Exit(m.Run())
}

// TestSolveRecorded runs the recorded iteration on a host device and on a
// device process and checks x against Reference, and against Solve on the
// same device bit for bit: the same kernels' loops, chunked the same way,
// with the step sizes made on the device instead of the host. A breakdown
// is Solve's error, found on the device.
func TestSolveRecorded(t *testing.T) {
	for _, spec := range []string{"host", "local:1"} {
		t.Run(spec, func(t *testing.T) {
			if err := offload.Start(offload.WithDevices(spec), offload.WithOffload("MANDATORY")); err != nil {
				t.Fatal(err)
			}
			defer offload.Stop()
			dev := offload.On(0)
			for _, c := range []struct{ n, iters int }{{1, 1}, {5, 0}, {7, 5}, {16, 30}, {33, 20}} {
				want, _, err := Reference(c.n, c.iters)
				if err != nil {
					t.Fatalf("Reference(%d, %d): %v", c.n, c.iters, err)
				}
				x, _, err := SolveRecorded(dev, c.n, c.iters)
				if err != nil {
					t.Fatalf("SolveRecorded(%d, %d): %v", c.n, c.iters, err)
				}
				if err := Check(x, want); err != nil {
					t.Errorf("n=%d iters=%d: %v", c.n, c.iters, err)
				}
				fresh, _, err := Solve(dev, c.n, c.iters)
				if err != nil {
					t.Fatalf("Solve(%d, %d): %v", c.n, c.iters, err)
				}
				for i := range fresh {
					if math.Float64bits(x[i]) != math.Float64bits(fresh[i]) {
						t.Errorf("n=%d iters=%d: x[%d] is %v recorded, %v by Solve on the same device", c.n, c.iters, i, x[i], fresh[i])
						break
					}
				}
				if dev.IsPresent(x) {
					t.Errorf("n=%d iters=%d: x still present on the device after SolveRecorded", c.n, c.iters)
				}
			}
			// The 1×1 grid is solved in one step; the next divides 0 by 0.
			_, _, err := SolveRecorded(dev, 1, 2)
			if !errors.Is(err, ErrBreakdown) || !strings.Contains(err.Error(), "iteration 1: alpha") {
				t.Errorf("SolveRecorded(1, 2): %v, want ErrBreakdown at iteration 1's alpha", err)
			}
			_, _, want := Solve(dev, 1, 2)
			if err == nil || want == nil || err.Error() != want.Error() {
				t.Errorf("SolveRecorded(1, 2): %v; Solve(1, 2): %v: want the same error", err, want)
			}
			if _, _, err := SolveRecorded(dev, 0, 1); err == nil {
				t.Error("SolveRecorded of a 0×0 grid: no error")
			}
		})
	}
}
