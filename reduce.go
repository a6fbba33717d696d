package offload

import "github.com/goffload/offload/reduction"

// Chunk is one chunk of a loop that Ctx.ForChunks splits: chunk number
// Index of the Count chunks of [0, n), over [Lo, Hi). See Ctx for how a
// loop is split.
type Chunk struct {
	// Index is the chunk's number, from 0 to Count-1, in the order of the
	// ranges.
	Index, Count int
	// Lo and Hi bound the chunk's range [Lo, Hi) of [0, n).
	Lo, Hi int
}

// Reduce is a parallel loop with OpenMP's reduction clause, for a kernel.
// It splits [0, n) as ctx.For does and calls body(lo, hi, op.Identity) once
// per chunk. body returns the chunk's partial result: acc combined with the
// values of [lo, hi). Reduce returns the chunks' results combined in chunk
// order with op.Combine, or op.Identity when n <= 0. Each chunk writes its
// result to its own slot, so neither body nor Reduce takes a lock.
//
// The result depends only on n, ctx.Cores() and the values: it is the same
// on every run. With a floating-point reduction.Sum it is the sum in the chunks'
// grouping. That may differ in the last bits from a sequential loop's, or
// from a device's with another number of cores.
//
// A kernel shares no variables with the host, so it writes the result to
// an output slice. OpenMP's reduction(+:sum) also combines the result with
// sum's value before the construct. With the slice mapped ToFrom,
// out[0] = op.Combine(out[0], r) does the same. With it mapped From,
// out[0] = r overwrites it:
//
//	var Total = offload.MustKernel("total", func(ctx offload.Ctx, x []float64, out []float64) {
//		op := reduction.Sum[float64]()
//		r := offload.Reduce(ctx, len(x), op, func(lo, hi int, acc float64) float64 {
//			for _, v := range x[lo:hi] {
//				acc += v
//			}
//			return acc
//		})
//		out[0] = op.Combine(out[0], r)
//	})
//
//	err := offload.Run(Total, offload.To(x), offload.ToFrom(sum[:]))
//
// Several reductions in one loop are one reduction.Op over a struct of them (see
// the argmax example). op.Combine must not be nil.
func Reduce[T any](ctx Ctx, n int, op reduction.Op[T], body func(lo, hi int, acc T) T) T {
	if op.Combine == nil {
		panic("offload.Reduce: the Op's Combine is nil")
	}
	k := ctx.Chunks(n)
	if k <= 0 {
		return op.Identity
	}
	parts := make([]T, k)
	ctx.ForChunks(n, func(c Chunk) { parts[c.Index] = body(c.Lo, c.Hi, op.Identity) })
	r := parts[0]
	for _, p := range parts[1:] {
		r = op.Combine(r, p)
	}
	return r
}
