// Package ptx holds kernels for goffload-gen's PTX: Scale has PTX;
// Growth calls a function that calls math.Exp, which NVPTX has no
// instruction for, so it has OpenCL C only.
package ptx

import (
	"math"

	"github.com/goffload/offload"
)

func twice(x float64) float64 { return 2 * math.Sqrt(x) }

func grow(x float64) float64 { return math.Exp(x) }

var Scale = offload.MustKernel2("scale", func(ctx offload.Ctx, n int, x offload.InOut[float64]) {
	ctx.For(n, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			x[i] = twice(x[i])
		}
	})
})

var Growth = offload.MustKernel2("growth", func(ctx offload.Ctx, n int, x offload.InOut[float64]) {
	ctx.For(n, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			x[i] = grow(twice(x[i]))
		}
	})
})
