package gentest

import (
	"testing"

	"github.com/goffload/offload"
	"github.com/goffload/offload/examples/internal/gentest/unchecked"
)

// handSaxpy and handJacobi are the hand-written OpenCL C the examples had
// before their kernels were generated: the baseline rows.
const handSaxpy = `#pragma OPENCL FP_CONTRACT OFF
kernel void saxpy(long n, float a, global const float *x, global float *y)
{
	long i = get_global_id(0);
	if (i < n)
		y[i] = y[i] + a * x[i];
}
`

const handJacobi = `#pragma OPENCL EXTENSION cl_khr_fp64 : enable
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

var (
	handSaxpyK = offload.MustKernel4("hand.saxpy", func(ctx offload.Ctx, n int, a float32, x offload.In[float32], y offload.InOut[float32]) {
	}).OpenCL([]byte(handSaxpy), "saxpy")
	handJacobiK = offload.MustKernel4("hand.jacobi", func(ctx offload.Ctx, next offload.InOut[float64], cur offload.In[float64], cols, rows int) {
	}).OpenCL([]byte(handJacobi), "jacobi_step")
)

// BenchmarkChecks times saxpy (1<<22 elements) and a Jacobi step (a
// 1024×1024 grid) on PoCL, their buffers resident: generated with Go's
// checks, without them (goffload-gen -unchecked), and hand-written.
func BenchmarkChecks(b *testing.B) {
	_, cl := start(b)
	n := 1 << 22
	x, y := make([]float32, n), make([]float32, n)
	side := 1024
	next, cur := make([]float64, side*side), make([]float64, side*side)
	for i := range x {
		x[i], y[i] = float32(i%1000), 1
	}
	for i := range cur {
		cur[i] = float64(i % 37)
	}
	if err := cl.EnterData(offload.To(x), offload.To(y), offload.To(next), offload.To(cur)); err != nil {
		b.Fatal(err)
	}
	defer cl.ExitData(offload.Delete(x), offload.Delete(y), offload.Delete(next), offload.Delete(cur))
	for _, c := range []struct {
		name string
		run  func() error
	}{
		{"saxpy/checked", func() error { return Saxpy.Run(cl, n, 2.5, x, y) }},
		{"saxpy/unchecked", func() error { return unchecked.Saxpy.Run(cl, n, 2.5, x, y) }},
		{"saxpy/hand", func() error { return handSaxpyK.Run(cl, n, 2.5, x, y) }},
		{"jacobi/checked", func() error { return JacobiStep.Run(cl, next, cur, side, side-2) }},
		{"jacobi/unchecked", func() error { return unchecked.JacobiStep.Run(cl, next, cur, side, side-2) }},
		{"jacobi/hand", func() error { return handJacobiK.Run(cl, next, cur, side, side-2) }},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if err := c.run(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
