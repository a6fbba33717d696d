// Package unchecked is package genk's kernels translated without Go's
// checks (goffload-gen -unchecked), for bench -suite opencl's rows of
// what the checks cost.
package unchecked

//go:generate go run github.com/goffload/offload/cmd/goffload-gen -unchecked -ptx off

import (
	"math"

	"github.com/goffload/offload"
	"github.com/goffload/offload/bench/internal/genk"
)

// Saxpy is examples/saxpy's kernel: y += a x.
var Saxpy = offload.MustKernel4("genk.unchecked.saxpy", func(ctx offload.Ctx, n int, a float32, x offload.In[float32], y offload.InOut[float32]) {
	ctx.For(n, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			y[i] += a * x[i]
		}
	})
})

// Jacobi is examples/apps/jacobi's step over the rows' interior.
var Jacobi = offload.MustKernel4("genk.unchecked.jacobi", func(ctx offload.Ctx, next offload.InOut[float64], cur offload.In[float64], cols, rows int) {
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

// Gemm is examples/apps/cholesky's gemm: c -= a btᵀ on b×b tiles.
var Gemm = offload.MustKernel4("genk.unchecked.gemm", func(ctx offload.Ctx, a, bt offload.In[float64], c offload.InOut[float64], b int) {
	ctx.For(b, func(lo, hi int) { gemm(a, bt, c, b, lo, hi) })
})

func gemm(a, bt, c []float64, b, lo, hi int) {
	for i := lo; i < hi; i++ {
		ai := a[i*b : (i+1)*b]
		for j := 0; j < b; j++ {
			bj, t := bt[j*b:(j+1)*b], 0.0
			for k := range ai {
				t += ai[k] * bj[k]
			}
			c[i*b+j] -= t
		}
	}
}

// Body is genk.Body.
type Body = genk.Body

// NBody is bench.nbody's step: one work-item per body.
var NBody = offload.MustKernel6("genk.unchecked.nbody", func(ctx offload.Ctx, pos offload.In[Body], vel offload.InOut[Body], out offload.Out[Body], n int, dt, eps float32) {
	ctx.For(n, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			p := pos[i]
			var ax, ay, az float32
			for j := range n {
				q := pos[j]
				dx, dy, dz := q.X-p.X, q.Y-p.Y, q.Z-p.Z
				r2 := dx*dx + dy*dy + dz*dz + eps
				inv := 1 / float32(math.Sqrt(float64(r2)))
				s := q.W * inv * inv * inv
				ax, ay, az = ax+dx*s, ay+dy*s, az+dz*s
			}
			v := vel[i]
			v.X, v.Y, v.Z = v.X+ax*dt, v.Y+ay*dt, v.Z+az*dt
			vel[i] = v
			out[i] = Body{X: p.X + v.X*dt, Y: p.Y + v.Y*dt, Z: p.Z + v.Z*dt, W: p.W}
		}
	})
})
