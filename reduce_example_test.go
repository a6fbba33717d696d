package offload_test

import (
	"fmt"
	"math"

	"github.com/goffload/offload"
	"github.com/goffload/offload/reduction"
)

// Total is sum += x[i] over x: reduction(+:sum), with sum in total[0].
var Total = offload.MustKernel("reduce.example.total", func(ctx offload.Ctx, x []float64, total []float64) {
	op := reduction.Sum[float64]()
	r := offload.Reduce(ctx, len(x), op, func(lo, hi int, acc float64) float64 {
		for _, v := range x[lo:hi] {
			acc += v
		}
		return acc
	})
	total[0] = op.Combine(total[0], r) // like OpenMP, add to the value before the kernel
})

// Range is reduction(min:lo) reduction(max:hi), written to out (mapped
// from: the kernel overwrites it).
var Range = offload.MustKernel("reduce.example.range", func(ctx offload.Ctx, x []int32, out []int32) {
	out[0] = offload.Reduce(ctx, len(x), reduction.Min[int32](), func(lo, hi int, acc int32) int32 {
		for _, v := range x[lo:hi] {
			acc = min(acc, v)
		}
		return acc
	})
	out[1] = offload.Reduce(ctx, len(x), reduction.Max[int32](), func(lo, hi int, acc int32) int32 {
		for _, v := range x[lo:hi] {
			acc = max(acc, v)
		}
		return acc
	})
})

// A #pragma omp target parallel for reduction(+:sum) map(tofrom: sum), and
// a min and max whose results overwrite the output.
func ExampleReduce() {
	if err := offload.Start(offload.WithDevices("host")); err != nil {
		fmt.Println(err)
		return
	}
	defer offload.Stop()

	x := make([]float64, 1000)
	for i := range x {
		x[i] = float64(i + 1)
	}
	total := []float64{0.5} // the sum starts from 0.5
	err := offload.On(0).Run(Total, offload.To(x), offload.ToFrom(total))
	fmt.Println(total[0], err)

	y := []int32{4, -7, 12, 0, 9}
	out := make([]int32, 2)
	err = offload.On(0).Run(Range, offload.To(y), offload.From(out))
	fmt.Println(out, err)
	// Output:
	// 500500.5 <nil>
	// [-7 12] <nil>
}

// Best is a value and where it is: the result of an argmax.
type Best struct {
	Value float64
	Index int
}

// ArgMax is a user-defined reduction (#pragma omp declare reduction): the
// largest value and its first index. Combine keeps a on a tie: a comes from
// the earlier chunk, so the first index wins.
var ArgMax = reduction.Op[Best]{
	Identity: Best{Value: math.Inf(-1), Index: -1},
	Combine: func(a, b Best) Best {
		if b.Value > a.Value {
			return b
		}
		return a
	},
}

var Peak = offload.MustKernel("reduce.example.peak", func(ctx offload.Ctx, x []float64, out []Best) {
	out[0] = offload.Reduce(ctx, len(x), ArgMax, func(lo, hi int, acc Best) Best {
		for i := lo; i < hi; i++ {
			acc = ArgMax.Combine(acc, Best{x[i], i})
		}
		return acc
	})
})

// A user-defined reduction over a struct: where is the largest value?
func ExampleOp() {
	if err := offload.Start(offload.WithDevices("host")); err != nil {
		fmt.Println(err)
		return
	}
	defer offload.Stop()

	x := []float64{3, 9, 1, 9, 4, 2, 9, 0}
	out := make([]Best, 1)
	err := offload.On(0).Run(Peak, offload.To(x), offload.From(out))
	fmt.Printf("%+v %v\n", out[0], err)
	// Output: {Value:9 Index:1} <nil>
}

// Scan is an inclusive prefix sum in two loops over the same chunks: each
// chunk sums its part, the chunks' sums become offsets in chunk order, and
// each chunk then scans its part from its offset. The chunk numbers tie the
// two loops together: For(n) splits [0, n) the same way every time.
var Scan = offload.MustKernel("reduce.example.scan", func(ctx offload.Ctx, x []int64) {
	offsets := make([]int64, ctx.Chunks(len(x)))
	ctx.ForChunks(len(x), func(c offload.Chunk) {
		for _, v := range x[c.Lo:c.Hi] {
			offsets[c.Index] += v
		}
	})
	var run int64
	for i, s := range offsets { // exclusive scan of the chunks' sums
		offsets[i], run = run, run+s
	}
	ctx.ForChunks(len(x), func(c offload.Chunk) {
		acc := offsets[c.Index]
		for i := c.Lo; i < c.Hi; i++ {
			acc += x[i]
			x[i] = acc
		}
	})
})

// ForChunks tells each chunk its number, so per-chunk results can go to
// their own slots without a lock.
func ExampleCtx_ForChunks() {
	if err := offload.Start(offload.WithDevices("host")); err != nil {
		fmt.Println(err)
		return
	}
	defer offload.Stop()

	x := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	err := offload.On(0).Run(Scan, offload.ToFrom(x))
	fmt.Println(x, err)
	// Output: [1 3 6 10 15 21 28 36 45 55] <nil>
}
