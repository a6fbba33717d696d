// Package jacobi is a real workload on goffload's devices: Laplace's
// equation on a square grid by Jacobi iteration, split into row blocks that
// stay on their devices for the whole run, with halo rows traded device to
// device after every iteration under depend clauses. examples/jacobi runs
// it; bench -suite apps times it. Every process of a program that uses it
// registers its kernels (the package's init); on OpenCL devices and
// NVIDIA GPUs they run the OpenCL C and PTX that go generate made from
// their Go bodies (zz_offload_gen.go).
package jacobi

//go:generate go run github.com/goffload/offload/cmd/goffload-gen

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"time"

	"github.com/goffload/offload"
)

// Step computes the interior of next from cur: rows 1..rows of a block of
// rows+2 rows of cols columns, with a halo row above and below; the first
// and last columns are fixed boundary cells. Both buffers stay on their
// device for the whole run; next is InOut, not Out, because the kernel
// leaves its halo rows and boundary columns alone. On an OpenCL device it
// runs the OpenCL C that go generate made from this body and stepRows,
// and on a GPU the PTX clang made of that (zz_offload_gen.go): one
// work-item per row, without fused multiply-adds, so that the cells are
// bit for bit the host's.
var Step = offload.MustKernel4("jacobi.step", func(ctx offload.Ctx, next offload.InOut[float64], cur offload.In[float64], cols, rows int) {
	ctx.For(rows, func(lo, hi int) { stepRows(next, cur, cols, lo+1, hi+1) })
}).Named("next", "cur", "cols", "rows")

// StepRows computes rows [lo, hi) of next from cur, blocks of cols
// columns as Step's; with lo ≥ 1 and hi ≤ rows+1.
var StepRows = offload.MustKernel5("jacobi.steprows", func(ctx offload.Ctx, next offload.InOut[float64], cur offload.In[float64], cols, lo, hi int) {
	ctx.For(hi-lo, func(a, b int) { stepRows(next, cur, cols, lo+a, lo+b) })
}).Named("next", "cur", "cols", "lo", "hi")

// stepRows computes rows [lo, hi) of next from cur, both grids of cols
// columns: the kernel's loop and the plain-Go reference's.
func stepRows(next, cur []float64, cols, lo, hi int) {
	for r := lo; r < hi; r++ {
		row, up, down := cur[r*cols:(r+1)*cols], cur[(r-1)*cols:r*cols], cur[(r+1)*cols:(r+2)*cols]
		out := next[r*cols : (r+1)*cols]
		for c := 1; c < cols-1; c++ {
			out[c] = 0.25 * (up[c] + down[c] + row[c-1] + row[c+1])
		}
	}
}

// Initial is the starting value of cell (r, c) of an n×n grid: a hot top
// edge and left edge, the rest cold.
func Initial(r, c, n int) float64 {
	switch {
	case r == 0:
		return 100
	case c == 0:
		return 50
	}
	return 0
}

// CheckSize says whether an n×n grid and iters iterations can be run.
func CheckSize(n, iters int) error {
	if n < 3 || iters < 0 {
		return fmt.Errorf("jacobi: grid side %d, %d iterations: want a side of at least 3 and iterations ≥ 0", n, iters)
	}
	return nil
}

// block is one device's rows [lo, hi) of the grid, with a halo row above
// and below, in two buffers (current and next).
type block struct {
	dev    offload.Device
	lo, hi int
	// split says the block's first and last rows are computed apart from
	// the rows between (see step): only when it has neighbours to send them
	// to and rows between them.
	split bool
	buf   [2][]float64
}

// Solve runs iters iterations on an n×n grid over devs, one row block
// each, and returns the grid and the time from the first enqueued task to
// the end of the last.
func Solve(devs []offload.Device, n, iters int) ([]float64, time.Duration, error) {
	return solve(devs, n, iters, false)
}

// SolveRecorded is Solve with each parity's iteration recorded once, at
// its first run, as an offload.Taskgraph, and replayed at the others
// (Replay: the same tasks on the same buffers, no host work per task).
func SolveRecorded(devs []offload.Device, n, iters int) ([]float64, time.Duration, error) {
	return solve(devs, n, iters, true)
}

// nowaitFn makes a task's Async on a device with depend clauses:
// Device.Nowait in a Group, or a Taskgraph Recorder's Nowait.
type nowaitFn = func(d offload.Device, deps ...offload.Dep) offload.Async

func solve(devs []offload.Device, n, iters int, recorded bool) ([]float64, time.Duration, error) {
	if err := CheckSize(n, iters); err != nil {
		return nil, 0, err
	}
	if len(devs) == 0 {
		return nil, 0, fmt.Errorf("jacobi: no devices")
	}
	parts := min(len(devs), n-2)
	blocks := make([]*block, 0, parts)
	defer func() {
		for _, b := range blocks {
			b.dev.ExitData(offload.Delete(b.buf[0]), offload.Delete(b.buf[1]))
		}
	}()
	for p := range parts {
		// The interior rows 1..n-2 are split; rows 0 and n-1 are boundary.
		b := &block{dev: devs[p], lo: 1 + p*(n-2)/parts, hi: 1 + (p+1)*(n-2)/parts}
		b.split = parts > 1 && b.hi-b.lo >= 3
		for k := range b.buf {
			b.buf[k] = make([]float64, (b.hi-b.lo+2)*n)
			for r := b.lo - 1; r <= b.hi; r++ {
				for c := 0; c < n; c++ {
					b.buf[k][(r-b.lo+1)*n+c] = Initial(r, c, n)
				}
			}
		}
		if err := b.dev.EnterData(offload.To(b.buf[0]).Named(fmt.Sprintf("u%d", p)), offload.To(b.buf[1]).Named(fmt.Sprintf("v%d", p))); err != nil {
			return nil, 0, err
		}
		blocks = append(blocks, b)
	}
	start := time.Now()
	var g offload.Group
	inGroup := func(d offload.Device, deps ...offload.Dep) offload.Async { return d.Nowait(deps...).In(&g) }
	var graphs [2]*offload.Taskgraph // by parity, recorded
	for it := 0; it < iters; it++ {
		cur := it % 2
		if !recorded {
			if err := iteration(inGroup, blocks, cur, n); err != nil {
				return nil, 0, err
			}
			continue
		}
		if graphs[cur] == nil {
			graphs[cur] = offload.NewTaskgraph(func(r *offload.Recorder) error { return iteration(r.Nowait, blocks, cur, n) })
			g.Add(graphs[cur].Run())
		} else {
			g.Add(graphs[cur].Replay())
		}
	}
	final := iters % 2
	for p, b := range blocks {
		u := b.buf[final]
		rows := len(u)/n - 2
		inGroup(b.dev, append(rowDeps(b, u, n, offload.DependIn), offload.DependIn(u[n:(rows+1)*n]))...).Update(offload.From(u[n : (rows+1)*n]).Named(fmt.Sprintf("u%d", p)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := g.Wait(ctx); err != nil {
		return nil, 0, err
	}
	elapsed := time.Since(start)
	grid := make([]float64, n*n)
	for c := 0; c < n; c++ {
		grid[c], grid[(n-1)*n+c] = Initial(0, c, n), Initial(n-1, c, n)
	}
	for _, b := range blocks {
		copy(grid[b.lo*n:b.hi*n], b.buf[final][n:(b.hi-b.lo+1)*n])
	}
	return grid, elapsed, nil
}

// iteration enqueues one iteration of blocks, from buffer cur to the
// other, with nw.
func iteration(nw nowaitFn, blocks []*block, cur, n int) error {
	next := 1 - cur
	for _, b := range blocks {
		step(nw, b, b.buf[cur], b.buf[next], n)
	}
	// Halo rows, device to device: a block's first and last rows of the
	// next iteration go to its neighbours' halo rows.
	for p, b := range blocks {
		x := b.buf[next]
		rows := len(x)/n - 2
		if p > 0 {
			up := blocks[p-1].buf[next]
			if err := halo(nw, b, x, 1, blocks[p-1], up, len(up)/n-1, n); err != nil {
				return err
			}
		}
		if p < len(blocks)-1 {
			if err := halo(nw, b, x, rows, blocks[p+1], blocks[p+1].buf[next], 0, n); err != nil {
				return err
			}
		}
	}
	for _, b := range blocks {
		stepInterior(nw, b, b.buf[cur], b.buf[next], n)
	}
	return nil
}

// A block's rows are named, for the depend clauses, by the address of their
// first cell: the halo rows, the first and last rows (which the neighbours
// need), and the rows between. A block that is not split has only its first
// row and halos.

// rowDeps are depend clauses of kind dep on the rows of buf, a buffer of
// block b: first, middle and last when b is split, its first row only when
// it is not.
func rowDeps(b *block, buf []float64, n int, dep func(any) offload.Dep) []offload.Dep {
	rows := len(buf)/n - 2
	if !b.split {
		return []offload.Dep{dep(&buf[n])}
	}
	return []offload.Dep{dep(&buf[n]), dep(&buf[2*n]), dep(&buf[rows*n])}
}

// step enqueues the part of an iteration of block b that the neighbours
// wait for: its first and last rows of next (the whole block if it cannot
// be split). The rows between go after the halos (stepInterior), so that
// they are computed while the halos travel.
func step(nw nowaitFn, b *block, cur, next []float64, n int) {
	rows := len(cur)/n - 2
	deps := append(rowDeps(b, cur, n, offload.DependIn), offload.DependIn(&cur[0]), offload.DependIn(&cur[(rows+1)*n]))
	if !b.split {
		Step.Nowait(nw(b.dev, append(deps, offload.DependOut(&next[n]))...), next, cur, n, rows)
		return
	}
	StepRows.Nowait(nw(b.dev, append(deps, offload.DependOut(&next[n]))...), next, cur, n, 1, 2)
	StepRows.Nowait(nw(b.dev, append(deps, offload.DependOut(&next[rows*n]))...), next, cur, n, rows, rows+1)
}

// stepInterior enqueues the rows of next between block b's first and last.
func stepInterior(nw nowaitFn, b *block, cur, next []float64, n int) {
	if !b.split {
		return
	}
	rows := len(cur)/n - 2
	StepRows.Nowait(nw(b.dev, append(rowDeps(b, cur, n, offload.DependIn), offload.DependOut(&next[2*n]))...), next, cur, n, 2, rows)
}

// halo copies row i of src (block from) to row j of dst (block to) as a
// task, device to device.
func halo(nw nowaitFn, from *block, src []float64, i int, to *block, dst []float64, j, n int) error {
	sp, err := from.dev.MappedPtr(src[i*n : (i+1)*n])
	if err != nil {
		return err
	}
	dp, err := to.dev.MappedPtr(dst[j*n : (j+1)*n])
	if err != nil {
		return err
	}
	row := &src[i*n] // the row's own step wrote it
	if !from.split {
		row = &src[n]
	}
	nw(from.dev, offload.DependIn(row), offload.DependOut(&dst[j*n])).Memcpy(dp, sp, int64(8*n))
	return nil
}

// Reference runs the iteration with plain goroutines on this machine, one
// row band per GOMAXPROCS, and returns the grid and the time it took.
func Reference(n, iters int) ([]float64, time.Duration) {
	cur, next := make([]float64, n*n), make([]float64, n*n)
	for r := 0; r < n; r++ {
		for c := 0; c < n; c++ {
			cur[r*n+c] = Initial(r, c, n)
		}
	}
	copy(next, cur)
	workers := max(1, min(runtime.GOMAXPROCS(0), n-2))
	start := time.Now()
	for range iters {
		var wg sync.WaitGroup
		for w := range workers {
			lo, hi := 1+w*(n-2)/workers, 1+(w+1)*(n-2)/workers
			wg.Add(1)
			go func() {
				defer wg.Done()
				stepRows(next, cur, n, lo, hi)
			}()
		}
		wg.Wait()
		cur, next = next, cur
	}
	return cur, time.Since(start)
}

// Check compares grid with want cell by cell; the error names the first
// cells that differ.
func Check(grid, want []float64, n int) error {
	bad, first := 0, ""
	for i := range want {
		if got := grid[i]; math.Abs(got-want[i]) > 1e-9*math.Max(1, math.Abs(want[i])) {
			if bad < 3 {
				first += fmt.Sprintf("; cell (%d, %d) is %g, want %g", i/n, i%n, got, want[i])
			}
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("jacobi: %d of %d cells differ from the plain Go computation%s", bad, n*n, first)
	}
	return nil
}
