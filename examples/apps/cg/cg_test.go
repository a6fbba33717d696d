package cg

import (
	"errors"
	"strings"
	"testing"

	"github.com/goffload/offload"
)

// TestSolve runs the iteration on a host device for small grids and checks
// x against Reference, and that the solver does solve: with enough
// iterations the residual is tiny.
func TestSolve(t *testing.T) {
	if err := offload.Start(offload.WithDevices("host"), offload.WithOffload("MANDATORY")); err != nil {
		t.Fatal(err)
	}
	defer offload.Stop()
	dev := offload.On(0)
	for _, c := range []struct{ n, iters int }{{1, 1}, {5, 0}, {7, 5}, {16, 30}, {33, 20}} {
		want, _, err := Reference(c.n, c.iters)
		if err != nil {
			t.Fatalf("Reference(%d, %d): %v", c.n, c.iters, err)
		}
		x, _, err := Solve(dev, c.n, c.iters)
		if err != nil {
			t.Fatalf("Solve(%d, %d): %v", c.n, c.iters, err)
		}
		if err := Check(x, want); err != nil {
			t.Errorf("n=%d iters=%d: %v", c.n, c.iters, err)
		}
		if dev.IsPresent(x) {
			t.Errorf("n=%d iters=%d: x still present on the device after Solve", c.n, c.iters)
		}
	}
	// CG solves an m-unknown system in m steps in exact arithmetic; the
	// 64-unknown 8×8 grid's Poisson matrix (condition number about 32) is
	// solved to rounding in far fewer.
	x, _, err := Solve(dev, 8, 40)
	if err != nil {
		t.Fatal(err)
	}
	if res := Residual(8, x); !(res < 1e-10) {
		t.Errorf("8×8 grid after 40 iterations: residual %g, want < 1e-10", res)
	}
	if res := Residual(8, make([]float64, 64)); res != 1 {
		t.Errorf("residual of x = 0: %g, want 1", res)
	}
	if _, _, err := Solve(dev, 0, 1); err == nil {
		t.Error("Solve of a 0×0 grid: no error")
	}
	// The 1×1 grid is solved in one step: the next one divides 0 by 0.
	if _, _, err := Solve(dev, 1, 2); !errors.Is(err, ErrBreakdown) {
		t.Errorf("Solve(1, 2): %v, want ErrBreakdown", err)
	}
	if _, _, err := Reference(1, 2); !errors.Is(err, ErrBreakdown) {
		t.Errorf("Reference(1, 2): %v, want ErrBreakdown", err)
	}
}

// TestPoisson: the matrix of a 3×3 grid, row by row.
func TestPoisson(t *testing.T) {
	m := Poisson(3)
	if m.Rows() != 9 || len(m.Col) != 9+2*2*3*2 || m.RowPtr[9] != int32(len(m.Col)) {
		t.Fatalf("3×3 grid: %d rows, %d nonzeros (RowPtr ends at %d); want 9 and 33", m.Rows(), len(m.Col), m.RowPtr[9])
	}
	// Row 4, the middle cell: its four neighbours and itself.
	lo, hi := m.RowPtr[4], m.RowPtr[5]
	if cols, vals := m.Col[lo:hi], m.Val[lo:hi]; !equal(cols, []int32{1, 3, 4, 5, 7}) || !equal(vals, []float64{-1, -1, 4, -1, -1}) {
		t.Errorf("row 4: columns %v, values %v", cols, vals)
	}
	// Row 0, a corner: itself and two neighbours.
	if cols := m.Col[m.RowPtr[0]:m.RowPtr[1]]; !equal(cols, []int32{0, 1, 3}) {
		t.Errorf("row 0: columns %v", cols)
	}
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestCheck: a value off by more than the tolerance is named in the error.
func TestCheck(t *testing.T) {
	want, _, err := Reference(6, 4)
	if err != nil {
		t.Fatal(err)
	}
	x := append([]float64(nil), want...)
	x[7] *= 1 + Tolerance/10
	if err := Check(x, want); err != nil {
		t.Fatalf("Check of x within the tolerance: %v", err)
	}
	x[7] += 1e-3
	if err := Check(x, want); err == nil || !strings.Contains(err.Error(), "x[7]") {
		t.Fatalf("Check of x off at 7 = %v", err)
	}
	if err := Check(x[:5], want); err == nil {
		t.Fatal("Check of a short x: no error")
	}
}
