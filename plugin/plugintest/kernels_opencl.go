package plugintest

import (
	"fmt"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
)

// This is the OpenCL C of the suite's kernels that device code can express.
// Those are the ones that read no slice's length, or read it from the work
// size. A kind that runs OpenCL C (plugins/opencl) runs them on its driver,
// so their scalar and pointer arguments cross its argument rules. The others
// (the panics, sleeps, the context's loops) have Go bodies only. Such a kind
// runs those only in a test mode of its own, or refuses them.
const openCLKernels = `
typedef struct { float a[3]; } arr3;
typedef struct { short A; double B; uchar C[2]; uchar D; float E[2]; } plain;

// scalars runs over scalarWords + len(in) work-items. The first writes the
// scalars' bits, and the ones after copy in.
kernel void scalars(global ulong *out, uchar b, char i8, short i16, int i32, long i64,
		uchar u8, ushort u16, uint u32, ulong u64, long i, ulong u,
		float f32, double f64, float2 c64, double2 c128, arr3 arr, plain s, global const int *in) {
	size_t g = get_global_id(0);
	if (g == 0) {
		out[0] = b != 0; out[1] = (ulong)(long)i8; out[2] = (ulong)(long)i16; out[3] = (ulong)(long)i32;
		out[4] = (ulong)i64; out[5] = u8; out[6] = u16; out[7] = u32; out[8] = u64; out[9] = (ulong)i; out[10] = u;
		out[11] = as_uint(f32); out[12] = as_ulong(f64);
		out[13] = as_uint(c64.x); out[14] = as_uint(c64.y); out[15] = as_ulong(c128.x); out[16] = as_ulong(c128.y);
		out[17] = as_uint(arr.a[0]); out[18] = as_uint(arr.a[1]); out[19] = as_uint(arr.a[2]);
		out[20] = (ulong)(long)s.A; out[21] = as_ulong(s.B); out[22] = s.C[0]; out[23] = s.C[1]; out[24] = s.D != 0;
		out[25] = as_uint(s.E[0]); out[26] = as_uint(s.E[1]);
	}
	if (g >= 27) {
		out[g] = (ulong)(long)in[g - 27];
	}
}

kernel void fillInt64(global long *x, long v) { x[get_global_id(0)] = v; }

kernel void addInt64(global long *x, long k) { x[get_global_id(0)] += k; }
`

func init() {
	for _, c := range []struct {
		k     plugin.Kernel
		entry string
	}{{kScalars, "scalars"}, {kFillInt64, "fillInt64"}, {kAddInt64, "addInt64"}} {
		if err := c.k.(*entries.Kernel).SetCode(plugin.DeviceCode{Format: "opencl", Image: []byte(openCLKernels), Entry: c.entry}); err != nil {
			panic(fmt.Sprintf("plugintest: %v", err))
		}
	}
}
