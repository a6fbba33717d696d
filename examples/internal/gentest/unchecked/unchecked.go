// Package unchecked is gentest's Saxpy and JacobiStep translated without
// Go's checks (goffload-gen -unchecked), for measuring what they cost.
package unchecked

//go:generate go run github.com/goffload/offload/cmd/goffload-gen -unchecked -ptx off

import "github.com/goffload/offload"

// Saxpy is examples/saxpy's kernel, for measuring what the checks cost
// (BenchmarkChecks): gentest.Saxpy is the same body with them.
var Saxpy = offload.MustKernel4("unchecked.saxpy", func(ctx offload.Ctx, n int, a float32, x offload.In[float32], y offload.InOut[float32]) {
	ctx.For(n, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			y[i] += a * x[i]
		}
	})
})

// JacobiStep is examples/apps/jacobi's Step, for BenchmarkChecks.
var JacobiStep = offload.MustKernel4("unchecked.jacobi", func(ctx offload.Ctx, next offload.InOut[float64], cur offload.In[float64], cols, rows int) {
	ctx.For(rows, func(lo, hi int) { stepRows(next, cur, cols, lo+1, hi+1) })
})

func stepRows(next, cur []float64, cols, lo, hi int) {
	for r := lo; r < hi; r++ {
		row, up, down := cur[r*cols:(r+1)*cols], cur[(r-1)*cols:r*cols], cur[(r+1)*cols:(r+2)*cols]
		out := next[r*cols : (r+1)*cols]
		for c := 1; c < cols-1; c++ {
			out[c] = 0.25 * (up[c] + down[c] + row[c-1] + row[c+1])
		}
	}
}
