package gentest

import (
	"github.com/goffload/offload"
	"github.com/goffload/offload/reduction"
)

// SumF64 is offload.Reduce's example: the sum of x, combined with out[0]
// (mapped ToFrom, as reduction(+:sum)).
var SumF64 = offload.MustKernel2("gentest.sumf64", func(ctx offload.Ctx, x offload.In[float64], out offload.InOut[float64]) {
	op := reduction.Sum[float64]()
	r := offload.Reduce(ctx, len(x), op, func(lo, hi int, acc float64) float64 {
		for _, v := range x[lo:hi] {
			acc += v
		}
		return acc
	})
	out[0] = op.Combine(out[0], r)
})

// SumF32 sums a function of x's elements in float32, into a variable
// declared before the Reduce (r = offload.Reduce(…)).
var SumF32 = offload.MustKernel3("gentest.sumf32", func(ctx offload.Ctx, scale float32, x offload.In[float32], out offload.Out[float32]) {
	var r float32
	n := len(x) - 1
	r = offload.Reduce(ctx, n, reduction.Sum[float32](), func(lo, hi int, acc float32) float32 {
		for i := lo; i < hi; i++ {
			acc += scaled(x[i+1], scale) - x[i]
		}
		return acc
	})
	out[0] = r
	out[1] = float32(n)
})

func scaled(v, s float32) float32 { return v * s }

// SumI32 is a wrapping int32 Sum.
var SumI32 = offload.MustKernel2("gentest.sumi32", func(ctx offload.Ctx, x offload.In[int32], out offload.Out[int64]) {
	s := offload.Reduce(ctx, len(x), reduction.Sum[int32](), func(lo, hi int, acc int32) int32 {
		for i := lo; i < hi; i++ {
			acc += x[i] * 7
		}
		return acc
	})
	out[0] = int64(s)
})

// ProdI8 is a wrapping int8 Prod.
var ProdI8 = offload.MustKernel2("gentest.prodi8", func(ctx offload.Ctx, y offload.In[int8], out offload.Out[int64]) {
	prod := reduction.Prod[int8]()
	p := offload.Reduce(ctx, len(y), prod, func(lo, hi int, acc int8) int8 {
		for i := lo; i < hi; i++ {
			acc = prod.Combine(acc, y[i]|1)
		}
		return acc
	})
	out[0] = int64(p)
})

// MinF64 is Min of float64 (NaN and ±0 as Go's min), and its identity.
var MinF64 = offload.MustKernel2("gentest.minf64", func(ctx offload.Ctx, x offload.In[float64], out offload.Out[float64]) {
	mn := reduction.Min[float64]()
	out[0] = offload.Reduce(ctx, len(x), mn, func(lo, hi int, acc float64) float64 {
		for i := lo; i < hi; i++ {
			acc = mn.Combine(acc, x[i])
		}
		return acc
	})
	out[1] = mn.Identity
})

// MaxF64 is Max of float64, with the builtin max in the body.
var MaxF64 = offload.MustKernel2("gentest.maxf64", func(ctx offload.Ctx, x offload.In[float64], out offload.Out[float64]) {
	out[0] = offload.Reduce(ctx, len(x), reduction.Max[float64](), func(lo, hi int, acc float64) float64 {
		for i := lo; i < hi; i++ {
			acc = max(acc, x[i])
		}
		return acc
	})
})

// MinMaxU16 is Min of uint16, and Min's and Max's identities.
var MinMaxU16 = offload.MustKernel2("gentest.minmaxu16", func(ctx offload.Ctx, x offload.In[uint16], out offload.Out[uint16]) {
	mn, mx := reduction.Min[uint16](), reduction.Max[uint16]()
	out[0] = offload.Reduce(ctx, len(x), mn, func(lo, hi int, acc uint16) uint16 {
		for i := lo; i < hi; i++ {
			acc = mn.Combine(acc, x[i])
		}
		return acc
	})
	out[1], out[2] = mn.Identity, mx.Identity
})

// Bits is BitAnd of uint64, and its identity.
var Bits = offload.MustKernel2("gentest.bits", func(ctx offload.Ctx, x offload.In[uint64], out offload.Out[uint64]) {
	and := reduction.BitAnd[uint64]()
	r := offload.Reduce(ctx, len(x), and, func(lo, hi int, acc uint64) uint64 {
		for i := lo; i < hi; i++ {
			acc = and.Combine(acc, x[i]|(1<<(i%64)))
		}
		return acc
	})
	out[0] = r
	out[1] = and.Identity
})

// BitOr is BitOr of uint64.
var BitOr = offload.MustKernel2("gentest.bitor", func(ctx offload.Ctx, x offload.In[uint64], out offload.Out[uint64]) {
	or := reduction.BitOr[uint64]()
	out[0] = offload.Reduce(ctx, len(x), or, func(lo, hi int, acc uint64) uint64 {
		for i := lo; i < hi; i++ {
			acc = or.Combine(acc, x[i]&0xF0F0)
		}
		return acc
	})
})

// BitXor is BitXor of uint64, with ^= in the body.
var BitXor = offload.MustKernel2("gentest.bitxor", func(ctx offload.Ctx, x offload.In[uint64], out offload.Out[uint64]) {
	xor := reduction.BitXor[uint64]()
	out[0] = offload.Reduce(ctx, len(x), xor, func(lo, hi int, acc uint64) uint64 {
		for i := lo; i < hi; i++ {
			acc ^= x[i]
		}
		return acc
	})
})

// Logical is LogicalAnd over b.
var Logical = offload.MustKernel2("gentest.logical", func(ctx offload.Ctx, b offload.In[bool], out offload.Out[bool]) {
	all := offload.Reduce(ctx, len(b), reduction.LogicalAnd(), func(lo, hi int, acc bool) bool {
		for i := lo; i < hi; i++ {
			acc = acc && b[i]
		}
		return acc
	})
	out[0] = all
})

// LogicalOr is LogicalOr over b, with an early return, and its identity.
var LogicalOr = offload.MustKernel2("gentest.logicalor", func(ctx offload.Ctx, b offload.In[bool], out offload.Out[bool]) {
	any := reduction.LogicalOr()
	out[0] = offload.Reduce(ctx, len(b), any, func(lo, hi int, acc bool) bool {
		for i := lo; i < hi; i++ {
			if b[i] {
				return true
			}
		}
		return acc
	})
	out[1] = any.Identity
})

// ReduceFault reads one element past its chunk: the last chunk's read
// is out of range.
var ReduceFault = offload.MustKernel2("gentest.reducefault", func(ctx offload.Ctx, x offload.In[int64], out offload.Out[int64]) {
	out[0] = offload.Reduce(ctx, len(x), reduction.Sum[int64](), func(lo, hi int, acc int64) int64 {
		for i := lo; i < hi; i++ {
			acc += x[i+1]
		}
		return acc
	})
})

// DeviceNum writes ctx.Device() (before ctx.For and inside it) into out.
var DeviceNum = offload.MustKernel1("gentest.devicenum", func(ctx offload.Ctx, out offload.Out[int64]) {
	d := int64(ctx.Device())
	ctx.For(len(out), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out[i] = d*1000 + int64(i) + int64(ctx.Device())*1000000
		}
	})
})

// DeviceSum is a Reduce whose tail uses ctx.Device().
var DeviceSum = offload.MustKernel2("gentest.devicesum", func(ctx offload.Ctx, x offload.In[int64], out offload.Out[int64]) {
	s := offload.Reduce(ctx, len(x), reduction.Sum[int64](), func(lo, hi int, acc int64) int64 {
		for i := lo; i < hi; i++ {
			acc += x[i] + int64(ctx.Device())
		}
		return acc
	})
	out[0] = s + int64(ctx.Device())*1000000
})
