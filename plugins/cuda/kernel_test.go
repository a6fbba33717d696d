package cuda_test

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/goffload/offload/internal/cudadrv"
	"github.com/goffload/offload/internal/cudadrv/cudafake"
	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/plugintest"
	"github.com/goffload/offload/plugins/cuda"
)

// plainStruct is a struct scalar: Go lays it out as C does.
type plainStruct struct {
	A int16
	B float64
	C [2]uint8
	D bool
	E complex64
}

// testPTX declares the entries of the kernels below as the cuda kind
// packs their parameters; the fake driver parses it and reads each
// parameter at the size declared here.
const testPTX = `
.version 6.0
.target sm_50
.address_size 64

.visible .entry scalars(
	.param .u8 p_b,
	.param .s8 p_i8,
	.param .s16 p_i16,
	.param .s32 p_i32,
	.param .s64 p_i64,
	.param .u8 p_u8,
	.param .u16 p_u16,
	.param .u32 p_u32,
	.param .u64 p_u64,
	.param .s64 p_i,
	.param .u64 p_u,
	.param .f32 p_f32,
	.param .f64 p_f64,
	.param .align 4 .b8 p_c64[8],
	.param .align 8 .b8 p_c128[16],
	.param .align 4 .b8 p_arr[12],
	.param .align 8 .b8 p_s[32],
	.param .u64 .ptr .align 1 p_out
)
{
	ret;
}

.visible .entry addone(
	.param .u64 .ptr .align 1 p_x,
	.param .s64 p_n
)
{
	ret;
}

.visible .entry addoneat(
	.param .u64 .ptr .align 1 p_x,
	.param .s64 p_n,
	.param .u64 p_offset
)
{
	ret;
}

.visible .entry lookup(
	.param .u64 .ptr .align 1 p_grid,
	.param .u64 .ptr .align 1 p_out,
	.param .s64 p_n
)
{
	ret;
}
`

var (
	kScalars = mustKernel("cudatest.scalars", func(b bool, i8 int8, i16 int16, i32 int32, i64 int64, u8 uint8, u16 uint16, u32 uint32,
		u64 uint64, i int, u uint, f32 float32, f64 float64, c64 complex64, c128 complex128, arr [3]float32, s plainStruct, out []int64) {
	}, &plugin.DeviceCode{Format: "ptx", Image: []byte(testPTX), Entry: "scalars"})
	kAddOne = mustKernel("cudatest.addone", func(x []int64, n int) {
		for i := range n {
			x[i]++
		}
	}, &plugin.DeviceCode{Format: "ptx", Image: []byte(testPTX), Entry: "addone"})
	kGoOnly = mustKernel("cudatest.goonly", func(x []int64) {}, nil)
	kBadPTX = mustKernel("cudatest.badptx", func(x []int64) {},
		&plugin.DeviceCode{Format: "ptx", Image: []byte("this is not PTX"), Entry: "bad"})
	kNoEntry = mustKernel("cudatest.noentry", func(x []int64) {},
		&plugin.DeviceCode{Format: "ptx", Image: []byte(testPTX), Entry: "missing"})
	kEmpty = mustKernel("cudatest.emptystruct", func(x struct{}) {}, &plugin.DeviceCode{Format: "ptx", Image: []byte(testPTX), Entry: "addone"})
)

func mustKernel(name string, fn any, code *plugin.DeviceCode) plugin.Kernel {
	if k, ok := entries.LookupKernel(name); ok { // a test run again (-count=N)
		return k
	}
	k, err := entries.RegisterKernel(name, fn)
	if err != nil {
		panic(err)
	}
	if code != nil {
		if err := k.SetCode(*code); err != nil {
			panic(err)
		}
	}
	return k
}

// addOne is the fake GPU's addone: x[i]++ for i < n.
func addOne(l *cudafake.Launch) error {
	n := l.Int64(1)
	if l.Threads() < n {
		return fmt.Errorf("%d threads for %d elements", l.Threads(), n)
	}
	x, err := cudafake.Slice[int64](l, 0, n)
	if err != nil {
		return err
	}
	for i := range x {
		x[i]++
	}
	return nil
}

// loaded opens GPU 0 of drv (not in the emulate mode: kernels run their
// PTX) and loads the image as device 0.
func loaded(t *testing.T, drv *cudafake.Driver) plugin.Device {
	t.Helper()
	return loadImage(t, drv, entries.Current())
}

func bytesOf[T any](v T) []byte {
	return append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(&v)), unsafe.Sizeof(v))...)
}

// TestPackLayout: each parameter at an offset aligned for its type, in
// order, with its bytes; slices as their device address.
func TestPackLayout(t *testing.T) {
	s := plainStruct{A: -2, B: math.Pi, C: [2]uint8{7, 250}, D: true, E: complex(1.5, -2.5)}
	args := []plugin.Arg{{Scalar: true}, {Scalar: int8(-3)}, {Scalar: int16(-300)}, {Scalar: int32(-70000)}, {Scalar: int64(math.MinInt64 + 5)},
		{Scalar: uint8(200)}, {Scalar: uint16(60000)}, {Scalar: uint32(4e9)}, {Scalar: uint64(math.MaxUint64 - 1)}, {Scalar: -42}, {Scalar: uint(42)},
		{Scalar: float32(-0.5)}, {Scalar: math.E}, {Scalar: complex64(complex(3, 4))}, {Scalar: complex(-1.25, 1e300)},
		{Scalar: [3]float32{1, 2, 3}}, {Scalar: s}, {Ptr: 0x7000_0000_1234, Len: 9}}
	want := [][]byte{{1}, bytesOf(int8(-3)), bytesOf(int16(-300)), bytesOf(int32(-70000)), bytesOf(int64(math.MinInt64 + 5)),
		{200}, bytesOf(uint16(60000)), bytesOf(uint32(4e9)), bytesOf(uint64(math.MaxUint64 - 1)), bytesOf(-42), bytesOf(uint(42)),
		bytesOf(float32(-0.5)), bytesOf(math.E), bytesOf(complex64(complex(3, 4))), bytesOf(complex(-1.25, 1e300)),
		bytesOf([3]float32{1, 2, 3}), bytesOf(s), bytesOf(uint64(0x7000_0000_1234))}
	wantOffs := []int{0, 1, 2, 4, 8, 16, 18, 20, 24, 32, 40, 48, 56, 64, 72, 88, 104, 136}
	buf, offs, err := cuda.Pack(kScalars, args)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(offs, wantOffs) {
		t.Errorf("offsets %v, want %v", offs, wantOffs)
	}
	for i, w := range want {
		if got := buf[offs[i] : offs[i]+len(w)]; !bytes.Equal(got, w) {
			t.Errorf("parameter %d (%s): bytes %x, want %x", i, kScalars.Params()[i].Type, got, w)
		}
		size, align := cuda.Layout(kScalars.Params()[i])
		if size != len(w) || offs[i]%align != 0 {
			t.Errorf("parameter %d: size %d align %d at %d, want size %d", i, size, align, offs[i], len(w))
		}
	}
	if len(buf) != 144 {
		t.Errorf("%d bytes packed, want 144", len(buf))
	}

	// Wrong arguments are refused, naming the kernel.
	for _, c := range []struct {
		what string
		args []plugin.Arg
	}{
		{"too few", args[:3]},
		{"int for int64", append(append([]plugin.Arg{}, args[:4]...), append([]plugin.Arg{{Scalar: 5}}, args[5:]...)...)},
		{"nil scalar", append(append([]plugin.Arg{}, args[:16]...), plugin.Arg{}, args[17])},
		{"negative length", append(append([]plugin.Arg{}, args[:17]...), plugin.Arg{Ptr: 8, Len: -1})},
	} {
		if _, _, err := cuda.Pack(kScalars, c.args); !errors.Is(err, plugin.ErrBadKernel) || !strings.Contains(err.Error(), kScalars.Name()) {
			t.Errorf("%s: Pack = %v, want an error wrapping ErrBadKernel naming the kernel", c.what, err)
		}
	}
	if _, _, err := cuda.Pack(kEmpty, []plugin.Arg{{Scalar: struct{}{}}}); !errors.Is(err, plugin.ErrBadKernel) {
		t.Errorf("a parameter of size 0: Pack = %v, want ErrBadKernel", err)
	}
	if buf, offs, err := cuda.Pack(mustKernel("cudatest.noparams", func() {}, nil), nil); err != nil || len(buf) != 0 || len(offs) != 0 {
		t.Errorf("no parameters: %v %v %v", buf, offs, err)
	}
}

// TestGrid: 256 threads per block, one thread per element of the longest
// slice, at least one block.
func TestGrid(t *testing.T) {
	for _, c := range []struct {
		lens   []int
		blocks uint32
	}{{[]int{0}, 1}, {[]int{1}, 1}, {[]int{256}, 1}, {[]int{257}, 2}, {[]int{10, 1 << 20, 3}, 4096}, {nil, 1}} {
		var params []plugin.Param
		var args []plugin.Arg
		for _, n := range c.lens {
			params = append(params, plugin.Param{Kind: plugin.Slice, Type: reflect.TypeFor[int64]()})
			args = append(args, plugin.Arg{Len: n})
		}
		params = append(params, plugin.Param{Kind: plugin.Scalar, Type: reflect.TypeFor[int]()})
		args = append(args, plugin.Arg{Scalar: 1 << 30})
		g, b, err := cuda.Grid(&ptxKernel{params: params}, args, plugin.Geometry{})
		if err != nil || g != [3]uint32{c.blocks, 1, 1} || b != [3]uint32{256, 1, 1} {
			t.Errorf("slices of %v: grid %v block %v, want %d blocks of 256", c.lens, g, b, c.blocks)
		}
	}
}

// TestPTXLaunch: a launch reaches the driver with every parameter's bytes
// where the PTX entry declares it, and the kernel runs on the stream.
func TestPTXLaunch(t *testing.T) {
	drv := cudafake.New(cudafake.Config{GPUs: []cudafake.GPU{cudafake.H100}})
	var got [][]byte
	var threads int64
	drv.SetKernel("scalars", func(l *cudafake.Launch) error {
		got, threads = l.Params, l.Threads()
		return nil
	})
	drv.SetKernel("addone", addOne)
	d := loaded(t, drv)
	q, err := d.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	out, err := d.Alloc(8 * 1000)
	if err != nil {
		t.Fatal(err)
	}
	s := plainStruct{A: 9, B: -1, C: [2]uint8{1, 2}, E: complex(0, 1)}
	args := []plugin.Arg{{Scalar: true}, {Scalar: int8(-3)}, {Scalar: int16(-300)}, {Scalar: int32(-70000)}, {Scalar: int64(-5)},
		{Scalar: uint8(200)}, {Scalar: uint16(60000)}, {Scalar: uint32(4e9)}, {Scalar: uint64(7)}, {Scalar: -42}, {Scalar: uint(42)},
		{Scalar: float32(-0.5)}, {Scalar: math.E}, {Scalar: complex64(complex(3, 4))}, {Scalar: complex(-1.25, 1e300)},
		{Scalar: [3]float32{1, 2, 3}}, {Scalar: s}, {Ptr: out, Len: 1000}}
	if err := q.Launch(kScalars, args); err != nil {
		t.Fatal(err)
	}
	if err := q.Synchronize(); err != nil {
		t.Fatal(err)
	}
	want, _, _ := cuda.Pack(kScalars, args)
	_, offs, _ := cuda.Pack(kScalars, args)
	if len(got) != len(args) {
		t.Fatalf("the driver read %d parameters, want %d", len(got), len(args))
	}
	for i := range got {
		if w := want[offs[i] : offs[i]+len(got[i])]; !bytes.Equal(got[i], w) {
			t.Errorf("parameter %d: the driver read %x, want %x", i, got[i], w)
		}
	}
	if threads != 1024 {
		t.Errorf("%d threads for a slice of 1000, want 1024 (4 blocks of 256)", threads)
	}

	// The kernel runs in queue order with the copies.
	x := []int64{1, 2, 3, 4, 5}
	host := unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 40)
	back := make([]byte, 40)
	q.Submit(out, host)
	if err := q.Launch(kAddOne, []plugin.Arg{{Ptr: out, Len: 5}, {Scalar: 5}}); err != nil {
		t.Fatal(err)
	}
	q.Retrieve(back, out)
	if err := q.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if y := unsafe.Slice((*int64)(unsafe.Pointer(&back[0])), 5); !reflect.DeepEqual(y, []int64{2, 3, 4, 5, 6}) {
		t.Errorf("addone: %v", y)
	}
	// A slice argument that runs past its allocation is refused at once.
	if err := q.Launch(kAddOne, []plugin.Arg{{Ptr: out + 8*999, Len: 2}, {Scalar: 2}}); !errors.Is(err, plugin.ErrBadPointer) {
		t.Errorf("a slice past its allocation: %v, want ErrBadPointer", err)
	}
}

// TestKernelsWithoutDeviceCode: Load loads each distinct PTX image once
// and is not stopped by kernels without PTX or with PTX that does not
// load; launching those fails at once, naming the kernel.
func TestKernelsWithoutDeviceCode(t *testing.T) {
	drv := cudafake.New(cudafake.Config{GPUs: []cudafake.GPU{cudafake.H100}})
	d := loaded(t, drv)
	images := map[string]bool{} // testPTX, the bad image, and the other tests' images
	for _, k := range entries.Current().Kernels {
		if c, ok := k.Code("ptx"); ok {
			images[string(c.Image)] = true
		}
	}
	if n := drv.Calls("cuModuleLoadData"); n != len(images) {
		t.Errorf("cuModuleLoadData called %d times, want %d (each distinct PTX image once)", n, len(images))
	}
	q, err := d.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	x, _ := d.Alloc(64)
	for _, c := range []struct {
		k    plugin.Kernel
		want []string
		is   []error
	}{
		{kGoOnly, []string{`kernel "cudatest.goonly" has no PTX`, "offload.Kernel.PTX"}, []error{plugin.ErrBadKernel, plugin.ErrUnsupported}},
		{kBadPTX, []string{`kernel "cudatest.badptx"`, "cuModuleLoadData", "CUDA_ERROR_INVALID_PTX"}, []error{plugin.ErrBadKernel}},
		{kNoEntry, []string{`kernel "cudatest.noentry"`, `entry "missing"`, "CUDA_ERROR_NOT_FOUND"}, []error{plugin.ErrBadKernel}},
	} {
		err := q.Launch(c.k, []plugin.Arg{{Ptr: x, Len: 8}})
		if err == nil {
			t.Errorf("%s: Launch succeeded", c.k.Name())
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", c.k.Name(), err, w)
			}
		}
		for _, e := range c.is {
			if !errors.Is(err, e) {
				t.Errorf("%s: error %q does not wrap %q", c.k.Name(), err, e)
			}
		}
	}
	if err := q.Synchronize(); err != nil {
		t.Errorf("refused launches left the queue failed: %v", err)
	}
	// The declare target bind kernel is not supported yet: say so.
	if k, ok := entries.LookupKernel(entries.BindKernelName); ok {
		if err := q.Launch(k, nil); err == nil || !strings.Contains(err.Error(), "declare target") {
			t.Errorf("bind kernel: %v", err)
		}
	}
}

// TestLargeCopies: copies of several staging chunks, at offsets, through a
// driver whose operations are slow (a staging buffer reused before its
// copy is done would show), then everything freed.
func TestLargeCopies(t *testing.T) {
	drv := cudafake.New(cudafake.Config{GPUs: []cudafake.GPU{cudafake.H100, cudafake.H100}, OpDelay: 20 * time.Millisecond})
	devs, err := cuda.OpenWith(drv, -1, false)
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range devs {
		if err := d.Load(entries.Current(), i); err != nil {
			t.Fatal(err)
		}
	}
	d0, d1 := devs[0], devs[1]
	n := 2*cuda.ChunkSize + 12345
	src := make([]byte, n+7)
	x := uint32(1)
	for i := range src { // no period a chunk could hide in
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		src[i] = byte(x)
	}
	a, _ := d0.Alloc(int64(n + 100))
	b, _ := d1.Alloc(int64(n + 100))
	q0, _ := d0.NewQueue()
	q1, _ := d1.NewQueue()
	if err := q0.Submit(a+3, src[7:]); err != nil {
		t.Fatal(err)
	}
	ev, _ := d0.NewEvent()
	if err := q0.(plugin.Exchanger).Exchange(d1, b+1, a+3, int64(n)); err != nil {
		t.Fatal(err)
	}
	if err := q0.Record(ev); err != nil {
		t.Fatal(err)
	}
	if !d1.(plugin.ForeignEventWaiter).CanWait(ev) {
		t.Fatal("a CUDA device cannot wait on another's event")
	}
	if err := q1.Wait(ev); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, n)
	if err := q1.Retrieve(back, b+1); err != nil {
		t.Fatal(err)
	}
	// The same host buffer sent again after the retrieve: it sends what
	// the retrieve wrote (host memory in queue order).
	if err := q1.Submit(b+1, back); err != nil {
		t.Fatal(err)
	}
	again := make([]byte, n)
	q1.Retrieve(again, b+1)
	if err := q1.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, src[7:]) || !bytes.Equal(again, src[7:]) {
		t.Errorf("%d bytes through two GPUs came back different", n)
	}
	if drv.PageableCopies() != 0 {
		t.Errorf("%d copies used Go memory directly", drv.PageableCopies())
	}
	ev.Close()
	q0.Close()
	q1.Close()
	for _, d := range devs {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	if al, h, s, e, m := drv.Live(); al+h+s+e+m != 0 {
		t.Errorf("after closing: %d allocations, %d pinned buffers, %d streams, %d events, %d modules live", al, h, s, e, m)
	}
}

// TestStickyErrorLosesDevice: a kernel that faults makes the device lost:
// the queue's error and every later operation say so.
func TestStickyErrorLosesDevice(t *testing.T) {
	drv := cudafake.New(cudafake.Config{GPUs: []cudafake.GPU{cudafake.H100}})
	drv.SetKernel("addone", func(*cudafake.Launch) error { return errors.New("out of bounds") })
	d := loaded(t, drv)
	q, _ := d.NewQueue()
	x, _ := d.Alloc(64)
	if err := q.Launch(kAddOne, []plugin.Arg{{Ptr: x, Len: 8}, {Scalar: 8}}); err != nil {
		t.Fatal(err)
	}
	err := q.Synchronize()
	if !errors.Is(err, plugin.ErrDeviceLost) || !errors.Is(err, plugin.ErrKernelFailed) || !strings.Contains(err.Error(), "CUDA_ERROR_ILLEGAL_ADDRESS") {
		t.Errorf("Synchronize after a fault = %v, want ErrDeviceLost and ErrKernelFailed with the CUDA error", err)
	}
	if lost := d.(plugin.LostReporter).Lost(); !errors.Is(lost, plugin.ErrDeviceLost) {
		t.Errorf("Lost() = %v", lost)
	}
	if _, err := d.Alloc(8); !errors.Is(err, plugin.ErrDeviceLost) {
		t.Errorf("Alloc after the fault = %v", err)
	}
	if err := q.Submit(x, make([]byte, 8)); !errors.Is(err, plugin.ErrDeviceLost) {
		t.Errorf("Submit after the fault = %v", err)
	}
}

// TestInline: an inline queue issues on the caller.
func TestInline(t *testing.T) {
	drv := cudafake.New(cudafake.Config{GPUs: []cudafake.GPU{cudafake.H100}})
	drv.SetKernel("addone", addOne)
	d := loaded(t, drv)
	q, _ := d.NewQueue()
	defer q.Close()
	q.(plugin.InlineQueue).SetInline(true)
	x, _ := d.Alloc(8)
	if err := q.Launch(kAddOne, []plugin.Arg{{Ptr: x, Len: 1}, {Scalar: 1}}); err != nil {
		t.Fatal(err)
	}
	if got := drv.Calls("cuLaunchKernel"); got != 1 {
		t.Errorf("after an inline Launch returned, cuLaunchKernel was called %d times, want 1", got)
	}
	if err := q.Synchronize(); err != nil {
		t.Fatal(err)
	}
}

// TestInlineHandOver: an operation enqueued by another goroutine while an
// inline queue issues one on its caller is issued after it, by the
// queue's goroutine: none is left behind when the caller returns.
func TestInlineHandOver(t *testing.T) {
	drv := cudafake.New(cudafake.Config{GPUs: []cudafake.GPU{cudafake.H100}})
	release := make(chan struct{})
	var launches atomic.Int32
	drv.SetKernel("addone", func(l *cudafake.Launch) error {
		if launches.Add(1) == 1 {
			<-release // the first launch holds the stream
			return nil
		}
		return addOne(l)
	})
	d := loaded(t, drv)
	q, _ := d.NewQueue()
	defer q.Close()
	q.(plugin.InlineQueue).SetInline(true)
	x, _ := d.Alloc(8)
	if err := q.Submit(x, make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	if err := q.Launch(kAddOne, []plugin.Arg{{Ptr: x, Len: 1}, {Scalar: 1}}); err != nil { // holds the stream
		t.Fatal(err)
	}
	// A: an inline Retrieve, issued on its goroutine, which waits for the
	// stream.
	first := make([]byte, 8)
	retrieved := make(chan error, 1)
	go func() { retrieved <- q.Retrieve(first, x) }()
	for drv.Calls("cuMemcpyDtoHAsync_v2") == 0 { // A is issuing
		runtime.Gosched()
	}
	// B, while A issues: enqueued for the queue's goroutine.
	if err := q.Launch(kAddOne, []plugin.Arg{{Ptr: x, Len: 1}, {Scalar: 1}}); err != nil {
		t.Fatal(err)
	}
	close(release)
	if err := <-retrieved; err != nil {
		t.Fatal(err)
	}
	after := make([]byte, 8)
	if err := q.Retrieve(after, x); err != nil {
		t.Fatal(err)
	}
	if err := q.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if first[0] != 0 || after[0] != 1 {
		t.Errorf("x was %d before the second launch and %d after it, want 0 and 1: the launch enqueued during an inline issue was lost or reordered", first[0], after[0])
	}
}

// TestNoDriver: without the driver library the kind has no devices and
// says why; "cuda" is ErrNoDevices, "cuda:0" another error.
func TestNoDriver(t *testing.T) {
	t.Setenv(cuda.LibraryEnv, "/nonexistent/libcuda.so.1")
	if got := cuda.Library(); got != "/nonexistent/libcuda.so.1" {
		t.Fatalf("library %q", got)
	}
	const why = "no NVIDIA driver (/nonexistent/libcuda.so.1 not found)"
	devs, err := cuda.OpenSpec("")
	if len(devs) != 0 || !errors.Is(err, plugin.ErrNoDevices) || !strings.Contains(err.Error(), why) {
		t.Errorf("Open(\"\") = %d devices, %v; want none and ErrNoDevices saying %q", len(devs), err, why)
	}
	k, ok := plugin.LookupKind("cuda")
	if !ok || k.Discover == nil || k.Order >= 100 {
		t.Fatalf("the cuda kind is not registered to be discovered before the host")
	}
	if devs, err := k.Discover(); len(devs) != 0 || !errors.Is(err, plugin.ErrNoDevices) {
		t.Errorf("Discover = %d devices, %v", len(devs), err)
	}
	devs, err = cuda.OpenSpec("0")
	if len(devs) != 0 || err == nil || errors.Is(err, plugin.ErrNoDevices) || !strings.Contains(err.Error(), why) {
		t.Errorf("Open(\"0\") = %d devices, %v; want an error (not ErrNoDevices) saying %q", len(devs), err, why)
	}
	for _, bad := range []string{"x", "-1", "0x"} {
		if _, err := cuda.OpenSpec(bad); !errors.Is(err, plugin.ErrBadSpec) {
			t.Errorf("cuda:%s: %v, want ErrBadSpec", bad, err)
		}
	}
}

// TestNoGPU: a driver with no GPU (cuInit fails with NO_DEVICE).
func TestNoGPU(t *testing.T) {
	drv := cudafake.New(cudafake.Config{InitErr: cudadrv.ErrNoDevice})
	defer cuda.UseDriverForTests(drv)()
	_, err := cuda.OpenSpec("")
	if !errors.Is(err, plugin.ErrNoDevices) || !strings.Contains(err.Error(), "no NVIDIA GPU") || !strings.Contains(err.Error(), "CUDA_ERROR_NO_DEVICE") {
		t.Errorf("Open with no GPU = %v", err)
	}
	drv2 := cudafake.New(cudafake.Config{GPUs: []cudafake.GPU{cudafake.H100}})
	defer cuda.UseDriverForTests(drv2)()
	if _, err := cuda.OpenSpec("1"); err == nil || !strings.Contains(err.Error(), "there is no GPU 1") {
		t.Errorf("cuda:1 with one GPU: %v", err)
	}
	devs, err := cuda.OpenSpec("")
	if err != nil || len(devs) != 1 {
		t.Fatalf("cuda with one GPU: %d, %v", len(devs), err)
	}
	in := devs[0].Info()
	if in.Kind != "cuda" || in.Arch != "sm_90" || in.Cores != 132 || in.Memory != 1<<30 || !strings.Contains(in.Name, "H100") || !strings.Contains(in.Name, "CUDA driver 12.4") {
		t.Errorf("Info = %+v", in)
	}
	devs[0].Close()
}

// TestConformanceGPU runs the conformance suite on the machine's GPUs
// (two devices: GPUs 0 and 1, or GPU 0 twice), with the suite's kernels
// (which have no PTX) emulated on the host over device memory: what runs
// on the GPU is its memory, streams, events, copies and waits.
func TestConformanceGPU(t *testing.T) {
	drv, err := cudadrv.Load(cudadrv.DefaultLibrary)
	if err != nil {
		t.Skipf("no NVIDIA driver (libcuda.so.1 not found): %v", err)
	}
	probe, err := cuda.OpenWith(drv, -1, true)
	if err != nil || len(probe) == 0 {
		t.Skipf("no usable GPU: %v", err)
	}
	gpus := len(probe)
	for _, d := range probe {
		d.Close()
	}
	plugintest.Run(t, func(t *testing.T) []plugin.Device {
		a, err := cuda.OpenWith(drv, 0, true)
		if err != nil {
			t.Fatal(err)
		}
		b, err := cuda.OpenWith(drv, min(1, gpus-1), true)
		if err != nil {
			t.Fatal(err)
		}
		return append(a, b...)
	})
}
