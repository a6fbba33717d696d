// cholesky.cu is the CUDA C source of cholesky.ptx, the GPU code of the
// Potrf, Trsm, Syrk and Gemm kernels in examples/apps/cholesky/cholesky.go, on b×b tiles stored
// row by row. Their parameters are the Go kernels' after the Ctx, in order:
// Go's int is 64 bits (long long), a slice is a device pointer. The default
// launch has one thread per element of a tile (b×b, in blocks of 256):
// trsm uses one thread per row of the tile, syrk and gemm one per element
// of c, and potrf, a sequence of columns that each need the one before,
// the first block, its threads sharing each column's rows between
// __syncthreads. Each element is computed with the Go kernels' operations
// in their order, and the PTX is made without fused multiply-adds
// (-ffp-contract=off), so the GPU's tiles are bit for bit the host's. One
// difference: where the Go potrf panics on a pivot that is not positive
// (the matrix is not positive definite), potrf takes its square root and
// the tile fills with NaNs and infinities. Regenerate the PTX with `go
// generate` (clang with its NVPTX target — clang 22 made this one — and no
// CUDA toolkit), or with the toolkit:
//
//	nvcc -ptx -arch=sm_50 -fmad=false -o cholesky.ptx cholesky.cu
#ifndef __global__ // clang -nocudainc: no CUDA headers
#define __global__ __attribute__((global))
#define INDEX() ((long long)__nvvm_read_ptx_sreg_ctaid_x() * __nvvm_read_ptx_sreg_ntid_x() + __nvvm_read_ptx_sreg_tid_x())
#define BLOCK() __nvvm_read_ptx_sreg_ctaid_x()
#define THREAD() __nvvm_read_ptx_sreg_tid_x()
#define THREADS() __nvvm_read_ptx_sreg_ntid_x()
#else
#define INDEX() ((long long)blockIdx.x * blockDim.x + threadIdx.x)
#define BLOCK() blockIdx.x
#define THREAD() threadIdx.x
#define THREADS() blockDim.x
#endif

// potrf factors a in place, a = L Lᵀ, on the first block: for each column
// j, thread 0 computes the pivot and the block's threads then compute the
// column's rows below it, thread t rows j+1+t, j+1+t+THREADS(), ...
extern "C" __global__ void potrf(double *a, long long b)
{
	if (BLOCK() != 0)
		return; // the whole block returns: its __syncthreads are not reached
	long long t = THREAD(), nt = THREADS();
	for (long long j = 0; j < b; j++) {
		if (t == 0) {
			double s = a[j * b + j];
			for (long long k = 0; k < j; k++)
				s -= a[j * b + k] * a[j * b + k];
			a[j * b + j] = __builtin_sqrt(s);
		}
		__syncthreads(); // the pivot is written
		double d = a[j * b + j];
		for (long long i = j + 1 + t; i < b; i += nt) {
			double x = a[i * b + j];
			for (long long k = 0; k < j; k++)
				x -= a[i * b + k] * a[j * b + k];
			a[i * b + j] = x / d;
		}
		__syncthreads(); // column j is written before column j+1 reads it
	}
}

// trsm solves x Lᵀ = a for x in place of a, one thread per row of a.
extern "C" __global__ void trsm(const double *l, double *a, long long b)
{
	long long r = INDEX();
	if (r < b) {
		double *x = a + r * b;
		for (long long j = 0; j < b; j++) {
			double t = x[j];
			for (long long k = 0; k < j; k++)
				t -= x[k] * l[j * b + k];
			x[j] = t / l[j * b + j];
		}
	}
}

// syrk updates the lower triangle of c: c -= a aᵀ, one thread per element
// of c (those above the diagonal do nothing).
extern "C" __global__ void syrk(const double *a, double *c, long long b)
{
	long long e = INDEX();
	if (e < b * b) {
		long long i = e / b, j = e % b;
		if (j <= i) {
			double t = 0;
			for (long long k = 0; k < b; k++)
				t += a[i * b + k] * a[j * b + k];
			c[i * b + j] -= t;
		}
	}
}

// gemm updates c: c -= a btᵀ, one thread per element of c.
extern "C" __global__ void gemm(const double *a, const double *bt, double *c, long long b)
{
	long long e = INDEX();
	if (e < b * b) {
		long long i = e / b, j = e % b;
		double t = 0;
		for (long long k = 0; k < b; k++)
			t += a[i * b + k] * bt[j * b + k];
		c[i * b + j] -= t;
	}
}
