// cuda.cu is the CUDA C source of cuda.ptx, the GPU code of the bench's
// kernels: empty is bench.empty's (suite cuda launches it through goffload
// and straight through the driver). Regenerate with `go generate` (clang
// with its NVPTX target, no CUDA toolkit), or nvcc -ptx -arch=sm_50 -o
// cuda.ptx cuda.cu.
#ifndef __global__ // clang -nocudainc: no CUDA headers
#define __global__ __attribute__((global))
#endif

extern "C" __global__ void empty(void)
{
}
