// Command jacobi solves Laplace's equation on a square grid by Jacobi
// iteration, split into row blocks over every configured device: each
// block stays on its device for the whole run (a target data region), the
// blocks trade their edge rows (halo rows) device to device after every
// iteration, and depend clauses order it all, so every iteration of the run
// is enqueued up front. It checks the grid against the same iteration in
// plain Go, and times it against one device and against plain goroutines
// on this machine.
//
//	go run ./examples/jacobi                         # 2048², 200 iterations on local:2
//	go run ./examples/jacobi -n 512 -iters 50
//	GOFFLOAD_DEVICES=host:2 go run ./examples/jacobi
//	CC=mpicc go build -tags mpi -o app ./examples/jacobi && mpirun -np 3 ./app
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/goffload/offload"
)

// Step computes the interior of next from cur: rows 1..len/cols-2 of a
// block with a halo row above and below; the first and last columns are
// fixed boundary cells.
var Step = offload.MustKernel("jacobi.step", func(ctx offload.Ctx, next, cur []float64, cols int) {
	rows := len(cur)/cols - 2
	ctx.For(rows, func(lo, hi int) { stepRows(next, cur, cols, lo+1, hi+1) })
})

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

func main() {
	n := flag.Int("n", 2048, "grid side")
	iters := flag.Int("iters", 200, "iterations")
	compare := flag.Bool("compare", true, "also time one device and plain goroutines")
	flag.Parse()
	if err := run(*n, *iters, *compare); err != nil {
		fmt.Fprintln(os.Stderr, "jacobi:", err)
		os.Exit(1)
	}
}

// initial is the starting value of cell (r, c) of an n×n grid: a hot top
// edge and left edge, the rest cold.
func initial(r, c, n int) float64 {
	switch {
	case r == 0:
		return 100
	case c == 0:
		return 50
	}
	return 0
}

func run(n, iters int, compare bool) error {
	if n < 3 || iters < 0 {
		return fmt.Errorf("-n %d -iters %d: want n ≥ 3 and iters ≥ 0", n, iters)
	}
	var opts []offload.Option
	if _, set := os.LookupEnv("GOFFLOAD_DEVICES"); !set && !offload.UnderMPI() {
		opts = append(opts, offload.WithDevices("local:2"))
	}
	if err := offload.Start(opts...); err != nil { // in a device process, this serves and never returns
		return err
	}
	defer offload.Stop()

	devs := []offload.Device{offload.Initial()}
	if k := offload.NumDevices(); k > 0 {
		devs = devs[:0]
		for i := range k {
			devs = append(devs, offload.On(i))
		}
	}
	want, goTime := reference(n, iters)
	grid, t, err := solve(devs, n, iters)
	if err != nil {
		return err
	}
	if err := check(grid, want, n); err != nil {
		return err
	}
	fmt.Printf("jacobi: %d² grid, %d iterations on %d device(s) in %v: verified against plain Go\n",
		n, iters, len(devs), t.Round(time.Millisecond))
	if !compare {
		return nil
	}
	if len(devs) > 1 {
		grid, t1, err := solve(devs[:1], n, iters)
		if err != nil {
			return err
		}
		if err := check(grid, want, n); err != nil {
			return err
		}
		fmt.Printf("jacobi: on device %d alone %v: %d devices are %.2f× as fast as one\n",
			devs[0].Num(), t1.Round(time.Millisecond), len(devs), float64(t1)/float64(t))
	}
	fmt.Printf("jacobi: plain goroutines (%d) on this machine %v: goffload takes %.2f× their time\n",
		runtime.GOMAXPROCS(0), goTime.Round(time.Millisecond), float64(t)/float64(goTime))
	return nil
}

// block is one device's rows [lo, hi) of the grid, with a halo row above
// and below, in two buffers (current and next).
type block struct {
	dev    offload.Device
	lo, hi int
	buf    [2][]float64
}

// solve runs the iteration over devs, one row block each, and returns the
// grid and the time from the first enqueued task to the last one's end.
func solve(devs []offload.Device, n, iters int) ([]float64, time.Duration, error) {
	parts := min(len(devs), n-2)
	blocks := make([]*block, parts)
	for p := range blocks {
		// The interior rows 1..n-2 are split; row 0 and n-1 are boundary.
		b := &block{dev: devs[p], lo: 1 + p*(n-2)/parts, hi: 1 + (p+1)*(n-2)/parts}
		blocks[p] = b
		for k := range b.buf {
			b.buf[k] = make([]float64, (b.hi-b.lo+2)*n)
			for r := b.lo - 1; r <= b.hi; r++ {
				for c := 0; c < n; c++ {
					b.buf[k][(r-b.lo+1)*n+c] = initial(r, c, n)
				}
			}
		}
		if err := b.dev.EnterData(offload.To(b.buf[0]).Named(fmt.Sprintf("u%d", p)), offload.To(b.buf[1]).Named(fmt.Sprintf("v%d", p))); err != nil {
			return nil, 0, err
		}
	}
	defer func() {
		for _, b := range blocks {
			b.dev.ExitData(offload.Delete(b.buf[0]), offload.Delete(b.buf[1]))
		}
	}()
	start := time.Now()
	var g offload.Group
	for it := 0; it < iters; it++ {
		cur, next := it%2, (it+1)%2
		for _, b := range blocks {
			c, x := b.buf[cur], b.buf[next]
			rows := len(c)/n - 2
			b.dev.Nowait(offload.DependIn(c[n:(rows+1)*n]), offload.DependIn(&c[0]), offload.DependIn(&c[(rows+1)*n]),
				offload.DependOut(x[n:(rows+1)*n])).In(&g).Run(Step, x, c, n)
		}
		// Halo rows, device to device: a block's first and last rows of the
		// next iteration go to its neighbours' halo rows.
		for p, b := range blocks {
			x := b.buf[next]
			rows := len(x)/n - 2
			if p > 0 {
				up := blocks[p-1].buf[next]
				if err := halo(&g, b, x, 1, blocks[p-1], up, len(up)/n-1, n); err != nil {
					return nil, 0, err
				}
			}
			if p < parts-1 {
				if err := halo(&g, b, x, rows, blocks[p+1], blocks[p+1].buf[next], 0, n); err != nil {
					return nil, 0, err
				}
			}
		}
	}
	final := iters % 2
	for p, b := range blocks {
		u := b.buf[final]
		rows := len(u)/n - 2
		b.dev.Nowait(offload.DependIn(u[n : (rows+1)*n])).In(&g).Update(offload.From(u[n : (rows+1)*n]).Named(fmt.Sprintf("u%d", p)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := g.Wait(ctx); err != nil {
		return nil, 0, err
	}
	elapsed := time.Since(start)
	grid := make([]float64, n*n)
	for c := 0; c < n; c++ {
		grid[c], grid[(n-1)*n+c] = initial(0, c, n), initial(n-1, c, n)
	}
	for _, b := range blocks {
		copy(grid[b.lo*n:b.hi*n], b.buf[final][n:(b.hi-b.lo+1)*n])
	}
	return grid, elapsed, nil
}

// halo copies row i of src (block from) to row j of dst (block to) as a
// task, device to device.
func halo(g *offload.Group, from *block, src []float64, i int, to *block, dst []float64, j, n int) error {
	sp, err := from.dev.MappedPtr(src[i*n : (i+1)*n])
	if err != nil {
		return err
	}
	dp, err := to.dev.MappedPtr(dst[j*n : (j+1)*n])
	if err != nil {
		return err
	}
	rows := len(src)/n - 2
	from.dev.Nowait(offload.DependIn(src[n:(rows+1)*n]), offload.DependOut(&dst[j*n])).In(g).Memcpy(dp, sp, int64(8*n))
	return nil
}

// reference runs the iteration with plain goroutines, one row band each,
// and returns the grid and the time it took.
func reference(n, iters int) ([]float64, time.Duration) {
	cur, next := make([]float64, n*n), make([]float64, n*n)
	for r := 0; r < n; r++ {
		for c := 0; c < n; c++ {
			cur[r*n+c] = initial(r, c, n)
		}
	}
	copy(next, cur)
	workers := min(runtime.GOMAXPROCS(0), n-2)
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

// check compares grid with want, cell by cell.
func check(grid, want []float64, n int) error {
	bad := 0
	for i := range want {
		if got := grid[i]; math.Abs(got-want[i]) > 1e-9*math.Max(1, math.Abs(want[i])) {
			if bad < 5 {
				fmt.Printf("cell (%d, %d): got %g, want %g\n", i/n, i%n, got, want[i])
			}
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d cells differ from the plain Go computation", bad, n*n)
	}
	return nil
}
