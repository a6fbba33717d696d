// Package cholesky is a real workload on goffload's devices: the tiled
// Cholesky factorization of a symmetric positive definite matrix, a DAG of
// potrf, trsm, syrk and gemm tasks over tiles, spread over the devices with
// depend clauses on the tiles. examples/cholesky runs it; bench -suite apps
// times it. Every process of a program that uses it registers its kernels
// (the package's init); on OpenCL devices and NVIDIA GPUs they run the
// OpenCL C and PTX that goffload-gen made from their Go bodies.
package cholesky

//go:generate go run github.com/goffload/offload/cmd/goffload-gen

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/goffload/offload"
)

// The kernels, on b×b tiles stored row by row; only the lower triangle of
// diagonal tiles is read and written. The tiles are resident on their
// devices (Factor enters them), so the parameters' directions say what a
// kernel does with a tile rather than cause copies. On an OpenCL device
// each runs its generated OpenCL C, and on a GPU the PTX clang made of it
// (zz_offload_gen.go): Go's operations in Go's order, without fused
// multiply-adds, so that the tiles are bit for bit the host's.
var (
	// Potrf factors a diagonal tile in place: a = L Lᵀ. A pivot that is
	// not positive (a matrix that is not positive definite) panics in the
	// Go body and in its generated code, failing the task.
	Potrf = offload.MustKernel2("cholesky.potrf", func(_ offload.Ctx, a offload.InOut[float64], b int) { potrf(a, b) }).
		Named("a", "b")
	// Trsm solves x Lᵀ = a for x in place of a, l a factored diagonal tile.
	Trsm = offload.MustKernel3("cholesky.trsm", func(ctx offload.Ctx, l offload.In[float64], a offload.InOut[float64], b int) {
		ctx.For(b, func(lo, hi int) { trsm(l, a, b, lo, hi) })
	}).Named("l", "a", "b")
	// Syrk updates a diagonal tile: c -= a aᵀ (lower triangle).
	Syrk = offload.MustKernel3("cholesky.syrk", func(ctx offload.Ctx, a offload.In[float64], c offload.InOut[float64], b int) {
		ctx.For(b, func(lo, hi int) { syrk(a, c, b, lo, hi) })
	}).Named("a", "c", "b")
	// Gemm updates an off-diagonal tile: c -= a btᵀ.
	Gemm = offload.MustKernel4("cholesky.gemm", func(ctx offload.Ctx, a, bt offload.In[float64], c offload.InOut[float64], b int) {
		ctx.For(b, func(lo, hi int) { gemm(a, bt, c, b, lo, hi) })
	}).Named("a", "bt", "c", "b")
)

func potrf(a []float64, b int) {
	for j := 0; j < b; j++ {
		s := a[j*b+j]
		for k := 0; k < j; k++ {
			s -= a[j*b+k] * a[j*b+k]
		}
		if !(s > 0) {
			panic(fmt.Sprintf("cholesky: matrix not positive definite (pivot %g at %d)", s, j))
		}
		d := math.Sqrt(s)
		a[j*b+j] = d
		for i := j + 1; i < b; i++ {
			t := a[i*b+j]
			for k := 0; k < j; k++ {
				t -= a[i*b+k] * a[j*b+k]
			}
			a[i*b+j] = t / d
		}
	}
}

func trsm(l, a []float64, b, lo, hi int) {
	for r := lo; r < hi; r++ {
		x := a[r*b : (r+1)*b]
		for j := 0; j < b; j++ {
			t, lj := x[j], l[j*b:j*b+j]
			for k, v := range lj {
				t -= x[k] * v
			}
			x[j] = t / l[j*b+j]
		}
	}
}

func syrk(a, c []float64, b, lo, hi int) {
	for i := lo; i < hi; i++ {
		ai := a[i*b : (i+1)*b]
		for j := 0; j <= i; j++ {
			aj, t := a[j*b:(j+1)*b], 0.0
			for k := range ai {
				t += ai[k] * aj[k]
			}
			c[i*b+j] -= t
		}
	}
}

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

// Matrix is a symmetric matrix of t×t tiles of b×b: Tile(i, j) for j ≤ i.
type Matrix struct {
	T, B  int
	tiles [][]float64
}

// NewMatrix returns the test matrix of t×t tiles of b×b: symmetric,
// diagonally dominant, so positive definite.
func NewMatrix(t, b int) *Matrix {
	m := &Matrix{T: t, B: b, tiles: make([][]float64, t*t)}
	n := t * b
	for i := range t {
		for j := 0; j <= i; j++ {
			tile := make([]float64, b*b)
			for r := range b {
				for c := range b {
					gi, gj := i*b+r, j*b+c
					v := 1 / (1 + math.Abs(float64(gi-gj)))
					if gi == gj {
						v += float64(n)
					}
					tile[r*b+c] = v
				}
			}
			m.tiles[i*t+j] = tile
		}
	}
	return m
}

// Tile is tile (i, j), j ≤ i.
func (m *Matrix) Tile(i, j int) []float64 { return m.tiles[i*m.T+j] }

// CheckSize says whether t×t tiles of b×b can be factored.
func CheckSize(t, b int) error {
	if t < 1 || b < 1 || t*b > 1<<14 {
		return fmt.Errorf("cholesky: %d×%d tiles of %d×%d: want at least one tile of at least 1×1, a matrix side of at most 16384", t, t, b, b)
	}
	return nil
}

// Factor factors m in place over devs. Tile (i, j) lives on the device
// of its row for the whole run (a target data region), where the task that
// updates it runs: whole rows of tiles go to the devices, balanced by their
// work (ByRows, the devices taken to be equally fast), so that the
// diagonal tiles spread over the devices and a row's updates read the
// row's own tiles. Once a tile is final (factored, or solved) it is copied
// device to device to a replica on each other device, whose tasks read it
// there. Every task depends on the tiles it reads and writes. Factor
// returns the number of kernel tasks and the time from the first enqueued
// task to the end of the last.
func Factor(devs []offload.Device, m *Matrix) (tasks int, elapsed time.Duration, err error) {
	return FactorOn(devs, m, ByRows(m.T, Equal(len(devs))))
}

// FactorOn factors m as Factor does, with tile (i, j) and the tasks that
// write it on devs[owner(i, j)] (owner-computes): a hand placement of the
// same task graph. An owner that is not one of devs is an error.
func FactorOn(devs []offload.Device, m *Matrix, owner Owners) (tasks int, elapsed time.Duration, err error) {
	if err := CheckSize(m.T, m.B); err != nil {
		return 0, 0, err
	}
	if len(devs) == 0 {
		return 0, 0, fmt.Errorf("cholesky: no devices")
	}
	t, b := m.T, m.B
	for i := range t {
		for j := 0; j <= i; j++ {
			if d := owner(i, j); d < 0 || d >= len(devs) {
				return 0, 0, fmt.Errorf("cholesky: tile (%d, %d) placed on device %d of %d", i, j, d, len(devs))
			}
		}
	}
	name := func(i, j int) string { return fmt.Sprintf("A%d,%d", i, j) }
	// The tiles on their devices, and the replicas of the tiles others read.
	var entered []func() error
	defer func() {
		for _, exit := range entered {
			if xerr := exit(); err == nil {
				err = xerr
			}
		}
	}()
	for i := range t {
		for j := 0; j <= i; j++ {
			tile, dev := m.Tile(i, j), devs[owner(i, j)]
			if err := dev.EnterData(offload.To(tile).Named(name(i, j))); err != nil {
				return 0, 0, err
			}
			entered = append(entered, func() error {
				if err != nil { // the tiles stay as they were on the host
					return dev.ExitData(offload.Delete(tile).Named(name(i, j)))
				}
				return dev.ExitData(offload.From(tile).Named(name(i, j)))
			})
		}
	}
	replicas := map[[3]int][]float64{} // (i, j, device) → the host stand-in of its replica
	// read returns the slice a task on device d reads tile (i, j) through.
	read := func(i, j, d int) []float64 {
		if d == owner(i, j) {
			return m.Tile(i, j)
		}
		return replicas[[3]int{i, j, d}]
	}
	var g offload.Group
	// publish copies final tile (i, j) to every other device.
	publish := func(i, j int) error {
		src := m.Tile(i, j)
		from := devs[owner(i, j)]
		sp, err := from.MappedPtr(src)
		if err != nil {
			return err
		}
		for d, dev := range devs {
			if d == owner(i, j) {
				continue
			}
			rep := make([]float64, b*b)
			if err := dev.EnterData(offload.Alloc(rep).Named(name(i, j) + " replica")); err != nil {
				return err
			}
			entered = append(entered, func() error { return dev.ExitData(offload.Delete(rep)) })
			replicas[[3]int{i, j, d}] = rep
			dp, err := dev.MappedPtr(rep)
			if err != nil {
				return err
			}
			from.Nowait(offload.DependIn(src), offload.DependOut(rep)).In(&g).Memcpy(dp, sp, int64(8*b*b))
		}
		return nil
	}
	start := time.Now()
	for k := range t {
		akk := m.Tile(k, k)
		// With names each launch's tiles (info output, errors); the
		// directions are the parameters'.
		Potrf.With(offload.ToFrom(akk).Named(name(k, k))).
			Nowait(devs[owner(k, k)].Nowait(offload.DependInOut(akk)).In(&g), akk, b)
		tasks++
		if err := publish(k, k); err != nil {
			return tasks, 0, err
		}
		for i := k + 1; i < t; i++ {
			d := owner(i, k)
			aik, l := m.Tile(i, k), read(k, k, d)
			Trsm.With(offload.To(l).Named(name(k, k)), offload.ToFrom(aik).Named(name(i, k))).
				Nowait(devs[d].Nowait(offload.DependIn(l), offload.DependInOut(aik)).In(&g), l, aik, b)
			tasks++
			if err := publish(i, k); err != nil {
				return tasks, 0, err
			}
		}
		for i := k + 1; i < t; i++ {
			d := owner(i, i)
			aik, aii := read(i, k, d), m.Tile(i, i)
			Syrk.With(offload.To(aik).Named(name(i, k)), offload.ToFrom(aii).Named(name(i, i))).
				Nowait(devs[d].Nowait(offload.DependIn(aik), offload.DependInOut(aii)).In(&g), aik, aii, b)
			tasks++
			for j := k + 1; j < i; j++ {
				d := owner(i, j)
				aik, ajk, aij := read(i, k, d), read(j, k, d), m.Tile(i, j)
				Gemm.With(offload.To(aik).Named(name(i, k)), offload.To(ajk).Named(name(j, k)), offload.ToFrom(aij).Named(name(i, j))).
					Nowait(devs[d].Nowait(offload.DependIn(aik), offload.DependIn(ajk), offload.DependInOut(aij)).In(&g), aik, ajk, aij, b)
				tasks++
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := g.Wait(ctx); err != nil {
		return tasks, 0, err
	}
	return tasks, time.Since(start), nil
}

// FactorAny factors m as Factor does, with every task an Any-task
// (offload.Any): the runtime places the tasks on the devices and moves the
// tiles between them, and the depend clauses come from the kernels'
// parameters. It returns the number of kernel tasks and the time from the
// first task to the end of Taskwait, with the tiles back in m (the copies
// in and out included, which Factor's time leaves out).
func FactorAny(m *Matrix) (tasks int, elapsed time.Duration, err error) {
	if err := CheckSize(m.T, m.B); err != nil {
		return 0, 0, err
	}
	t, b := m.T, m.B
	any := offload.Any()
	start := time.Now()
	var all []*offload.Task
	for k := range t {
		akk := m.Tile(k, k)
		all = append(all, Potrf.Nowait(any.Nowait(), akk, b))
		for i := k + 1; i < t; i++ {
			all = append(all, Trsm.Nowait(any.Nowait(), akk, m.Tile(i, k), b))
		}
		for i := k + 1; i < t; i++ {
			all = append(all, Syrk.Nowait(any.Nowait(), m.Tile(i, k), m.Tile(i, i), b))
			for j := k + 1; j < i; j++ {
				all = append(all, Gemm.Nowait(any.Nowait(), m.Tile(i, k), m.Tile(j, k), m.Tile(i, j), b))
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if err := offload.Taskwait(ctx); err != nil {
		return len(all), 0, err
	}
	elapsed = time.Since(start)
	// A task that could not even be made (its error is its own, not
	// Taskwait's) fails the factorization too.
	for _, tk := range all {
		if err := tk.WaitContext(ctx); err != nil {
			return len(all), 0, err
		}
	}
	return len(all), elapsed, nil
}

// Reference factors m in place with plain goroutines: the same tile
// operations, each step's independent ones at once (fork-join), each tile
// operation split over workers goroutines. It returns the time it took.
func Reference(m *Matrix, workers int) time.Duration {
	t, b := m.T, m.B
	par := func(f func(lo, hi int)) {
		var wg sync.WaitGroup
		for w := range workers {
			lo, hi := w*b/workers, (w+1)*b/workers
			wg.Add(1)
			go func() { defer wg.Done(); f(lo, hi) }()
		}
		wg.Wait()
	}
	start := time.Now()
	for k := range t {
		akk := m.Tile(k, k)
		potrf(akk, b)
		var wg sync.WaitGroup
		for i := k + 1; i < t; i++ {
			wg.Add(1)
			go func() { defer wg.Done(); par(func(lo, hi int) { trsm(akk, m.Tile(i, k), b, lo, hi) }) }()
		}
		wg.Wait()
		for i := k + 1; i < t; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				par(func(lo, hi int) { syrk(m.Tile(i, k), m.Tile(i, i), b, lo, hi) })
				for j := k + 1; j < i; j++ {
					par(func(lo, hi int) { gemm(m.Tile(i, k), m.Tile(j, k), m.Tile(i, j), b, lo, hi) })
				}
			}()
		}
		wg.Wait()
	}
	return time.Since(start)
}

// Check compares the lower triangle of factored m with want's.
func Check(m, want *Matrix) error {
	bad, first := 0, ""
	for i := range m.T {
		for j := 0; j <= i; j++ {
			got, w := m.Tile(i, j), want.Tile(i, j)
			for r := range m.B {
				for c := range m.B {
					if i == j && c > r {
						continue // the upper triangle of a diagonal tile is not part of L
					}
					x, y := got[r*m.B+c], w[r*m.B+c]
					if math.Abs(x-y) > 1e-9*math.Max(1, math.Abs(y)) {
						if bad < 3 {
							first += fmt.Sprintf("; L[%d][%d] is %g, want %g", i*m.B+r, j*m.B+c, x, y)
						}
						bad++
					}
				}
			}
		}
	}
	if bad > 0 {
		return fmt.Errorf("cholesky: %d elements of L differ from the plain Go factorization%s", bad, first)
	}
	return nil
}
