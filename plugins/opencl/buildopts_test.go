package opencl_test

import (
	"errors"
	"strings"
	"testing"
	"unsafe"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/opencl"
)

// nopCL is a kernel without parameters, alone in its program: NVIDIA's
// compiler (driver 580) failed such a program with -cl-kernel-arg-info
// (ptxas: "Parsing error near '}'"), which the kind then builds without.
const nopCL = "kernel void nop(void) { }\n"

// fallbackCL's first build fails under FailFirstBuildForTests, on any
// driver.
const fallbackCL = `
#ifdef GOFFLOAD_FAIL_FIRST_BUILD
#error the first build fails (FailFirstBuildForTests)
#endif
kernel void fbadd(global float *x, float a, long n) {
	long i = get_global_id(0);
	if (i < n) x[i] += a;
}
`

var (
	kNop = register("opencltest.nop", func() {}, nopCL, "nop")
	// kFallbackAdd and kFallbackCount are built without argument info.
	kFallbackAdd   = register("opencltest.fallbackadd", func(x []float32, a float32, n int) {}, fallbackCL, "fbadd")
	kFallbackCount = register("opencltest.fallbackcount", func(x []float32, a float32, n, m int) {}, fallbackCL, "fbadd")
)

// TestKernelWithoutParams: a kernel without parameters runs on the driver.
func TestKernelWithoutParams(t *testing.T) {
	d := loaded(t)
	if !opencl.OnDriver(d, kNop) {
		t.Fatalf("%s does not run its OpenCL C", kNop.Name())
	}
	q := mustQueue(t, d)
	for range 3 {
		if err := q.Launch(kNop, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Synchronize(); err != nil {
		t.Fatal(err)
	}
}

// TestBuildWithoutArgInfo: a program whose build with the kind's options
// fails is built again without them (no argument info): its kernels run,
// and their launches are checked by the count and sizes of their
// parameters.
func TestBuildWithoutArgInfo(t *testing.T) {
	t.Cleanup(opencl.FailFirstBuildForTests())
	d := loaded(t)
	q := mustQueue(t, d)
	const n = 8
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i)
	}
	p := mustAlloc(t, d, 4*n)
	if err := q.Submit(p, f32bytes(x)); err != nil {
		t.Fatal(err)
	}
	if err := q.Launch(kFallbackAdd, []plugin.Arg{{Ptr: p, Len: n}, {Scalar: float32(2.5)}, {Scalar: n}}); err != nil {
		t.Fatal(err)
	}
	got := make([]float32, n)
	if err := q.Retrieve(unsafe.Slice((*byte)(unsafe.Pointer(&got[0])), 4*n), p); err != nil {
		t.Fatal(err)
	}
	if err := q.Synchronize(); err != nil {
		t.Fatal(err)
	}
	for i, g := range got {
		if g != float32(i)+2.5 {
			t.Fatalf("x[%d] = %v after adding 2.5, want %v", i, g, float32(i)+2.5)
		}
	}
	err := q.Launch(kFallbackCount, []plugin.Arg{{Ptr: p, Len: n}, {Scalar: float32(1)}, {Scalar: 1}, {Scalar: 1}})
	if !errors.Is(err, plugin.ErrBadKernel) || !strings.Contains(err.Error(), "3 parameters") {
		t.Errorf("a launch with a parameter too many: %v, want ErrBadKernel saying the entry has 3 parameters", err)
	}
	if err := q.Synchronize(); err != nil {
		t.Errorf("the refused launch left the queue failed: %v", err)
	}
}
