package cuda_test

import (
	"bytes"
	_ "embed"
	"math"
	"reflect"
	"testing"

	"github.com/goffload/offload/internal/cudadrv"
	"github.com/goffload/offload/internal/cudadrv/cudafake"
	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/internal/ptxgen"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/cuda"
)

//go:generate clang -x cuda --cuda-device-only --cuda-gpu-arch=sm_50 -nocudainc -nocudalib -O3 -S testdata/scalars.cu -o testdata/scalars.ptx

// scalarsPTX is clang's PTX of testdata/scalars.cu.
//
//go:embed testdata/scalars.ptx
var scalarsPTX []byte

// kGPUScalars takes a parameter of every scalar kind; on a GPU its PTX
// stores them at out as C lays out a struct of them (the GPU has no use
// for the Go body).
var kGPUScalars = mustKernel("cudatest.gpuscalars", func(out []byte, b bool, i8 int8, i16 int16, i32 int32, i64 int64, u8 uint8, u16 uint16, u32 uint32,
	u64 uint64, i int, u uint, f32 float32, f64 float64, c64 complex64, c128 complex128, arr [3]float32, s plainStruct) {
}, &plugin.DeviceCode{Format: "ptx", Image: scalarsPTX, Entry: "gpuscalars"})

// TestScalarsGPU launches the PTX that clang compiled from C with a
// parameter of every scalar kind and checks that what the kernel stored
// is what was packed: on a real GPU when there is one (the compiler's
// layout against the kind's), and on the fake GPU (whose kernel stores
// each parameter's bytes as the PTX declares them).
func TestScalarsGPU(t *testing.T) {
	t.Run("fake", func(t *testing.T) {
		drv := cudafake.New(cudafake.Config{GPUs: []cudafake.GPU{cudafake.H100}})
		drv.SetKernel("gpuscalars", storeParams)
		checkScalars(t, loaded(t, drv))
	})
	t.Run("GPU", func(t *testing.T) {
		drv, err := cudadrv.Load(cudadrv.DefaultLibrary)
		if err != nil {
			t.Skipf("no NVIDIA driver (libcuda.so.1 not found): %v", err)
		}
		devs, err := cuda.OpenWith(drv, 0, false)
		if err != nil || len(devs) == 0 {
			t.Skipf("no usable GPU: %v", err)
		}
		d := devs[0]
		t.Cleanup(func() { d.Close() })
		if err := d.Load(entries.Current(), 0); err != nil {
			t.Fatalf("Load: %v", err)
		}
		checkScalars(t, d)
	})
}

// scalarsArgs are the scalar arguments of kGPUScalars, after out.
func scalarsArgs() []plugin.Arg {
	s := plainStruct{A: -2, B: math.Pi, C: [2]uint8{7, 250}, D: true, E: complex(1.5, -2.5)}
	return []plugin.Arg{{Scalar: true}, {Scalar: int8(-3)}, {Scalar: int16(-300)}, {Scalar: int32(-70000)}, {Scalar: int64(math.MinInt64 + 5)},
		{Scalar: uint8(200)}, {Scalar: uint16(60000)}, {Scalar: uint32(4e9)}, {Scalar: uint64(math.MaxUint64 - 1)}, {Scalar: -42}, {Scalar: uint(42)},
		{Scalar: float32(-0.5)}, {Scalar: math.E}, {Scalar: complex64(complex(3, 4))}, {Scalar: complex(-1.25, 1e300)},
		{Scalar: [3]float32{1, 2, 3}}, {Scalar: s}}
}

// storeParams is the fake GPU's gpuscalars: parameter i's bytes, as the
// launch passed them, at its offset in the packed parameters less the
// 8 bytes of out.
func storeParams(l *cudafake.Launch) error {
	_, offs, err := cuda.Pack(kGPUScalars, append([]plugin.Arg{{Ptr: 8, Len: 1}}, scalarsArgs()...))
	if err != nil {
		return err
	}
	end := offs[len(offs)-1] + len(l.Params[len(l.Params)-1]) - 8
	out, err := l.Mem(l.Ptr(0), int64(end))
	if err != nil {
		return err
	}
	for i := 1; i < len(l.Params); i++ {
		copy(out[offs[i]-8:], l.Params[i])
	}
	return nil
}

// checkScalars launches kGPUScalars on d and compares what it stored with
// the packed arguments, byte for byte where the bytes are values (not a
// struct's padding).
func checkScalars(t *testing.T, d plugin.Device) {
	t.Helper()
	args := scalarsArgs()
	packed, offs, err := cuda.Pack(kGPUScalars, append([]plugin.Arg{{Ptr: 8, Len: 1}}, args...))
	if err != nil {
		t.Fatal(err)
	}
	size := len(packed) - 8
	out, err := d.Alloc(int64(size))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(out)
	q, err := d.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Submit(out, make([]byte, size)); err != nil {
		t.Fatal(err)
	}
	if err := q.Launch(kGPUScalars, append([]plugin.Arg{{Ptr: out, Len: size}}, args...)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, size)
	if err := q.Retrieve(got, out); err != nil {
		t.Fatal(err)
	}
	if err := q.Synchronize(); err != nil {
		t.Fatal(err)
	}
	// The bytes of plainStruct that hold its fields.
	plainFields := [][2]int{{0, 2}, {8, 16}, {16, 18}, {18, 19}, {20, 28}}
	for i := 1; i < len(offs); i++ {
		p := kGPUScalars.Params()[i]
		size, _ := cuda.Layout(p)
		at := offs[i] - 8
		ranges := [][2]int{{0, size}}
		if p.Type == plainType {
			ranges = plainFields
		}
		for _, r := range ranges {
			g, w := got[at+r[0]:at+r[1]], packed[offs[i]+r[0]:offs[i]+r[1]]
			if !bytes.Equal(g, w) {
				t.Errorf("parameter %d (%s), bytes [%d, %d): the kernel stored %x, the kind packed %x", i, p.Type, r[0], r[1], g, w)
			}
		}
	}
}

var plainType = reflect.TypeFor[plainStruct]()

// TestScalarsPTXGenerated: testdata/scalars.ptx is what go generate makes
// of testdata/scalars.cu, where clang with the NVPTX target is installed.
func TestScalarsPTXGenerated(t *testing.T) {
	ptxgen.UpToDate(t, "scalars_test.go")
}
