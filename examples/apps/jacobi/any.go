package jacobi

import (
	"context"
	"time"

	"github.com/goffload/offload"
)

// Band computes the rows of next from cur, a band of the grid each: next
// holds the band's rows (cols columns each), cur the same rows with one
// more above and below. The first and last columns are boundary cells,
// left as they are.
var Band = offload.MustKernel3("jacobi.band", func(ctx offload.Ctx, next offload.InOut[float64], cur offload.In[float64], cols int) {
	ctx.For(len(next)/cols, func(a, b int) {
		for r := a; r < b; r++ {
			up, row, down := cur[r*cols:(r+1)*cols], cur[(r+1)*cols:(r+2)*cols], cur[(r+2)*cols:(r+3)*cols]
			out := next[r*cols : (r+1)*cols]
			for c := 1; c < cols-1; c++ {
				out[c] = 0.25 * (up[c] + down[c] + row[c-1] + row[c+1])
			}
		}
	})
}).Named("next", "cur", "cols")

// Fill sets every cell of an n×n grid to its starting value (Initial).
var Fill = offload.MustKernel2("jacobi.fill", func(ctx offload.Ctx, u offload.Out[float64], n int) {
	ctx.For(n, func(a, b int) {
		for r := a; r < b; r++ {
			for c := range n {
				u[r*n+c] = Initial(r, c, n)
			}
		}
	})
}).Named("u", "n")

// SolveAny runs iters iterations on an n×n grid as Solve does, with every
// task an Any-task (offload.Any): parts bands per iteration, each a task
// that reads its rows and the rows above and below it of one grid and
// writes its rows of the other. The runtime places the bands and moves
// the halo rows between the devices; the program names no device. It
// returns the grid and the time from the first task to the end of
// Taskwait, with the grid back in the program's memory.
func SolveAny(parts, n, iters int) ([]float64, time.Duration, error) {
	if err := CheckSize(n, iters); err != nil {
		return nil, 0, err
	}
	parts = max(1, min(parts, n-2))
	grids := [2][]float64{make([]float64, n*n), make([]float64, n*n)}
	any := offload.Any()
	start := time.Now()
	for _, g := range grids { // on a device: every later task uses a section of it
		Fill.Nowait(any.Nowait(), g, n)
	}
	for it := range iters {
		cur, next := grids[it%2], grids[(it+1)%2]
		for p := range parts {
			lo, hi := 1+p*(n-2)/parts, 1+(p+1)*(n-2)/parts
			Band.Nowait(any.Nowait(), next[lo*n:hi*n], cur[(lo-1)*n:(hi+1)*n], n)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := offload.Taskwait(ctx); err != nil {
		return nil, 0, err
	}
	return grids[iters%2], time.Since(start), nil
}
