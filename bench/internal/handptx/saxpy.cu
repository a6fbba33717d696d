// saxpy.cu is the CUDA C source of saxpy.ptx, the GPU code of the saxpy
// kernel in examples/saxpy/main.go: y[i] += a*x[i] for i < n, one thread per element. Its
// parameters are the Go kernel's after the Ctx, in order: Go's int is
// 64 bits (long long), a slice is a device pointer. Regenerate the PTX with
// `go generate` (clang with its NVPTX target — clang 22 made this one —
// and no CUDA toolkit), or with the toolkit:
//
//	nvcc -ptx -arch=sm_50 -fmad=false -o saxpy.ptx saxpy.cu
#ifndef __global__ // clang -nocudainc: no CUDA headers
#define __global__ __attribute__((global))
#define INDEX() ((long long)__nvvm_read_ptx_sreg_ctaid_x() * __nvvm_read_ptx_sreg_ntid_x() + __nvvm_read_ptx_sreg_tid_x())
#else
#define INDEX() ((long long)blockIdx.x * blockDim.x + threadIdx.x)
#endif

extern "C" __global__ void saxpy(long long n, float a, const float *x, float *y)
{
	long long i = INDEX();
	if (i < n)
		y[i] = y[i] + a * x[i];
}
