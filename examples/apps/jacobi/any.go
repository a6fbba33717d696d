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

// FillPair sets every cell of rows first, first+1, … of two n×n grids to
// its starting value (Initial): u and v hold those rows.
var FillPair = offload.MustKernel4("jacobi.fill2", func(ctx offload.Ctx, u, v offload.Out[float64], first, n int) {
	ctx.For(len(u)/n, func(a, b int) {
		for r := a; r < b; r++ {
			for c := range n {
				u[r*n+c] = Initial(first+r, c, n)
				v[r*n+c] = u[r*n+c]
			}
		}
	})
}).Named("u", "v", "first", "n")

// SolveAny runs iters iterations on an n×n grid as Solve does, with every
// task an Any-task (offload.Any) and the same task graph: parts bands per
// iteration, each split as Solve splits a block (when it has neighbours
// and at least three rows) into its first and last rows, which the
// neighbouring bands read, and the rows between, created after every
// band's edge rows so that the halo rows travel while the rows between
// are computed. Each task reads its rows and the rows above and below
// them of one grid and writes its rows of the other. The grids are named
// whole first (Any().EnterData), and a task per band fills that band's
// rows of both, so that the bands may start on different devices. The
// runtime places the tasks and moves the halo rows between the devices;
// the program names no device. It returns the grid and the time from the first task
// to the end of Taskwait, with the grid back in the program's memory.
func SolveAny(parts, n, iters int) ([]float64, time.Duration, error) {
	if err := CheckSize(n, iters); err != nil {
		return nil, 0, err
	}
	parts = max(1, min(parts, n-2))
	grids := [2][]float64{make([]float64, n*n), make([]float64, n*n)}
	any := offload.Any()
	start := time.Now()
	// Both grids are the tasks' whole, so that a band's tasks may read
	// rows of the next band; each band's rows of both start where a task
	// fills them, and the band's later tasks follow them there.
	if err := any.EnterData(offload.To(grids[0]).Named("u"), offload.To(grids[1]).Named("v")); err != nil {
		return nil, 0, err
	}
	// Band p's rows [lo, hi), and whether its edge rows go apart.
	rows := func(p int) (lo, hi int, split bool) {
		lo, hi = 1+p*(n-2)/parts, 1+(p+1)*(n-2)/parts
		return lo, hi, parts > 1 && hi-lo >= 3
	}
	for p := range parts {
		lo, hi, _ := rows(p)
		if p == 0 {
			lo = 0 // and the boundary rows
		}
		if p == parts-1 {
			hi = n
		}
		FillPair.Nowait(any.Nowait(), grids[0][lo*n:hi*n], grids[1][lo*n:hi*n], lo, n)
	}
	// rows [lo, hi) of next from cur.
	band := func(next, cur []float64, lo, hi int) {
		Band.Nowait(any.Nowait(), next[lo*n:hi*n], cur[(lo-1)*n:(hi+1)*n], n)
	}
	for it := range iters {
		cur, next := grids[it%2], grids[(it+1)%2]
		for p := range parts {
			lo, hi, split := rows(p)
			if !split {
				band(next, cur, lo, hi)
				continue
			}
			band(next, cur, lo, lo+1)
			band(next, cur, hi-1, hi)
		}
		for p := range parts {
			if lo, hi, split := rows(p); split {
				band(next, cur, lo+1, hi-1)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := offload.Taskwait(ctx); err != nil {
		return nil, 0, err
	}
	return grids[iters%2], time.Since(start), nil
}
