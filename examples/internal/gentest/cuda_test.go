package gentest

import (
	"testing"

	"github.com/goffload/offload/internal/cudadrv"
	"github.com/goffload/offload/internal/cudadrv/cudafake"
	"github.com/goffload/offload/plugins/cuda"
)

// test is a test of the package, by name.
type test struct {
	name string
	run  func(*testing.T)
}

// onGPU runs tests with spec as the device that runs the generated code.
func onGPU(t *testing.T, spec string, tests ...test) {
	gpu = spec
	defer func() { gpu = "" }()
	for _, c := range tests {
		t.Run(c.name, c.run)
	}
}

// TestFakeGPU runs tests of the package on a fake GPU (cudafake): the
// cuda kind loads the package's generated PTX, checks every entry's
// parameters against its kernel's and the hidden ones, and packs the
// arguments, the slice lengths, the device number and the fault record as
// the entries take them; the fake runs each entry's Go body over them
// (cudafake.SetGenerated). It checks the cuda kind's side of generated
// PTX, not the PTX: that is TestGPU's.
func TestFakeGPU(t *testing.T) {
	drv := cudafake.New(cudafake.Config{GPUs: []cudafake.GPU{cudafake.H100}})
	if set := drv.SetGenerated(); len(set) < 10 {
		t.Fatalf("generated PTX entries %v: want the package's", set)
	}
	defer cuda.UseDriverForTests(drv)()
	onGPU(t, "cuda:0", test{"Integers", TestIntegers}, test{"Floats", TestFloats}, test{"Mandelbrot", TestMandelbrot},
		test{"Structs", TestStructs}, test{"Dim", TestDim}, test{"Device", TestDevice})
}

// TestGPU runs every test of the package on the machine's first GPU, with
// the generated PTX (scripts/gpu-run): Go's semantics bit for bit against
// the host device, the checks' faults, declare target variables and
// reductions, as on PoCL.
func TestGPU(t *testing.T) {
	if _, err := cudadrv.Load(cudadrv.DefaultLibrary); err != nil {
		t.Skipf("no NVIDIA driver (libcuda.so.1 not found): %v", err)
	}
	onGPU(t, "cuda:0", test{"Integers", TestIntegers}, test{"Floats", TestFloats}, test{"Mandelbrot", TestMandelbrot},
		test{"Faults", TestFaults}, test{"Structs", TestStructs}, test{"Dim", TestDim}, test{"Globals", TestGlobals},
		test{"Reduce", TestReduce}, test{"ReduceFault", TestReduceFault}, test{"Device", TestDevice}, test{"Panic", TestPanic})
}
