package main

import (
	_ "embed"
	"fmt"
	"unsafe"

	"github.com/goffload/offload"
	"github.com/goffload/offload/bench/internal/genk"
	"github.com/goffload/offload/bench/internal/genk/unchecked"
)

// Suite opencl's generated rows (issue 43): each kernel's OpenCL C made by
// goffload-gen from its Go body (bench/internal/genk) against hand-written
// OpenCL C of the same work (the examples' before they were generated),
// and with Go's checks against without them (genk/unchecked), the three
// timed in one interleaved measurement on device 0, buffers resident:
//
//   - opencl.gen_vs_hand_<kernel> (goal ≤ 1.1) and
//     opencl.checked_vs_unchecked_<kernel> (goal ≤ 1.15), for saxpy (2²²
//     float32), jacobi (one 2048² step), stencil (one 512² step), gemm
//     (examples/apps/cholesky's, a 256×256 tile) and nbody (4096 bodies).

// handSaxpyCL and handJacobiCL are examples/saxpy's and
// examples/apps/jacobi's OpenCL C before it was generated.
const handSaxpyCL = `#pragma OPENCL FP_CONTRACT OFF
kernel void saxpy(long n, float a, global const float *x, global float *y)
{
	long i = get_global_id(0);
	if (i < n)
		y[i] = y[i] + a * x[i];
}
`

const handJacobiCL = `#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#pragma OPENCL FP_CONTRACT OFF
kernel void jacobi_step(global double *next, global const double *cur, long cols, long rows)
{
	long w = cols - 2;
	long i = get_global_id(0);
	if (w > 0 && i < rows * w) {
		long r = 1 + i / w, c = 1 + i % w;
		global const double *row = cur + r * cols, *up = row - cols, *down = row + cols;
		next[r * cols + c] = 0.25 * (up[c] + down[c] + row[c - 1] + row[c + 1]);
	}
}
`

// choleskyCL is examples/apps/cholesky's hand-written OpenCL C, before
// goffload-gen made it: the gemm row's baseline.
//
//go:embed cholesky.cl
var choleskyCL []byte

var (
	handSaxpy = offload.MustKernel4("bench.hand.saxpy", func(ctx offload.Ctx, n int, a float32, x offload.In[float32], y offload.InOut[float32]) {
	}).OpenCL([]byte(handSaxpyCL), "saxpy")
	handJacobi = offload.MustKernel4("bench.hand.jacobi", func(ctx offload.Ctx, next offload.InOut[float64], cur offload.In[float64], cols, rows int) {
	}).OpenCL([]byte(handJacobiCL), "jacobi_step")
	handGemm = offload.MustKernel4("bench.hand.gemm", func(ctx offload.Ctx, a, bt offload.In[float64], c offload.InOut[float64], b int) {
	}).OpenCL(choleskyCL, "gemm")
)

// runOpenCLGenerated reports the generated rows on dev.
func runOpenCLGenerated(env *Env, dev offload.Device) error {
	type row struct {
		name                 string
		gen, unchecked, hand func() error
		note                 string
	}
	var rows []row
	var maps, exits []offload.Map
	// saxpy
	n := 1 << 22
	x, y := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i], y[i] = float32(i%1000), 1
	}
	maps = append(maps, offload.To(x), offload.To(y))
	exits = append(exits, offload.Delete(x), offload.Delete(y))
	rows = append(rows, row{"saxpy",
		func() error { return genk.Saxpy.Run(dev, n, 2.5, x, y) },
		func() error { return unchecked.Saxpy.Run(dev, n, 2.5, x, y) },
		func() error { return handSaxpy.Run(dev, n, 2.5, x, y) }, "2²² float32"})
	// jacobi and stencil: one step
	for _, c := range []struct {
		name string
		side int
	}{{"jacobi", 2048}, {"stencil", stencilN}} {
		next, cur := make([]float64, c.side*c.side), make([]float64, c.side*c.side)
		for i := range cur {
			cur[i] = float64(i % 37)
		}
		maps = append(maps, offload.To(next), offload.To(cur))
		exits = append(exits, offload.Delete(next), offload.Delete(cur))
		s := c.side
		rows = append(rows, row{c.name,
			func() error { return genk.Jacobi.Run(dev, next, cur, s, s-2) },
			func() error { return unchecked.Jacobi.Run(dev, next, cur, s, s-2) },
			func() error { return handJacobi.Run(dev, next, cur, s, s-2) }, fmt.Sprintf("one %d² step", s)})
	}
	// gemm
	const b = 256
	a, bt, cm := make([]float64, b*b), make([]float64, b*b), make([]float64, b*b)
	for i := range a {
		a[i], bt[i] = float64(i%17)/17, float64(i%13)/13
	}
	maps = append(maps, offload.To(a), offload.To(bt), offload.To(cm))
	exits = append(exits, offload.Delete(a), offload.Delete(bt), offload.Delete(cm))
	rows = append(rows, row{"gemm",
		func() error { return genk.Gemm.Run(dev, a, bt, cm, b) },
		func() error { return unchecked.Gemm.Run(dev, a, bt, cm, b) },
		func() error { return handGemm.Run(dev, a, bt, cm, b) }, "a 256×256 tile (the hand-written code: a work-item per element; the Go body: per row)"})
	// nbody: bench.nbody's hand-written OpenCL C on the same bytes
	const nb = 4096
	pos, vel, out := make([]body, nb), make([]body, nb), make([]body, nb)
	for i := range pos {
		f := float32(i)
		pos[i] = body{f / 100, f / 200, f / nb, 1 + f/nb}
	}
	gs := func(s []body) []genk.Body { return unsafe.Slice((*genk.Body)(unsafe.Pointer(&s[0])), len(s)) }
	gp, gv, gout := gs(pos), gs(vel), gs(out)
	maps = append(maps, offload.To(pos), offload.To(vel), offload.To(out))
	exits = append(exits, offload.Delete(pos), offload.Delete(vel), offload.Delete(out))
	rows = append(rows, row{"nbody",
		func() error { return genk.NBody.Run(dev, gp, gv, gout, nb, 0.001, 0.01) },
		func() error { return unchecked.NBody.Run(dev, gp, gv, gout, nb, 0.001, 0.01) },
		func() error { return benchNBody.Run(dev, pos, vel, out, nb, float32(0.001), float32(0.01)) }, "4096 float32 bodies (the hand-written code: float4 and rsqrt)"})

	if err := dev.EnterData(maps...); err != nil {
		return err
	}
	defer dev.ExitData(exits...)
	times := func(f func() error) func(n int) error {
		return func(n int) error {
			for range n {
				if err := f(); err != nil {
					return err
				}
			}
			return nil
		}
	}
	for _, r := range rows {
		ts, err := env.measure(times(r.gen), times(r.unchecked), times(r.hand))
		if err != nil {
			return fmt.Errorf("opencl generated %s: %w", r.name, err)
		}
		env.Report(Result{Metric: "opencl.gen_vs_hand_" + r.name, Goffload: ts[0], Baseline: ts[2], Note: r.note + ": generated (checked) vs hand-written OpenCL C (goal ≤ 1.1)"})
		env.Report(Result{Metric: "opencl.checked_vs_unchecked_" + r.name, Goffload: ts[0], Baseline: ts[1], Note: r.note + ": generated with Go's checks vs without (goal ≤ 1.15)"})
	}
	return nil
}
