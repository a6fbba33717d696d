// Package reduction holds OpenMP's reduction identifiers for
// offload.Reduce: Sum, Prod, Min, Max, BitAnd, BitOr, BitXor, LogicalAnd
// and LogicalOr, and Op, the type of an operator.
// A program declares its own operator (declare reduction) as an Op value.
//
//	r := offload.Reduce(ctx, len(x), reduction.Sum[float64](), func(lo, hi int, acc float64) float64 {
//		for _, v := range x[lo:hi] {
//			acc += v
//		}
//		return acc
//	})
//
// The kernel translator (cmd/goffload-gen) turns the identifiers of this
// package into C; an Op of the program's own stays in Go.
package reduction

import (
	"math"
	"reflect"
)

// Op is a reduction operator. It is one of OpenMP's reduction identifiers
// (Sum, Prod, Min, Max, BitAnd, BitOr, BitXor, LogicalAnd, LogicalOr), or
// one of the program's own, as `#pragma omp declare reduction` declares it.
//
// Combine must be associative, and Identity an identity of it:
// Combine(Identity, x) == x == Combine(x, Identity). OpenMP requires the
// same of the initializer, since every chunk starts from Identity.
// Combine need not be commutative: offload.Reduce combines the chunks'
// results in chunk order.
//
// Identity is given to every chunk by value. A T that holds a slice, map or
// pointer would share what it points to between chunks running at once.
// Use values (numbers, arrays, structs of them), or keep per-chunk storage
// yourself with offload.Ctx's Chunks and ForChunks.
type Op[T any] struct {
	Identity T
	Combine  func(a, b T) T
}

// integer is the integer types: the constraint of the bitwise reductions.
type integer interface {
	~int | ~int8 | ~int16 | ~int32 | ~int64 |
		~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uintptr
}

// ordered is the number types that < orders (cmp.Ordered without
// strings): the constraint of Min and Max.
type ordered interface {
	integer | ~float32 | ~float64
}

// number is the types + and * work on: the constraint of Sum and Prod.
type number interface {
	ordered | ~complex64 | ~complex128
}

// Sum is reduction(+): identity 0. T is an integer, floating-point or
// complex type. (OpenMP's reduction(-) is the same.)
func Sum[T number]() Op[T] {
	return Op[T]{Combine: func(a, b T) T { return a + b }}
}

// Prod is reduction(*): identity 1. T is an integer, floating-point or
// complex type.
func Prod[T number]() Op[T] {
	return Op[T]{Identity: 1, Combine: func(a, b T) T { return a * b }}
}

// Min is reduction(min) of an integer or floating-point T: identity the
// largest value of T (+Inf for floating point). As Go's min does, it returns NaN if any value is NaN.
func Min[T ordered]() Op[T] {
	return Op[T]{Identity: extreme[T](true), Combine: func(a, b T) T { return min(a, b) }}
}

// Max is reduction(max) of an integer or floating-point T: identity the
// smallest value of T (-Inf for floating point). As Go's max does, it returns NaN if any value is NaN.
func Max[T ordered]() Op[T] {
	return Op[T]{Identity: extreme[T](false), Combine: func(a, b T) T { return max(a, b) }}
}

// BitAnd is reduction(&) of an integer T: identity all ones (^0).
func BitAnd[T integer]() Op[T] {
	var zero T
	return Op[T]{Identity: ^zero, Combine: func(a, b T) T { return a & b }}
}

// BitOr is reduction(|) of an integer T: identity 0.
func BitOr[T integer]() Op[T] {
	return Op[T]{Combine: func(a, b T) T { return a | b }}
}

// BitXor is reduction(^) of an integer T: identity 0.
func BitXor[T integer]() Op[T] {
	return Op[T]{Combine: func(a, b T) T { return a ^ b }}
}

// LogicalAnd is reduction(&&): identity true.
func LogicalAnd() Op[bool] {
	return Op[bool]{Identity: true, Combine: func(a, b bool) bool { return a && b }}
}

// LogicalOr is reduction(||): identity false.
func LogicalOr() Op[bool] {
	return Op[bool]{Combine: func(a, b bool) bool { return a || b }}
}

// extreme is the largest (or smallest) value of T: ±Inf for floating
// point, the largest or smallest integer of T's size otherwise.
func extreme[T ordered](largest bool) T {
	var v T
	rv := reflect.ValueOf(&v).Elem()
	bits := rv.Type().Bits()
	switch rv.Kind() {
	case reflect.Float32, reflect.Float64:
		if largest {
			rv.SetFloat(math.Inf(1))
		} else {
			rv.SetFloat(math.Inf(-1))
		}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if largest {
			rv.SetInt(math.MaxInt64 >> (64 - bits))
		} else {
			rv.SetInt(math.MinInt64 >> (64 - bits))
		}
	default: // unsigned
		if largest {
			rv.SetUint(math.MaxUint64 >> (64 - bits))
		}
	}
	return v
}
