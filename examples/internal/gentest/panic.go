package gentest

import (
	"fmt"

	"github.com/goffload/offload"
)

// Sqrts writes the square roots of x, and panics, as examples/apps/cholesky's
// potrf does, at an element that is negative.
var Sqrts = offload.MustKernel2("gentest.sqrts", func(ctx offload.Ctx, x offload.In[float64], out offload.Out[float64]) {
	ctx.For(len(x), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out[i] = checkedSqrt(x[i], i)
		}
	})
})

func checkedSqrt(v float64, i int) float64 {
	if v < 0 {
		panic(fmt.Sprintf("gentest: negative value %g at %d", v, i))
	}
	return v * v
}
