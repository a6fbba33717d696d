// Package gentest holds Go kernels that goffload-gen translates, for the
// tests of internal/kernelgen: each runs on a host device and, from its
// generated OpenCL C, on PoCL, and the two must agree bit for bit.
package gentest

//go:generate go run github.com/goffload/offload/cmd/goffload-gen

import (
	"math"

	"github.com/goffload/offload"
)

// Int32Ops writes eight results of Go's int32 arithmetic per element:
// wrapping + - *, truncating / and % (MinInt32 / -1 included), shifts by
// counts past the width, and bit operations.
var Int32Ops = offload.MustKernel3("int32ops", func(ctx offload.Ctx, a offload.In[int32], b offload.In[int32], out offload.Out[int32]) {
	ctx.For(len(a), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			x, y := a[i], b[i]
			out[8*i] = x + y
			out[8*i+1] = x - y*3
			out[8*i+2] = x * y
			if y != 0 {
				out[8*i+3] = x / y
				out[8*i+4] = x % y
			} else {
				out[8*i+3], out[8*i+4] = 0, 0
			}
			s := uint(y & 63)
			out[8*i+5] = x << s
			out[8*i+6] = x >> s
			out[8*i+7] = x&^y ^ (x | y) + -x
		}
	})
})

// Int64Ops is Int32Ops for int64, with a signed shift count.
var Int64Ops = offload.MustKernel3("int64ops", func(ctx offload.Ctx, a offload.In[int64], b offload.In[int64], out offload.Out[int64]) {
	ctx.For(len(a), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			x, y := a[i], b[i]
			out[8*i] = x + y
			out[8*i+1] = x - y
			out[8*i+2] = x * y
			if y != 0 {
				out[8*i+3] = x / y
				out[8*i+4] = x % y
			} else {
				out[8*i+3], out[8*i+4] = 0, 0
			}
			s := y & 127
			out[8*i+5] = x << s
			out[8*i+6] = x >> s
			out[8*i+7] = ^x ^ y<<3 ^ y>>(s+60)
		}
	})
})

// SmallOps is the arithmetic of the narrow types, which C promotes to
// int: int8 and uint16.
var SmallOps = offload.MustKernel3("smallops", func(ctx offload.Ctx, a offload.In[int8], b offload.In[uint16], out offload.Out[int64]) {
	ctx.For(len(a), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			x, y := a[i], b[i]
			var x2 int8 = x * x * 3
			y2 := y * y * 7
			q := int8(-128)
			if x != 0 {
				q /= x
			}
			out[4*i] = int64(x2)
			out[4*i+1] = int64(y2)
			out[4*i+2] = int64(q) + int64(x<<(uint(y)&15))
			out[4*i+3] = int64(uint8(x)>>3) + int64(y>>(uint(x)&31))
		}
	})
})

// FloatOps is float32's + - * /, the square root (correctly rounded both
// ways), min, max and a product and sum that a fused multiply-add would
// round once.
var FloatOps = offload.MustKernel3("floatops", func(ctx offload.Ctx, a offload.In[float32], b offload.In[float32], out offload.Out[float32]) {
	ctx.For(len(a), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			x, y := a[i], b[i]
			out[8*i] = x + y
			out[8*i+1] = x - y
			out[8*i+2] = x * y
			out[8*i+3] = x / y
			out[8*i+4] = float32(math.Sqrt(float64(x)))
			out[8*i+5] = min(x, y)
			out[8*i+6] = max(x, y, 0.5)
			out[8*i+7] = x*y + x
		}
	})
})

// DoubleOps is float64's exact operations and the math functions that
// are exact: Sqrt, Abs, Floor, Ceil, Trunc, Max, Min, Copysign, the bits.
var DoubleOps = offload.MustKernel3("doubleops", func(ctx offload.Ctx, a offload.In[float64], b offload.In[float64], out offload.Out[float64]) {
	ctx.For(len(a), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			x, y := a[i], b[i]
			out[8*i] = x*y - x/y
			out[8*i+1] = math.Sqrt(math.Abs(x))
			out[8*i+2] = math.Floor(x) + math.Ceil(y)*2 + math.Trunc(x*y)
			out[8*i+3] = math.Max(x, y)
			out[8*i+4] = math.Min(x, y)
			out[8*i+5] = math.Copysign(x, y)
			out[8*i+6] = math.Float64frombits(math.Float64bits(x) ^ 1)
			out[8*i+7] = float64(float32(x)) + float64(int32(y))
		}
	})
})

// collatz is the number of Collatz steps from x to 1, at most limit: a
// loop with break, continue and a switch.
func collatz(x int64, limit int32) int32 {
	steps := int32(0)
	for x != 1 {
		if steps == limit {
			break
		}
		steps++
		switch {
		case x <= 0:
			return -1
		case x%2 == 0:
			x /= 2
			continue
		}
		x = 3*x + 1
	}
	return steps
}

// Collatz writes collatz of every element, by a package-level function.
var Collatz = offload.MustKernel3("collatz", func(ctx offload.Ctx, limit int32, x offload.In[int64], steps offload.Out[int32]) {
	ctx.For(len(x), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			steps[i] = collatz(x[i], limit)
		}
	})
})

// mandel is the escape time of c = (re, im), at most max.
func mandel(re, im float64, limit int) int {
	zr, zi := 0.0, 0.0
	for k := range limit {
		if zr*zr+zi*zi > 4 {
			return k
		}
		zr, zi = zr*zr-zi*zi+re, 2*zr*zi+im
	}
	return limit
}

// Mandelbrot writes the escape times of a w×h grid over [-2, 1]×[-1, 1].
var Mandelbrot = offload.MustKernel4("mandelbrot", func(ctx offload.Ctx, w, h int, limit int, out offload.Out[int32]) {
	ctx.For(w*h, func(lo, hi int) {
		for p := lo; p < hi; p++ {
			re := -2 + 3*float64(p%w)/float64(w)
			im := -1 + 2*float64(p/w)/float64(h)
			out[p] = int32(mandel(re, im, limit))
		}
	})
})

// Histogram counts x's values by their low four bits, on one work-item
// (no ctx.For), with a local array, range loops and a labeled continue.
var Histogram = offload.MustKernel2("histogram", func(ctx offload.Ctx, x offload.In[uint8], out offload.Out[int32]) {
	var counts [16]int32
	var pairs [4][4]int32
outer:
	for i, v := range x {
		for j := range 3 {
			if v == uint8(250+j) {
				continue outer
			}
		}
		counts[v&15]++
		pairs[v&3][i&3] += int32(v >> 4)
	}
	//lint:ignore S1001 copy is not in the subset goffload-gen translates
	for k, c := range counts {
		out[k] = c
	}
	for a := range 4 {
		for b := 0; b < 4; b++ {
			out[16+4*a+b] = pairs[a][b]
		}
	}
})

// Convert is Go's conversions between integers and floats (in range) and
// booleans in buffers.
var Convert = offload.MustKernel4("convert", func(ctx offload.Ctx, neg bool, a offload.In[float64], flags offload.Out[bool], out offload.Out[int64]) {
	ctx.For(len(a), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			x := a[i]
			if neg {
				x = -x
			}
			n := int64(x)
			out[4*i] = n
			out[4*i+1] = int64(int8(n)) + int64(uint16(n))
			out[4*i+2] = int64(uint32(n) * 3)
			out[4*i+3] = int64(float32(x) * 1e3)
			flags[i] = n > 0 && x != float64(n) || n == 0
		}
	})
})

// Gather writes x[idx[i]]: an index out of range fails the launch.
var Gather = offload.MustKernel3("gather", func(ctx offload.Ctx, idx offload.In[int], x offload.In[float32], out offload.Out[float32]) {
	ctx.For(len(idx), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out[i] = x[idx[i]]
		}
	})
})

// Divide writes a[i] / b[i]: a zero divisor fails the launch.
var Divide = offload.MustKernel3("divide", func(ctx offload.Ctx, a offload.In[int], b offload.In[int], out offload.Out[int]) {
	ctx.For(len(a), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out[i] = a[i] / b[i]
		}
	})
})

// at is x[i], checked in a function the kernel calls.
func at(x []float32, i int) float32 { return x[i] }

// GatherCall is Gather through a function: the fault is the function's.
var GatherCall = offload.MustKernel3("gathercall", func(ctx offload.Ctx, idx offload.In[int], x offload.In[float32], out offload.Out[float32]) {
	ctx.For(len(idx), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out[i] = at(x, idx[i])
		}
	})
})

// Overflow compares x+1 with x: false at MaxInt32 and MaxInt64 in Go,
// where C's compilers take signed overflow for impossible and fold the
// comparison to true.
var Overflow = offload.MustKernel3("overflow", func(ctx offload.Ctx, a offload.In[int32], b offload.In[int64], out offload.Out[int32]) {
	ctx.For(len(a), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			r := int32(0)
			if a[i]+1 > a[i] {
				r |= 1
			}
			if b[i]*2/2 == b[i] {
				r |= 2
			}
			out[i] = r
		}
	})
})
