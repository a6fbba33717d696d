package reduction_test

import (
	"math"
	"testing"

	"github.com/goffload/offload/reduction"
)

// fold combines xs from op's identity, as one chunk of offload.Reduce does.
func fold[T any](op reduction.Op[T], xs ...T) T {
	r := op.Identity
	for _, x := range xs {
		r = op.Combine(r, x)
	}
	return r
}

// TestIdentities: each identifier's identity is OpenMP's initializer, and
// Combine is its operator.
func TestIdentities(t *testing.T) {
	check := func(what string, got, want any) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %v, want %v", what, got, want)
		}
	}
	check("Sum[int]().Identity", reduction.Sum[int]().Identity, 0)
	check("Sum[float64] of 1.5, 2", fold(reduction.Sum[float64](), 1.5, 2), 3.5)
	check("Sum[complex128] of 1i, 2", fold(reduction.Sum[complex128](), 1i, 2), 2+1i)
	check("Prod[int8]().Identity", reduction.Prod[int8]().Identity, int8(1))
	check("Prod[int] of 2, 3, 4", fold(reduction.Prod[int](), 2, 3, 4), 24)
	check("Min[int8]().Identity", reduction.Min[int8]().Identity, int8(math.MaxInt8))
	check("Min[uint16]().Identity", reduction.Min[uint16]().Identity, uint16(math.MaxUint16))
	check("Min[float32]().Identity", reduction.Min[float32]().Identity, float32(math.Inf(1)))
	check("Max[int64]().Identity", reduction.Max[int64]().Identity, int64(math.MinInt64))
	check("Max[uint]().Identity", reduction.Max[uint]().Identity, uint(0))
	check("Max[float64]().Identity", reduction.Max[float64]().Identity, math.Inf(-1))
	check("Min[int] of 3, -2, 5", fold(reduction.Min[int](), 3, -2, 5), -2)
	check("Max[int] of 3, -2, 5", fold(reduction.Max[int](), 3, -2, 5), 5)
	check("BitAnd[uint8]().Identity", reduction.BitAnd[uint8]().Identity, uint8(0xff))
	check("BitAnd[int32]().Identity", reduction.BitAnd[int32]().Identity, int32(-1))
	check("BitOr[uint8] of 1, 4", fold(reduction.BitOr[uint8](), 1, 4), uint8(5))
	check("BitXor[uint8] of 3, 5", fold(reduction.BitXor[uint8](), 3, 5), uint8(6))
	check("LogicalAnd of true, false", fold(reduction.LogicalAnd(), true, false), false)
	check("LogicalAnd().Identity", reduction.LogicalAnd().Identity, true)
	check("LogicalOr of false, true", fold(reduction.LogicalOr(), false, true), true)
	check("LogicalOr().Identity", reduction.LogicalOr().Identity, false)
	if r := fold(reduction.Min[float64](), 1, math.NaN()); !math.IsNaN(r) {
		t.Errorf("Min of 1, NaN = %v, want NaN (as Go's min)", r)
	}
}
