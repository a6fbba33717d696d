// step.cu is the CUDA C source of step.ptx, the GPU code of the Step kernel
// in examples/pipeline/main.go: one diffusion step of cells 1 to n of next from cur (cells 0
// and n+1 are the halos), one thread per cell. Its parameters are the Go
// kernel's after the Ctx, in order: Go's int is 64 bits (long long), a
// slice is a device pointer. It computes each cell with the Go kernel's
// operations in the Go kernel's order, and the PTX is made without fused
// multiply-adds (-ffp-contract=off: its adds and multiplies are .rn, which
// ptxas does not fuse either), so the GPU's cells are bit for bit the
// host's. Regenerate the PTX with `go generate` (clang with its NVPTX
// target — clang 22 made this one — and no CUDA toolkit), or with the
// toolkit:
//
//	nvcc -ptx -arch=sm_50 -fmad=false -o step.ptx step.cu
#ifndef __global__ // clang -nocudainc: no CUDA headers
#define __global__ __attribute__((global))
#define INDEX() ((long long)__nvvm_read_ptx_sreg_ctaid_x() * __nvvm_read_ptx_sreg_ntid_x() + __nvvm_read_ptx_sreg_tid_x())
#else
#define INDEX() ((long long)blockIdx.x * blockDim.x + threadIdx.x)
#endif

#define ALPHA 0.25 // main.go's alpha

extern "C" __global__ void step(long long n, double *next, const double *cur)
{
	long long i = INDEX() + 1;
	if (i <= n)
		next[i] = cur[i] + ALPHA * (cur[i - 1] - 2 * cur[i] + cur[i + 1]);
}
