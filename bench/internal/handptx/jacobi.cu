// jacobi.cu is the CUDA C source of jacobi.ptx, the GPU code of the Step
// and StepRows kernels in examples/apps/jacobi/jacobi.go: one Jacobi step of the interior cells
// of some rows of next from cur, blocks of cols columns stored row by row,
// one thread per cell computed (the default launch has one thread per
// element of cur, enough for every interior cell). Their parameters are
// the Go kernels' after the Ctx, in order: Go's int is 64 bits (long
// long), a slice is a device pointer (no length: Step takes rows for it).
// Each cell is computed with the Go kernels' operations in their order,
// and the PTX is made without fused multiply-adds (-ffp-contract=off), so
// the GPU's cells are bit for bit the host's. Regenerate the PTX with `go
// generate` (clang with its NVPTX target — clang 22 made this one — and no
// CUDA toolkit), or with the toolkit:
//
//	nvcc -ptx -arch=sm_50 -fmad=false -o jacobi.ptx jacobi.cu
#ifndef __global__ // clang -nocudainc: no CUDA headers
#define __global__ __attribute__((global))
#define INDEX() ((long long)__nvvm_read_ptx_sreg_ctaid_x() * __nvvm_read_ptx_sreg_ntid_x() + __nvvm_read_ptx_sreg_tid_x())
#else
#define INDEX() ((long long)blockIdx.x * blockDim.x + threadIdx.x)
#endif

// cell computes interior cell i of rows [lo, lo+count) of next: thread i
// of count×(cols-2), row by row.
static __attribute__((device)) void cell(double *next, const double *cur, long long cols, long long lo, long long count)
{
	long long w = cols - 2; // the interior cells of a row
	long long i = INDEX();
	if (w > 0 && i < count * w) {
		long long r = lo + i / w, c = 1 + i % w;
		const double *row = cur + r * cols, *up = row - cols, *down = row + cols;
		next[r * cols + c] = 0.25 * (up[c] + down[c] + row[c - 1] + row[c + 1]);
	}
}

// step is Step: rows 1 to rows of a block with a halo row above and below.
extern "C" __global__ void step(double *next, const double *cur, long long cols, long long rows)
{
	cell(next, cur, cols, 1, rows);
}

// steprows is StepRows: rows [lo, hi).
extern "C" __global__ void steprows(double *next, const double *cur, long long cols, long long lo, long long hi)
{
	cell(next, cur, cols, lo, hi - lo);
}
