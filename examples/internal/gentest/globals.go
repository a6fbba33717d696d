package gentest

import "github.com/goffload/offload"

// Coeffs is a declare target "to" variable: every device has its copy.
var Coeffs = offload.DeclareTarget("gentest.coeffs", []float64{1, 2, 3, 4})

// Table is a declare target "link" variable: a device sees it only while
// the program maps it there.
var Table = offload.DeclareTargetLink("gentest.table", make([]int64, 8))

// UseCoeffs scales x by the device's copy of Coeffs, cyclically.
var UseCoeffs = offload.MustKernel2("gentest.usecoeffs", func(ctx offload.Ctx, x offload.In[float64], out offload.Out[float64]) {
	c := Coeffs.On(ctx)
	ctx.For(len(x), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out[i] = x[i] * c[i%len(c)]
		}
	})
})

// BumpTable adds i to element i of the device's copy of Table, for i < n.
var BumpTable = offload.MustKernel1("gentest.bumptable", func(ctx offload.Ctx, n int) {
	ctx.For(n, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			Table.On(ctx)[i] += int64(i)
		}
	})
})
