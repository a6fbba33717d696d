// Package refuse holds kernels outside the subset goffload-gen
// translates: each line marked want must be refused with that text.
package refuse

import (
	"fmt"
	"strings"

	"github.com/goffload/offload"
	"github.com/goffload/offload/reduction"
)

var table = []float32{1, 2}

var scale float32 = 2

type pair struct{ a, b float32 }

func (p pair) sum() float32 { return p.a + p.b }

func fact(n int) int {
	if n < 2 {
		return n
	}
	return n * fact(n-1) // want "call of fact: recursion is not in the subset"
}

func two() (int, int) { return 1, 2 }

var Recursion = offload.MustKernel1("recursion", func(ctx offload.Ctx, out offload.Out[int]) {
	out[0] = fact(5)
})

var Multi = offload.MustKernel1("multi", func(ctx offload.Ctx, out offload.Out[int]) {
	a, _ := two() // want "an assignment of several values from one call"
	out[0] = a
})

var Global = offload.MustKernel1("global", func(ctx offload.Ctx, out offload.Out[float32]) {
	out[0] = scale // want "package-level variable scale: a kernel's inputs are its arguments"
})

var GlobalSlice = offload.MustKernel1("globalslice", func(ctx offload.Ctx, out offload.Out[float32]) {
	out[0] = table[1] // want "package-level slice table"
})

var Strings = offload.MustKernel1("strings", func(ctx offload.Ctx, out offload.Out[int]) {
	out[0] = len(strings.Repeat("x", 3)) // want "len of a string: not in the subset"
})

var Maps = offload.MustKernel1("maps", func(ctx offload.Ctx, out offload.Out[int]) {
	m := map[int]int{} // want "a composite literal of map[int]int: not in the subset (of a struct type)"
	out[0] = m[1]
})

var Goroutine = offload.MustKernel1("goroutine", func(ctx offload.Ctx, out offload.Out[int]) {
	go func() {}() // want "a go statement: not in the subset"
})

var Closure = offload.MustKernel1("closure", func(ctx offload.Ctx, out offload.Out[int]) {
	f := func() int { return 1 } // want "a function literal (a closure): not in the subset"
	out[0] = f()
})

var Method = offload.MustKernel2("method", func(ctx offload.Ctx, p pair, out offload.Out[float32]) {
	out[0] = p.sum() // want "a method call (sum): not in the subset"
})

var Pointer = offload.MustKernel1("pointer", func(ctx offload.Ctx, out offload.Out[int]) {
	x := 1
	p := &x // want "taking an address (&): not in the subset"
	out[0] = *p
})

var Print = offload.MustKernel1("print", func(ctx offload.Ctx, out offload.Out[int]) {
	fmt.Println(out[0]) // want "a call of fmt.Println: not in the subset"
})

var SliceExpr = offload.MustKernel1("sliceexpr", func(ctx offload.Ctx, out offload.Out[int]) {
	out[1:][0] = 1
	s := out[1:]
	s = out // want "slice out used as a value"
	s[0] = 1
})

var SliceVar = offload.MustKernel1("slicevar", func(ctx offload.Ctx, out offload.Out[int]) {
	s := make([]int, 3) // want "a slice made in the kernel (make([]int, 3))"
	out[0] = s[0]
})

var TwoFors = offload.MustKernel1("twofors", func(ctx offload.Ctx, out offload.Out[int]) {
	ctx.For(len(out), func(lo, hi int) {})
	ctx.For(len(out), func(lo, hi int) {}) // want "a second ctx.For"
})

var After = offload.MustKernel1("after", func(ctx offload.Ctx, out offload.Out[int]) {
	ctx.For(len(out), func(lo, hi int) {})
	out[0] = 1 // want "a statement after ctx.For"
})

var Before = offload.MustKernel1("before", func(ctx offload.Ctx, out offload.Out[int]) {
	out[0] = 1 // want "a buffer written before ctx.For"
	ctx.For(len(out), func(lo, hi int) {})
})

var Captured = offload.MustKernel1("captured", func(ctx offload.Ctx, out offload.Out[int]) {
	sum := 0
	ctx.For(len(out), func(lo, hi int) {
		sum += hi - lo // want "assignment to sum, a variable from outside ctx.For's body"
	})
})

var Cores = offload.MustKernel1("cores", func(ctx offload.Ctx, out offload.Out[int]) {
	out[0] = ctx.Cores() // want "ctx.Cores: only ctx.For, ctx.ForChunks and ctx.Device, and offload.Reduce(ctx, …), are in the subset"
})

var Nested = offload.MustKernel1("nested", func(ctx offload.Ctx, out offload.Out[int]) {
	if len(out) > 0 {
		ctx.For(len(out), func(lo, hi int) {}) // want "ctx.For inside a statement"
	}
})

var Defer = offload.MustKernel1("defer", func(ctx offload.Ctx, out offload.Out[int]) {
	defer func() {}() // want "defer: not in the subset"
})

var Goto = offload.MustKernel1("goto", func(ctx offload.Ctx, out offload.Out[int]) {
	for i := range out {
		switch i {
		case 0:
			fallthrough // want "fallthrough: not in the subset"
		case 1:
			out[i] = 1
		}
	}
})

var Complex = offload.MustKernel2("complex", func(ctx offload.Ctx, c complex128, out offload.Out[float64]) { // want "parameter 0 (complex128): not in the subset"
	out[0] = real(c)
})

var Recover = offload.MustKernel1("recover", func(ctx offload.Ctx, out offload.Out[int]) {
	recover() // want "builtin recover: not in the subset"
})

var MathFunc = offload.MustKernel1("mathfunc", func(ctx offload.Ctx, out offload.Out[float64]) {
	out[0] = mathJ0(1)
})

func mathJ0(x float64) float64 {
	return fact2(x) // want "a call of fact2: not in the subset"
}

var fact2 = func(x float64) float64 { return x }

var HandWritten = offload.MustKernel1("handwritten", func(ctx offload.Ctx, out offload.Out[int]) { // want "has hand-written OpenCL C (.OpenCL): left as it is"
	out[0] = 1
}).OpenCL([]byte("kernel void k(global long *o) {}"), "k")

// Fine is translated: the refusals above leave it alone.
var Fine = offload.MustKernel2("fine", func(ctx offload.Ctx, a float32, out offload.Out[float32]) {
	ctx.For(len(out), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out[i] = a * float32(i)
		}
	})
})

var Anonymous = offload.MustKernel1("anonymous", func(ctx offload.Ctx, out offload.Out[int]) {
	var s struct{ a int } // want "a variable s of an unnamed struct type: not in the subset"
	out[0] = s.a
})

type holder struct{ p *int }

var PointerField = offload.MustKernel1("pointerfield", func(ctx offload.Ctx, out offload.Out[int]) {
	var h holder // want "struct holder: field p of type *int: not in the subset"
	out[0] = *h.p
})

var UserOp = offload.MustKernel2("userop", func(ctx offload.Ctx, x offload.In[float64], out offload.Out[float64]) {
	op := reduction.Op[float64]{Combine: func(a, b float64) float64 { return a + b }} // want "a user-defined Op (reduction.Op[float64]{…}): not in the subset (package reduction's identifiers"
	out[0] = offload.Reduce(ctx, len(x), op, func(lo, hi int, acc float64) float64 { return acc })
})

var NestedReduce = offload.MustKernel2("nestedreduce", func(ctx offload.Ctx, x offload.In[float64], out offload.Out[float64]) {
	out[0] = 2 * offload.Reduce(ctx, len(x), reduction.Sum[float64](), func(lo, hi int, acc float64) float64 { return acc }) // want "offload.Reduce inside an expression or statement"
})

var TwoReduces = offload.MustKernel2("tworeduces", func(ctx offload.Ctx, x offload.In[float64], out offload.Out[float64]) {
	out[0] = offload.Reduce(ctx, len(x), reduction.Sum[float64](), func(lo, hi int, acc float64) float64 { return acc })
	out[1] = offload.Reduce(ctx, len(x), reduction.Max[float64](), func(lo, hi int, acc float64) float64 { return acc }) // want "a second offload.Reduce"
})

var OpStatement = offload.MustKernel1("opstatement", func(ctx offload.Ctx, out offload.Out[float64]) {
	reduction.Sum[float64]() // want "reduction.Sum used other than to define an Op variable or as Reduce's op"
	out[0] = 1
})
