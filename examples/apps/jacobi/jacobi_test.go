package jacobi

import (
	"os"
	"strings"
	"testing"

	"github.com/goffload/offload"
	"github.com/goffload/offload/role"
)

// TestMain serves as a device in the device processes TestSolveAny's local
// devices start (this test binary, run again).
func TestMain(m *testing.M) {
	role.ServeDevice()
	os.Exit(m.Run())
}

// TestSolve runs the iteration on two host devices and on one, for grids
// that split evenly and not, and checks every cell against Reference.
func TestSolve(t *testing.T) {
	if err := offload.Start(offload.WithDevices("host:2")); err != nil {
		t.Fatal(err)
	}
	defer offload.Stop()
	for _, c := range []struct{ n, iters int }{{3, 1}, {10, 7}, {33, 20}, {40, 0}} {
		want, _ := Reference(c.n, c.iters)
		for _, devs := range [][]offload.Device{{offload.On(0), offload.On(1)}, {offload.On(1)}} {
			grid, _, err := Solve(devs, c.n, c.iters)
			if err != nil {
				t.Fatalf("n=%d iters=%d on %d devices: %v", c.n, c.iters, len(devs), err)
			}
			if err := Check(grid, want, c.n); err != nil {
				t.Errorf("n=%d iters=%d on %d devices: %v", c.n, c.iters, len(devs), err)
			}
		}
	}
	if _, _, err := Solve(nil, 10, 1); err == nil {
		t.Error("Solve on no devices: no error")
	}
	if _, _, err := Solve([]offload.Device{offload.On(0)}, 2, 1); err == nil {
		t.Error("Solve of a 2×2 grid: no error")
	}
}

// TestSolveRecorded runs the iteration recorded and replayed, on host:2
// and local:2, for grids that split evenly and not, odd and even numbers
// of iterations, and checks every cell against Reference.
func TestSolveRecorded(t *testing.T) {
	for _, spec := range []string{"host:2", "local:2"} {
		t.Run(spec, func(t *testing.T) {
			if err := offload.Start(offload.WithDevices(spec), offload.WithOffload("MANDATORY")); err != nil {
				t.Fatal(err)
			}
			defer offload.Stop()
			for _, c := range []struct{ n, iters int }{{3, 1}, {10, 7}, {33, 20}, {40, 0}} {
				want, _ := Reference(c.n, c.iters)
				for _, devs := range [][]offload.Device{{offload.On(0), offload.On(1)}, {offload.On(1)}} {
					grid, _, err := SolveRecorded(devs, c.n, c.iters)
					if err != nil {
						t.Fatalf("n=%d iters=%d on %d devices: %v", c.n, c.iters, len(devs), err)
					}
					if err := Check(grid, want, c.n); err != nil {
						t.Errorf("n=%d iters=%d on %d devices: %v", c.n, c.iters, len(devs), err)
					}
				}
			}
		})
	}
}

// TestCheck: a grid that differs in one cell is named in the error.
func TestCheck(t *testing.T) {
	want, _ := Reference(8, 3)
	grid := append([]float64(nil), want...)
	if err := Check(grid, want, 8); err != nil {
		t.Fatal(err)
	}
	grid[8*3+4] += 1e-3
	err := Check(grid, want, 8)
	if err == nil || !strings.Contains(err.Error(), "cell (3, 4)") {
		t.Fatalf("Check of a grid off in cell (3, 4) = %v", err)
	}
}

// TestSolveAny solves with Any-tasks on two host devices and on two device
// processes, in one band per device and in more, and checks the grid
// against the plain-Go iteration.
func TestSolveAny(t *testing.T) {
	for _, devices := range []string{"host:2", "local:2"} {
		if err := offload.Start(offload.WithDevices(devices), offload.WithOffload("MANDATORY")); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct{ n, iters, parts int }{{10, 7, 2}, {33, 12, 5}} {
			want, _ := Reference(c.n, c.iters)
			grid, _, err := SolveAny(c.parts, c.n, c.iters)
			if err != nil {
				t.Fatalf("%s: %+v: %v", devices, c, err)
			}
			if err := Check(grid, want, c.n); err != nil {
				t.Errorf("%s: %+v: %v", devices, c, err)
			}
		}
		if err := offload.Stop(); err != nil {
			t.Fatal(err)
		}
	}
}
