// Package cg is a real workload on goffload's devices: the conjugate
// gradient method on the 2-D Poisson equation, A x = b with A the 5-point
// Laplacian of an n×n grid (n² rows, stored in compressed sparse row form)
// and b all ones. The matrix and the vectors are mapped to one device once
// (target enter data) and stay there for the whole run; every iteration is
// three kernels on that device, of which two bring back one number each
// (the dot products that the iteration's step sizes are made of). bench
// -suite apps times it. Every process of a program that uses it registers
// its kernels (the package's init). Their OpenCL C is generated from the
// Go bodies (goffload-gen).
package cg

//go:generate go run github.com/goffload/offload/cmd/goffload-gen

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/goffload/offload"
	"github.com/goffload/offload/reduction"
)

// The kernels of an iteration. The matrix is In (its rows' starts, columns
// and values), the vectors are In, Out or InOut as each kernel uses them;
// all of them are present on the device, so only the one-element results
// (Out) are copied, back to the host.
var (
	// SpMVDot computes q = A p and out[0] = p·q, the dot product reduced
	// over the device's cores (offload.Reduce).
	SpMVDot = offload.MustKernel6("cg.spmvdot", func(ctx offload.Ctx, rowPtr, col offload.In[int32], val, p offload.In[float64], q, out offload.Out[float64]) {
		out[0] = offload.Reduce(ctx, len(q), reduction.Sum[float64](), func(lo, hi int, acc float64) float64 {
			return spmvDot(rowPtr, col, val, p, q, lo, hi, acc)
		})
	}).Named("rowptr", "col", "val", "p", "q", "pq")

	// Update computes x += alpha p, r -= alpha q and out[0] = r·r, reduced
	// over the device's cores.
	Update = offload.MustKernel6("cg.update", func(ctx offload.Ctx, alpha float64, p, q offload.In[float64], x, r offload.InOut[float64], out offload.Out[float64]) {
		out[0] = offload.Reduce(ctx, len(r), reduction.Sum[float64](), func(lo, hi int, acc float64) float64 {
			return update(alpha, p, q, x, r, lo, hi, acc)
		})
	}).Named("alpha", "p", "q", "x", "r", "rr")

	// XPAY computes p = r + beta p.
	XPAY = offload.MustKernel3("cg.xpay", func(ctx offload.Ctx, beta float64, r offload.In[float64], p offload.InOut[float64]) {
		ctx.For(len(p), func(lo, hi int) { xpay(beta, r, p, lo, hi) })
	}).Named("beta", "r", "p")
)

// The loops of the kernels, over rows [lo, hi): the kernels' bodies and
// Reference's, so that both do the same operations in the same order
// within a row (the sums over rows are grouped differently: by the
// device's chunks, or in one run).

// spmvDot sets q[i] = (A p)[i] for the rows of [lo, hi) and returns acc
// plus the sum of p[i] q[i] over them.
func spmvDot(rowPtr, col []int32, val, p, q []float64, lo, hi int, acc float64) float64 {
	for i := lo; i < hi; i++ {
		s := 0.0
		for k := rowPtr[i]; k < rowPtr[i+1]; k++ {
			s += val[k] * p[col[k]]
		}
		q[i] = s
		acc += p[i] * s
	}
	return acc
}

// update does x += alpha p and r -= alpha q over [lo, hi) and returns acc
// plus the sum of the new r[i]² over them.
func update(alpha float64, p, q, x, r []float64, lo, hi int, acc float64) float64 {
	for i := lo; i < hi; i++ {
		x[i] += alpha * p[i]
		v := r[i] - alpha*q[i]
		r[i] = v
		acc += v * v
	}
	return acc
}

// xpay does p = r + beta p over [lo, hi).
func xpay(beta float64, r, p []float64, lo, hi int) {
	for i := lo; i < hi; i++ {
		p[i] = r[i] + beta*p[i]
	}
}

// Matrix is a sparse matrix in compressed sparse row form: row i's
// nonzeros are Val[RowPtr[i]:RowPtr[i+1]], in the columns Col of the same
// range.
type Matrix struct {
	RowPtr []int32
	Col    []int32
	Val    []float64
}

// Rows is the matrix's number of rows.
func (m *Matrix) Rows() int { return len(m.RowPtr) - 1 }

// Poisson is the 5-point Laplacian of an n×n grid with zero (Dirichlet)
// boundary values outside it: n² rows, row r·n+c with 4 on the diagonal and
// -1 in the columns of the grid neighbours (r±1, c) and (r, c±1) that lie
// inside the grid, in increasing column order. It is symmetric and
// positive definite.
func Poisson(n int) *Matrix {
	rows := n * n
	m := &Matrix{
		RowPtr: make([]int32, 0, rows+1),
		Col:    make([]int32, 0, 5*rows),
		Val:    make([]float64, 0, 5*rows),
	}
	m.RowPtr = append(m.RowPtr, 0)
	add := func(c int, v float64) {
		m.Col = append(m.Col, int32(c))
		m.Val = append(m.Val, v)
	}
	for r := range n {
		for c := range n {
			i := r*n + c
			if r > 0 {
				add(i-n, -1)
			}
			if c > 0 {
				add(i-1, -1)
			}
			add(i, 4)
			if c < n-1 {
				add(i+1, -1)
			}
			if r < n-1 {
				add(i+n, -1)
			}
			m.RowPtr = append(m.RowPtr, int32(len(m.Col)))
		}
	}
	return m
}

// MaxN is the largest grid side Solve takes: the matrix's indices are
// int32s.
const MaxN = 16384

// CheckSize says whether an n×n grid and iters iterations can be run.
func CheckSize(n, iters int) error {
	if n < 1 || n > MaxN || iters < 0 {
		return fmt.Errorf("cg: grid side %d, %d iterations: want a side from 1 to %d and iterations ≥ 0", n, iters, MaxN)
	}
	return nil
}

// ErrBreakdown is wrapped by Solve's and Reference's error when an
// iteration cannot go on: a step size that is not a finite number (p·Ap of
// zero, from a residual that is already zero).
var ErrBreakdown = errors.New("cg: breakdown")

// start returns the starting state of the iteration on the n×n grid: x = 0,
// r = b - A x = b (all ones), p = r, and r·r.
func start(n int) (x, r, p []float64, rr float64) {
	rows := n * n
	x, r, p = make([]float64, rows), make([]float64, rows), make([]float64, rows)
	for i := range r {
		r[i], p[i] = 1, 1
	}
	return x, r, p, float64(rows)
}

// step is the step size a/b of an iteration, or an error wrapping
// ErrBreakdown if it is not a finite number.
func step(what string, a, b float64, it int) (float64, error) {
	v := a / b
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("%w: iteration %d: %s = %g / %g", ErrBreakdown, it, what, a, b)
	}
	return v, nil
}

// Solve runs iters iterations of the conjugate gradient method for the n×n
// grid's Poisson matrix on dev, from x = 0, and returns x and the time of
// the iterations (from the first kernel's launch to the last one's end: not
// building the matrix, nor mapping it and the vectors to the device and x
// back).
func Solve(dev offload.Device, n, iters int) ([]float64, time.Duration, error) {
	if err := CheckSize(n, iters); err != nil {
		return nil, 0, err
	}
	m := Poisson(n)
	x, r, p, rr := start(n)
	q := make([]float64, len(x))
	sy := &mapped{m: m, x: x, r: r, p: p, q: q}
	if err := sy.enter(dev); err != nil {
		return nil, 0, err
	}
	defer sy.drop(dev)
	out := []float64{0}
	t0 := time.Now()
	for it := range iters {
		if err := SpMVDot.Run(dev, m.RowPtr, m.Col, m.Val, p, q, out); err != nil {
			return nil, 0, fmt.Errorf("cg: iteration %d: %w", it, err)
		}
		alpha, err := step("alpha = r·r / p·Ap", rr, out[0], it)
		if err != nil {
			return nil, 0, err
		}
		if err := Update.Run(dev, alpha, p, q, x, r, out); err != nil {
			return nil, 0, fmt.Errorf("cg: iteration %d: %w", it, err)
		}
		beta, err := step("beta = r·r (new) / r·r", out[0], rr, it)
		if err != nil {
			return nil, 0, err
		}
		rr = out[0]
		if err := XPAY.Run(dev, beta, r, p); err != nil {
			return nil, 0, fmt.Errorf("cg: iteration %d: %w", it, err)
		}
	}
	elapsed := time.Since(t0)
	if err := sy.exit(dev); err != nil {
		return nil, 0, err
	}
	return x, elapsed, nil
}

// mapped is what a solve maps to its device for its iterations: the
// matrix, the vectors and, for SolveRecorded, the state s (nil for Solve).
type mapped struct {
	m          *Matrix
	x, r, p, q []float64
	s          []float64
	exited     bool
}

// enter maps them (target enter data): q is only allocated.
func (sy *mapped) enter(dev offload.Device) error {
	maps := []offload.Map{offload.To(sy.m.RowPtr).Named("rowptr"), offload.To(sy.m.Col).Named("col"), offload.To(sy.m.Val).Named("val"),
		offload.To(sy.x).Named("x"), offload.To(sy.r).Named("r"), offload.To(sy.p).Named("p"), offload.Alloc(sy.q).Named("q")}
	if sy.s != nil {
		maps = append(maps, offload.To(sy.s).Named("s"))
	}
	if err := dev.EnterData(maps...); err != nil {
		return fmt.Errorf("cg: mapping the matrix and vectors: %w", err)
	}
	return nil
}

// exit brings x and s back and unmaps the rest (target exit data).
func (sy *mapped) exit(dev offload.Device) error {
	sy.exited = true
	maps := append(sy.deletes(), offload.From(sy.x).Named("x"))
	if sy.s != nil {
		maps = append(maps, offload.From(sy.s).Named("s"))
	}
	if err := dev.ExitData(maps...); err != nil {
		return fmt.Errorf("cg: unmapping: %w", err)
	}
	return nil
}

// drop is the error path's unmapping, unless exit ran: the device's copies
// go, whatever the counts.
func (sy *mapped) drop(dev offload.Device) {
	if sy.exited {
		return
	}
	maps := append(sy.deletes(), offload.Delete(sy.x))
	if sy.s != nil {
		maps = append(maps, offload.Delete(sy.s))
	}
	dev.ExitData(maps...)
}

// deletes are the unmappings of what no solve brings back: the matrix,
// r, p and q.
func (sy *mapped) deletes() []offload.Map {
	return []offload.Map{offload.Delete(sy.m.RowPtr), offload.Delete(sy.m.Col), offload.Delete(sy.m.Val),
		offload.Delete(sy.r), offload.Delete(sy.p), offload.Delete(sy.q)}
}

// Reference runs the same iterations in plain Go on one goroutine and
// returns x and the time of the iterations.
func Reference(n, iters int) ([]float64, time.Duration, error) {
	if err := CheckSize(n, iters); err != nil {
		return nil, 0, err
	}
	m := Poisson(n)
	x, r, p, rr := start(n)
	q := make([]float64, len(x))
	rows := len(x)
	t0 := time.Now()
	for it := range iters {
		pq := spmvDot(m.RowPtr, m.Col, m.Val, p, q, 0, rows, 0)
		alpha, err := step("alpha = r·r / p·Ap", rr, pq, it)
		if err != nil {
			return nil, 0, err
		}
		rrNew := update(alpha, p, q, x, r, 0, rows, 0)
		beta, err := step("beta = r·r (new) / r·r", rrNew, rr, it)
		if err != nil {
			return nil, 0, err
		}
		rr = rrNew
		xpay(beta, r, p, 0, rows)
	}
	return x, time.Since(t0), nil
}

// Tolerance is how far Check lets x be from the reference, relative to the
// reference's largest value: the iterations' dot products are summed in
// the device's chunks, which rounds differently from Reference's one sum.
const Tolerance = 1e-9

// Check compares x with want; the error names the first values that
// differ by more than Tolerance times the largest |want[i]| (at least 1).
func Check(x, want []float64) error {
	if len(x) != len(want) {
		return fmt.Errorf("cg: %d values, want %d", len(x), len(want))
	}
	scale := 1.0
	for _, v := range want {
		scale = max(scale, math.Abs(v))
	}
	bad, first := 0, ""
	for i, v := range want {
		if d := math.Abs(x[i] - v); !(d <= Tolerance*scale) { // NaN too
			if bad < 3 {
				first += fmt.Sprintf("; x[%d] is %g, want %g", i, x[i], v)
			}
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("cg: %d of %d values differ from the plain Go computation by more than %g × %g%s", bad, len(want), Tolerance, scale, first)
	}
	return nil
}

// Residual is ‖b - A x‖ ÷ ‖b‖ for the n×n grid's Poisson matrix and b all
// ones: how far x is from solving the system.
func Residual(n int, x []float64) float64 {
	m := Poisson(n)
	var num float64
	for i := range m.Rows() {
		s := 0.0
		for k := m.RowPtr[i]; k < m.RowPtr[i+1]; k++ {
			s += m.Val[k] * x[m.Col[k]]
		}
		d := 1 - s
		num += d * d
	}
	return math.Sqrt(num / float64(m.Rows()))
}
