package cuda_test

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	"github.com/goffload/offload"
	"github.com/goffload/offload/internal/cudadrv/cudafake"
	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/cuda"
)

// checkPTX has an entry for each case of TestPTXCheck.
const checkPTX = `
.version 6.0
.target sm_50
.address_size 64

.visible .entry good(.param .u64 p0, .param .f32 p1, .param .u64 .ptr .align 1 p2, .param .u64 .ptr .align 1 p3) { ret; }
.visible .entry three(.param .u64 p0, .param .f32 p1, .param .u64 .ptr .align 1 p2) { ret; }
.visible .entry five(.param .u64 p0, .param .f32 p1, .param .u64 .ptr .align 1 p2, .param .u64 .ptr .align 1 p3, .param .u32 p4) { ret; }
.visible .entry intn(.param .u32 p0, .param .f32 p1, .param .u64 .ptr .align 1 p2, .param .u64 .ptr .align 1 p3) { ret; }
.visible .entry pair(.param .align 4 .b8 p0[8], .param .u64 .ptr .align 1 p1) { ret; }
.visible .entry wide(.param .s64 p0, .param .u64 .ptr .align 1 p1) { ret; }
.visible .entry real(.param .f64 p0) { ret; }
.visible .entry integer(.param .u32 p0) { ret; }
.visible .entry vectors(.param .align 8 .b8 p0[8], .param .align 16 .b8 p1[16], .param .align 16 .b8 p2[16], .param .u64 p3) { ret; }
.visible .entry fields(.param .u64 p0, .param .u32 p1, .param .u64 p2) { ret; }
.visible .entry _Z7mangledPf(.param .u64 p0) { ret; }
.visible .entry aligned(.param .u64 .ptr .global .align 16 p0) { ret; }
`

// A kernel with fields of its struct parameter as parameters of its own.
type opts struct {
	N     int
	Scale float32
	X     []float32
}

// testKernel is a kernel outside the registry: the registry's image is
// every test's, and TestKernelsWithoutDeviceCode counts its PTX images.
type testKernel struct {
	name   string
	fn     any
	image  []byte
	entry  string
	params []plugin.Param // if not set, fn's: a slice is a Slice
}

// imageOf returns an image of ks, in order.
func imageOf(ks ...testKernel) *plugin.Image {
	img := &plugin.Image{}
	for i, tk := range ks {
		ft := reflect.TypeOf(tk.fn)
		k := &ptxKernel{index: i, name: tk.name, params: tk.params,
			code: plugin.DeviceCode{Format: "ptx", Image: tk.image, Entry: tk.entry}}
		for j := range k.params { // a field parameter's struct is fn's parameter Top
			if p := &k.params[j]; p.Field >= 0 && p.Top < ft.NumIn() {
				p.Struct = ft.In(p.Top)
			}
		}
		for j := range ft.NumIn() {
			t := ft.In(j)
			if tk.params != nil {
				continue
			}
			p := plugin.Param{Kind: plugin.Scalar, Type: t, Top: j, Field: -1}
			if t.Kind() == reflect.Slice {
				p = plugin.Param{Kind: plugin.Slice, Type: t.Elem(), Top: j, Field: -1, SliceType: t}
			}
			k.params = append(k.params, p)
		}
		img.Kernels = append(img.Kernels, k)
	}
	img.Digest = entries.Digest(img.Kernels)
	return img
}

// ptxKernel is a kernel made by a test, with PTX and no Go body.
type ptxKernel struct {
	index  int
	name   string
	params []plugin.Param
	code   plugin.DeviceCode
}

func (k *ptxKernel) Index() int             { return k.index }
func (k *ptxKernel) Name() string           { return k.name }
func (k *ptxKernel) Params() []plugin.Param { return k.params }
func (k *ptxKernel) Code(format string) (plugin.DeviceCode, bool) {
	return k.code, format == k.code.Format && len(k.code.Image) > 0
}
func (k *ptxKernel) Launch(*plugin.KernelCtx, []plugin.Arg, plugin.Mem) error {
	return fmt.Errorf("%w: test kernel %q has no Go body", plugin.ErrBadKernel, k.name)
}
func (k *ptxKernel) LaunchHere(ctx *plugin.KernelCtx, args []plugin.Arg, mem plugin.Mem, _ func(error)) error {
	return k.Launch(ctx, args, mem)
}

// loadImage opens GPU 0 of drv and loads img as device 0.
func loadImage(t *testing.T, drv *cudafake.Driver, img *plugin.Image) plugin.Device {
	t.Helper()
	return loadImageAs(t, drv, img, 0)
}

// loadImageAs opens GPU 0 of drv and loads img as device num.
func loadImageAs(t *testing.T, drv *cudafake.Driver, img *plugin.Image, num int) plugin.Device {
	t.Helper()
	devs, err := cuda.OpenWith(drv, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	d := devs[0]
	t.Cleanup(func() { d.Close() })
	if err := d.Load(img, num); err != nil {
		t.Fatalf("Load: %v", err)
	}
	return d
}

// saxpyOnFake is the fake GPU's saxpy: y[i] += a*x[i] for i < n, the
// parameters read as the PTX entry declares them.
func saxpyOnFake(l *cudafake.Launch) error {
	n, a := l.Int64(0), l.Float32(1)
	x, err := cudafake.Slice[float32](l, 2, n)
	if err != nil {
		return err
	}
	y, err := cudafake.Slice[float32](l, 3, n)
	if err != nil {
		return err
	}
	for i := range y {
		y[i] += a * x[i]
	}
	return nil
}

// runSaxpy launches k, a saxpy, on d over n elements and checks y.
func runSaxpy(t *testing.T, d plugin.Device, k plugin.Kernel) {
	t.Helper()
	q, err := d.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	const n = 300
	x, y := make([]float32, n), make([]float32, n)
	for i := range x {
		x[i], y[i] = float32(i), 1
	}
	bytesOf := func(s []float32) []byte { return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), 4*len(s)) }
	dx, _ := d.Alloc(4 * n)
	dy, _ := d.Alloc(4 * n)
	q.Submit(dx, bytesOf(x))
	q.Submit(dy, bytesOf(y))
	if err := q.Launch(k, []plugin.Arg{{Scalar: n}, {Scalar: float32(2)}, {Ptr: dx, Len: n}, {Ptr: dy, Len: n}}); err != nil {
		t.Fatalf("%s: %v", k.Name(), err)
	}
	q.Retrieve(bytesOf(y), dy)
	if err := q.Synchronize(); err != nil {
		t.Fatal(err)
	}
	for i := range y {
		if y[i] != 1+2*float32(i) {
			t.Fatalf("%s: y[%d] = %v, want %v", k.Name(), i, y[i], 1+2*float32(i))
		}
	}
}

// TestPTXCheck: a kernel whose PTX entry does not take its Go parameters
// (count, size, alignment, float or integer) or that has no entry fails
// its launches, before any reaches the driver, with an error naming the
// kernel, the entry and the parameter on both sides; Load does not fail,
// and the other kernels of the device launch.
func TestPTXCheck(t *testing.T) {
	saxpy := func(n int, a float32, x, y []float32) {}
	img := []byte(checkPTX)
	kernels := []testKernel{
		{"cudatest.check.good", saxpy, img, "good", nil},
		{"cudatest.check.count", saxpy, img, "three", nil},
		{"cudatest.check.count5", saxpy, img, "five", nil},
		{"cudatest.check.size", saxpy, img, "intn", nil},
		{"cudatest.check.align", func(v int64, x []float32) {}, img, "pair", nil},
		{"cudatest.check.align2", func(v [2]int32, x []float32) {}, img, "wide", nil},
		{"cudatest.check.float", func(v int64) {}, img, "real", nil},
		{"cudatest.check.int", func(v float32) {}, img, "integer", nil},
		{"cudatest.check.vectors", func(c complex64, z complex128, f [4]float32, n int) {}, img, "vectors", nil},
		{"cudatest.check.fields", func(o opts) {}, img, "fields", []plugin.Param{
			{Kind: plugin.Scalar, Type: reflect.TypeFor[int](), Top: 0, Field: 0},
			{Kind: plugin.Scalar, Type: reflect.TypeFor[float32](), Top: 0, Field: 1},
			{Kind: plugin.Slice, Type: reflect.TypeFor[float32](), Top: 0, Field: 2, SliceType: reflect.TypeFor[[]float32]()},
		}},
		{"cudatest.check.missing", func(x []float32) {}, img, "nosuch", nil},
		{"cudatest.check.mangled", func(x []float32) {}, img, "mangled", nil},
		{"cudatest.check.aligned", func(x [][3]float32) {}, img, "aligned", nil},
	}
	image := imageOf(kernels...)
	k := func(name string) plugin.Kernel {
		for _, k := range image.Kernels {
			if k.Name() == "cudatest.check."+name {
				return k
			}
		}
		t.Fatalf("no kernel %s", name)
		return nil
	}
	drv := cudafake.New(cudafake.Config{GPUs: []cudafake.GPU{cudafake.H100}})
	drv.SetKernel("good", saxpyOnFake)
	d := loadImage(t, drv, image)
	if n := drv.Calls("cuModuleLoadData"); n != 1 {
		t.Errorf("cuModuleLoadData called %d times, want 1", n)
	}
	q, err := d.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	x, _ := d.Alloc(64)
	args := []plugin.Arg{{Scalar: 4}, {Scalar: float32(1)}, {Ptr: x, Len: 4}, {Ptr: x, Len: 4}}
	for _, c := range []struct {
		k    string
		args []plugin.Arg
		want []string
	}{
		{"count", args, []string{"PTX entry three has 3 parameters (.u64, .f32, .u64 .ptr .align 1); the Go kernel has 4 parameters (int, float32, []float32, []float32)",
			"the Go parameter 3 ([]float32) has none in the entry"}},
		{"count5", args, []string{"PTX entry five has 5 parameters", "PTX parameter 4 (.u32) has no Go parameter (after the Go parameters an entry may take only the global offset: one or three 64-bit integers)"}},
		{"size", args, []string{"PTX entry intn parameter 0 is .u32 (4 bytes, align 4); the Go parameter 0 (int) is 8 bytes, align 8: declare it long long in the .cu file, or take int32 or uint32 in Go"}},
		{"align", []plugin.Arg{{Scalar: int64(1)}, {Ptr: x, Len: 4}},
			[]string{"PTX entry pair parameter 0 is .align 4 .b8[8] (8 bytes, align 4); the Go parameter 0 (int64) is 8 bytes, align 8", "or take an array or struct of 8 bytes aligned 4 in Go"}},
		{"align2", []plugin.Arg{{Scalar: [2]int32{}}, {Ptr: x, Len: 4}},
			[]string{"PTX entry wide parameter 0 is .s64 (8 bytes, align 8); the Go parameter 0 ([2]int32) is 8 bytes, align 4: declare it a struct holding int[2] in the .cu file, or take int or int64 in Go"}},
		{"float", []plugin.Arg{{Scalar: int64(1)}}, []string{"PTX entry real parameter 0 is .f64, a float; the Go parameter 0 (int64) is an integer: declare it long long in the .cu file, or take float64 in Go"}},
		{"int", []plugin.Arg{{Scalar: float32(1)}}, []string{"PTX entry integer parameter 0 is .u32, an integer; the Go parameter 0 (float32) is a float: declare it float in the .cu file, or take int32 or uint32 in Go"}},
		{"fields", []plugin.Arg{{Scalar: 1}, {Scalar: float32(1)}, {Ptr: x, Len: 4}},
			[]string{"PTX entry fields parameter 1 is .u32, an integer; the Go parameter 1 (field Scale float32 of parameter 0, a cuda_test.opts) is a float"}},
		{"missing", []plugin.Arg{{Ptr: x, Len: 4}}, []string{`entry "nosuch" of its PTX`, "CUDA_ERROR_NOT_FOUND", "the PTX has entries _Z7mangledPf, aligned, fields, five, good"}},
		{"mangled", []plugin.Arg{{Ptr: x, Len: 4}}, []string{`entry "mangled" of its PTX`, `is _Z7mangledPf the C++ name of mangled? declare it extern "C"`}},
		// PTX gives a pointer's alignment, not its element type: 12-byte
		// elements cannot all be aligned 16.
		{"aligned", []plugin.Arg{{Ptr: x, Len: 4}}, []string{"PTX entry aligned parameter 0 is .u64 .ptr .global .align 16, a pointer to memory aligned 16",
			"the Go parameter 0 ([][3]float32) has elements of 12 bytes, which cannot all be aligned 16: give them the .cu file's element type (a multiple of 16 bytes)"}},
	} {
		k := k(c.k)
		err := q.Launch(k, c.args)
		if !errors.Is(err, plugin.ErrBadKernel) {
			t.Errorf("%s: Launch = %v, want an error wrapping ErrBadKernel", k.Name(), err)
			continue
		}
		for _, w := range append([]string{fmt.Sprintf("cuda device 0 (GPU 0): invalid kernel launch: kernel %q: ", k.Name())}, c.want...) {
			if strings.HasPrefix(w, "cuda device") && (c.k == "missing" || c.k == "mangled") {
				w = fmt.Sprintf("cuda device 0 (GPU 0): kernel %q: ", k.Name()) // the driver's error
			}
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error\n\t%s\ndoes not say\n\t%s", k.Name(), err, w)
			}
		}
		if c.k == "size" {
			t.Logf("the error of a kernel taking int where the .cu file declares int:\n%s", err)
		}
	}
	if n := drv.Calls("cuLaunchKernel"); n != 0 {
		t.Errorf("%d launches reached the driver, want none", n)
	}
	if err := q.Synchronize(); err != nil {
		t.Errorf("refused launches left the queue failed: %v", err)
	}

	// The other kernels of the device launch: the good one runs, and
	// vector types aligned more strictly than Go can declare pass.
	runSaxpy(t, d, k("good"))
	if err := q.Launch(k("vectors"), []plugin.Arg{{Scalar: complex64(1)}, {Scalar: complex128(2)}, {Scalar: [4]float32{}}, {Scalar: 1}}); err != nil {
		t.Errorf("vectors: %v", err)
	}
	if err := q.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if n := drv.Launches("good") + drv.Launches("vectors"); n != 2 {
		t.Errorf("%d launches ran, want 2", n)
	}
}

// TestPTXCheckRepo: the repository's PTX takes the parameters of the
// kernels that used it: the saxpy examples/saxpy had (and runs it on the fake),
// bench's empty, and the registered kernels of this package's tests (a
// mismatch there would make their tests fail, not this one). A saxpy
// taking an int32 n is refused.
func TestPTXCheckRepo(t *testing.T) {
	read := func(file string) []byte {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	saxpyPTX, benchPTX := read("../../bench/internal/handptx/saxpy.ptx"), read("../../bench/cuda.ptx")
	image := imageOf(
		testKernel{"cudatest.repo.saxpy", func(n int, a float32, x offload.In[float32], y offload.InOut[float32]) {}, saxpyPTX, "saxpy", nil},
		testKernel{"cudatest.repo.empty", func() {}, benchPTX, "empty", nil},
		testKernel{"cudatest.repo.saxpy32", func(n int32, a float32, x offload.In[float32], y offload.InOut[float32]) {}, saxpyPTX, "saxpy", nil},
	)
	drv := cudafake.New(cudafake.Config{GPUs: []cudafake.GPU{cudafake.H100}})
	drv.SetKernel("saxpy", saxpyOnFake)
	d := loadImage(t, drv, image)
	runSaxpy(t, d, image.Kernels[0])
	q, err := d.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Launch(image.Kernels[1], nil); err != nil {
		t.Errorf("bench.empty: %v", err)
	}
	err = q.Launch(image.Kernels[2], []plugin.Arg{{Scalar: int32(1)}, {Scalar: float32(1)}, {}, {}})
	const want = `cuda device 0 (GPU 0): invalid kernel launch: kernel "cudatest.repo.saxpy32": PTX entry saxpy parameter 0 is .u64 (8 bytes, align 8); ` +
		`the Go parameter 0 (int32) is 4 bytes, align 4: declare it int in the .cu file, or take int, int64, uint64 or a slice in Go`
	if !errors.Is(err, plugin.ErrBadKernel) || err.Error() != want {
		t.Errorf("saxpy with an int32 n:\n\t%v\nwant\n\t%s", err, want)
	}
	if err := q.Synchronize(); err != nil {
		t.Fatal(err)
	}

	// Every kernel registered in this test binary with PTX that loads
	// passes (the registry's image is the other tests').
	reg := loaded(t, cudafake.New(cudafake.Config{GPUs: []cudafake.GPU{cudafake.H100}}))
	rq, err := reg.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	defer rq.Close()
	checked := 0
	for _, k := range entries.Current().Kernels {
		code, ok := k.Code("ptx")
		if !ok || !strings.Contains(string(code.Image), ".entry "+code.Entry) || k.Name() == "cudatest.emptystruct" {
			continue // no PTX, no such entry (kNoEntry), or not meant to launch (kEmpty, for Pack)
		}
		err := rq.Launch(k, nil) // the wrong arguments: an error, but not the check's
		if err != nil && strings.Contains(err.Error(), "PTX entry") {
			t.Errorf("registered kernel %s: %v", k.Name(), err)
		}
		checked++
	}
	if checked < 2 {
		t.Errorf("%d registered kernels with PTX checked, want kScalars, kAddOne and more", checked)
	}
}
