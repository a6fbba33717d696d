// scalars.cu is the CUDA C source of scalars.ptx, the GPU side of
// TestScalarsOnGPU (plugins/cuda/scalars_test.go): a kernel that takes a
// parameter of every scalar kind the cuda kind packs — as the Go kernel
// cudatest.gpuscalars declares them — and stores them, laid out as C lays
// out a struct of them, at out. The test compares what arrives with what
// it packed, so a packing that disagrees with the compiler's shows.
// Regenerate the PTX with `go generate ./plugins/cuda` (clang's NVPTX
// target, no CUDA toolkit), or with the toolkit:
//
//	nvcc -ptx -arch=sm_50 -o scalars.ptx scalars.cu
#ifndef __global__ // clang -nocudainc: no CUDA headers
#define __global__ __attribute__((global))
#define FIRST() (__nvvm_read_ptx_sreg_ctaid_x() == 0 && __nvvm_read_ptx_sreg_tid_x() == 0)
#else
#define FIRST() (blockIdx.x == 0 && threadIdx.x == 0)
#endif

struct c64 { float re, im; };                 // Go complex64
struct c128 { double re, im; };               // Go complex128
struct arr3 { float v[3]; };                  // Go [3]float32
struct plain {                                // the test's plainStruct
	short a;
	double b;
	unsigned char c[2];
	bool d;
	struct c64 e;
};

// all is the parameters after out, in order: the cuda kind packs them at
// the offsets C gives these fields.
struct all {
	bool b;
	signed char i8;
	short i16;
	int i32;
	long long i64;
	unsigned char u8;
	unsigned short u16;
	unsigned int u32;
	unsigned long long u64;
	long long i;
	unsigned long long u;
	float f32;
	double f64;
	struct c64 c64;
	struct c128 c128;
	struct arr3 arr;
	struct plain s;
};

extern "C" __global__ void gpuscalars(struct all *out, bool b, signed char i8, short i16, int i32, long long i64,
	unsigned char u8, unsigned short u16, unsigned int u32, unsigned long long u64, long long i,
	unsigned long long u, float f32, double f64, struct c64 c64, struct c128 c128, struct arr3 arr,
	struct plain s)
{
	if (!FIRST())
		return;
	out->b = b;
	out->i8 = i8;
	out->i16 = i16;
	out->i32 = i32;
	out->i64 = i64;
	out->u8 = u8;
	out->u16 = u16;
	out->u32 = u32;
	out->u64 = u64;
	out->i = i;
	out->u = u;
	out->f32 = f32;
	out->f64 = f64;
	out->c64 = c64;
	out->c128 = c128;
	out->arr = arr;
	out->s = s;
}
