package plugintest

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/goffload/offload/plugin"
)

// scalarSet is one set of values for the scalars kernel, in parameter order.
type scalarSet struct {
	b    bool
	i8   int8
	i16  int16
	i32  int32
	i64  int64
	u8   uint8
	u16  uint16
	u32  uint32
	u64  uint64
	i    int
	u    uint
	f32  float32
	f64  float64
	c64  complex64
	c128 complex128
	arr  [3]float32
	s    plain
}

func (v scalarSet) args() []plugin.Arg {
	return []plugin.Arg{scalar(v.b), scalar(v.i8), scalar(v.i16), scalar(v.i32), scalar(v.i64),
		scalar(v.u8), scalar(v.u16), scalar(v.u32), scalar(v.u64), scalar(v.i), scalar(v.u),
		scalar(v.f32), scalar(v.f64), scalar(v.c64), scalar(v.c128), scalar(v.arr), scalar(v.s)}
}

// want returns what the scalars kernel writes for v and in, computed by
// running its body on the host.
func (v scalarSet) want(in []int32) []uint64 {
	out := make([]uint64, scalarWords+len(in))
	scalarsKernel(out, v.b, v.i8, v.i16, v.i32, v.i64, v.u8, v.u16, v.u32, v.u64, v.i, v.u,
		v.f32, v.f64, v.c64, v.c128, v.arr, v.s, in)
	return out
}

func (e *env) testLaunchScalars(t *testing.T) {
	negZero32 := float32(math.Copysign(0, -1))
	sets := []scalarSet{{
		b: true, i8: math.MinInt8, i16: -12345, i32: math.MinInt32 + 7, i64: math.MinInt64 + 3,
		u8: math.MaxUint8, u16: math.MaxUint16 - 2, u32: math.MaxUint32 - 5, u64: math.MaxUint64 - 9,
		i: -123456789, u: 987654321,
		f32: negZero32, f64: math.SmallestNonzeroFloat64,
		c64: complex(float32(math.MaxFloat32), -1.5), c128: complex(math.Inf(-1), math.Pi),
		arr: [3]float32{1.25, -2.5, math.SmallestNonzeroFloat32},
		s:   plain{A: -2, B: -1e300, C: [2]uint8{7, 250}, D: true, E: complex(1, -1)},
	}, {
		i8: math.MaxInt8, i16: math.MaxInt16, i32: math.MaxInt32, i64: math.MaxInt64,
		u8: 1, u16: 0x8001, u32: 0x80000001, u64: 1 << 63,
		i: math.MaxInt32, u: 1,
		f32: float32(math.Inf(1)), f64: -math.MaxFloat64,
		c64: complex(negZero32, float32(math.SmallestNonzeroFloat32)), c128: complex(-0.1, 1e-300),
		arr: [3]float32{-1, 0, 1},
		s:   plain{A: math.MaxInt16, B: math.Copysign(0, -1), C: [2]uint8{0, 255}, E: complex(-3, 4)},
	}}
	in := []int32{-1, 0, 1, math.MaxInt32, math.MinInt32}
	// Spot checks of the expected words, so that the kernel's own body is
	// not the only judge.
	if w := sets[0].want(in); w[0] != 1 || w[1] != 0xffffffffffffff80 || w[4] != uint64(1<<63+3) || w[11] != 0x80000000 || w[scalarWords+4] != 0xffffffff80000000 {
		t.Fatalf("plugintest: the scalars kernel's body is broken: %#x", w)
	}

	for di, d := range e.devs[:2] {
		q := newQueue(t, d)
		for si, v := range sets {
			n := scalarWords + len(in)
			out, pin := alloc(t, d, int64(8*n)), alloc(t, d, int64(4*len(in)))
			put(t, q, out, make([]byte, 8*n))
			put(t, q, pin, asBytes(in))
			launch(t, q, kScalars, append(append([]plugin.Arg{slice(out, n)}, v.args()...), slice(pin, len(in)))...)
			got := fromBytes[uint64](get(t, q, out, 8*n))
			want := v.want(in)
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("device %d, set %d: word %d = %#x, want %#x", di, si, i, got[i], want[i])
				}
			}
		}
	}
}

func (e *env) testLaunchSlices(t *testing.T) {
	d := e.devs[0]
	q := newQueue(t, d)
	const n = 1000
	init := make([]int32, n)
	for i := range init {
		init[i] = int32(i*7919 - 40000)
	}
	p := alloc(t, d, 4*n)
	put(t, q, p, asBytes(init))
	// dst = src + 7 with src at element 3 and dst at element 500, both 100
	// elements, inside one allocation.
	launch(t, q, kAddInt32, slice(p+4*500, 100), slice(p+4*3, 100), scalar(int32(7)))
	// A slice that ends exactly at the allocation's end.
	launch(t, q, kAddInt32, slice(p+4*990, 10), slice(p+4*990, 10), scalar(int32(-1)))
	// Zero-length slices change nothing.
	launch(t, q, kAddInt32, slice(p+4*10, 0), slice(p+4*20, 0), scalar(int32(1)))
	got := fromBytes[int32](get(t, q, p, 4*n))
	want := append([]int32(nil), init...)
	for i := 0; i < 100; i++ {
		want[500+i] = init[3+i] + 7
	}
	for i := 990; i < n; i++ {
		want[i] = init[i] - 1
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("element %d = %d, want %d", i, got[i], want[i])
		}
	}

	// The kernel sees the lengths it was given, zero included.
	out := alloc(t, d, 16)
	fp := alloc(t, d, 8*3)
	put(t, q, out, asBytes([]int64{-1, -1}))
	launch(t, q, kLens, slice(out, 2), slice(p+8, 0), slice(fp, 3))
	if got := fromBytes[int64](get(t, q, out, 16)); got[0] != 0 || got[1] != 3 {
		t.Errorf("kernel saw slice lengths %v, want [0 3]", got)
	}

	// A slice that runs past its allocation is refused.
	expectErr(t, "slice argument past the allocation's end", q,
		q.Launch(kAddInt32, []plugin.Arg{slice(p+4*990, 11), slice(p, 11), scalar(int32(1))}), plugin.ErrBadPointer)
}

func (e *env) testLaunchBad(t *testing.T) {
	d := e.devs[0]
	q := newQueue(t, d)
	x := alloc(t, d, 8*4)
	put(t, q, x, asBytes([]int64{1, 1, 1, 1}))
	mustSync(t, q)

	expectErr(t, "too few arguments", q, q.Launch(kFillInt64, []plugin.Arg{slice(x, 4)}), plugin.ErrBadKernel)
	expectErr(t, "too many arguments", q, q.Launch(kFillInt64, []plugin.Arg{slice(x, 4), scalar(int64(5)), scalar(int64(5))}), plugin.ErrBadKernel)
	expectErr(t, "int32 for an int64 parameter", q, q.Launch(kFillInt64, []plugin.Arg{slice(x, 4), scalar(int32(5))}), plugin.ErrBadKernel)
	expectErr(t, "int for an int64 parameter", q, q.Launch(kFillInt64, []plugin.Arg{slice(x, 4), scalar(5)}), plugin.ErrBadKernel)
	expectErr(t, "nil scalar", q, q.Launch(kFillInt64, []plugin.Arg{slice(x, 4), {}}), plugin.ErrBadKernel)
	expectErr(t, "struct of the wrong type", q, q.Launch(kSleep, []plugin.Arg{scalar(struct{ A int64 }{1})}), plugin.ErrBadKernel)
	expectErr(t, "negative slice length", q, q.Launch(kFillInt64, []plugin.Arg{slice(x, -1), scalar(int64(5))}), plugin.ErrBadKernel)

	notLoaded := reindexed{Kernel: kFillInt64, index: len(e.img.Kernels) + 100}
	expectErr(t, "kernel not in the loaded image", q, q.Launch(notLoaded, []plugin.Arg{slice(x, 4), scalar(int64(5))}), plugin.ErrBadKernel)
	negative := reindexed{Kernel: kFillInt64, index: -1}
	expectErr(t, "kernel with a negative index", q, q.Launch(negative, []plugin.Arg{slice(x, 4), scalar(int64(5))}), plugin.ErrBadKernel)
	expectErr(t, "nil kernel", q, q.Launch(nil, nil), plugin.ErrBadKernel)

	// None of the refused launches ran, and the queue works.
	if got := fromBytes[int64](get(t, q, x, 32)); got[0] != 1 || got[3] != 1 {
		t.Errorf("after refused launches the buffer is %v, want all 1", got)
	}
	launch(t, q, kFillInt64, slice(x, 4), scalar(int64(5)))
	if got := fromBytes[int64](get(t, q, x, 32)); got[0] != 5 || got[3] != 5 {
		t.Errorf("launch after refused ones: buffer is %v, want all 5", got)
	}
}

func (e *env) testKernelContext(t *testing.T) {
	for di, d := range e.devs {
		q := newQueue(t, d)
		cores := d.Info().Cores
		for _, n := range []int{0, 1, 2, 3, 1001, 1<<16 + 1} {
			out := alloc(t, d, int64(4*n+4))
			info := alloc(t, d, 16)
			put(t, q, out, make([]byte, 4*n+4))
			put(t, q, info, asBytes([]int64{-7, -7}))
			launch(t, q, kCtxFill, slice(out, n), slice(info, 2))
			got := fromBytes[int32](get(t, q, out, 4*n+4))
			for i, v := range got[:n] {
				if v != 1 {
					t.Errorf("device %d, For(%d): index %d covered %d times, want once", di, n, i, v)
					break
				}
			}
			if got[n] != 0 {
				t.Errorf("device %d, For(%d): the element after the slice was written", di, n)
			}
			gi := fromBytes[int64](get(t, q, info, 16))
			if gi[0] != int64(di) {
				t.Errorf("device %d: kernel context Device() = %d, want %d (the number given to Load)", di, gi[0], di)
			}
			if gi[1] != int64(cores) {
				t.Errorf("device %d: kernel context Cores() = %d, want Info().Cores = %d", di, gi[1], cores)
			}
		}
	}
}

func (e *env) testKernelPanic(t *testing.T) {
	d := e.devs[0]
	q := newQueue(t, d)
	x := alloc(t, d, 8*4)
	put(t, q, x, asBytes([]int64{1, 1, 1, 1}))
	launch(t, q, kPanic, scalar(int64(12345)))
	launch(t, q, kFillInt64, slice(x, 4), scalar(int64(9))) // skipped
	host := pattern(32, 10)
	if err := q.Retrieve(host, x); err != nil { // skipped
		t.Fatal(err)
	}
	err := qsync(t, q)
	if !errors.Is(err, plugin.ErrKernelFailed) {
		t.Fatalf("Synchronize after a panicking kernel = %v, want an error wrapping ErrKernelFailed", err)
	}
	if !strings.Contains(err.Error(), panicMessage(12345)) {
		t.Errorf("kernel panic error %q does not contain the panic value %q", err, panicMessage(12345))
	}
	if diff := firstDiff(host, pattern(32, 10)); diff != "" {
		t.Errorf("a Retrieve after the failed kernel ran: host buffer %s", diff)
	}
	if err := qsync(t, q); err != nil {
		t.Errorf("second Synchronize = %v, want nil (the error state clears)", err)
	}
	if got := fromBytes[int64](get(t, q, x, 32)); got[0] != 1 || got[3] != 1 {
		t.Errorf("a launch after the failed kernel ran: buffer %v, want all 1", got)
	}
	launch(t, q, kFillInt64, slice(x, 4), scalar(int64(3)))
	if got := fromBytes[int64](get(t, q, x, 32)); got[0] != 3 || got[3] != 3 {
		t.Errorf("launch after the failure cleared: buffer %v, want all 3", got)
	}

	// A panic in a chunk of a parallel loop.
	launch(t, q, kPanicFor, scalar(1000), scalar(int64(777)))
	err = qsync(t, q)
	if !errors.Is(err, plugin.ErrKernelFailed) || !strings.Contains(err.Error(), panicMessage(777)) {
		t.Errorf("panic inside For: Synchronize = %v, want an error wrapping ErrKernelFailed with %q", err, panicMessage(777))
	}

	// Query reports the failure once the queue is done, and clears it.
	launch(t, q, kPanic, scalar(int64(55)))
	deadline := time.Now().Add(timeout)
	for {
		done, err := q.Query()
		if done {
			if !errors.Is(err, plugin.ErrKernelFailed) || !strings.Contains(err.Error(), panicMessage(55)) {
				t.Errorf("Query after a panicking kernel = %v, want an error wrapping ErrKernelFailed with %q", err, panicMessage(55))
			}
			break
		}
		if err != nil {
			t.Errorf("Query while running returned error %v with done=false", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("Query did not report done within %v", timeout)
		}
		time.Sleep(time.Millisecond)
	}
	if done, err := q.Query(); !done || err != nil {
		t.Errorf("second Query = %v, %v; want true, nil (Query clears the error)", done, err)
	}

	// The device and the other device keep working.
	for di, dd := range e.devs[:2] {
		q2 := newQueue(t, dd)
		y := alloc(t, dd, 8)
		launch(t, q2, kFillInt64, slice(y, 1), scalar(int64(di+40)))
		if got := fromBytes[int64](get(t, q2, y, 8)); got[0] != int64(di+40) {
			t.Errorf("device %d after a kernel panic: got %d, want %d", di, got[0], di+40)
		}
	}
}

// testLaunchGeometry checks plugin.GeometryLauncher. A launch with no
// geometry is Launch. One with a geometry the device can run runs the kernel
// whole. (The suite's kernels are loops over their slices, which a kind runs
// as its launches run them, whatever the geometry.)
func (e *env) testLaunchGeometry(t *testing.T) {
	d := e.devs[0]
	q := newQueue(t, d)
	gl, ok := q.(plugin.GeometryLauncher)
	if !ok {
		t.Skip("the kind's launches take no geometry (plugin.GeometryLauncher is optional)")
	}
	const n = 300
	src := make([]int32, n)
	for i := range src {
		src[i] = int32(i*31 - 1000)
	}
	p := alloc(t, d, 4*n)
	dst := alloc(t, d, 4*n)
	put(t, q, p, asBytes(src))
	for _, g := range []plugin.Geometry{
		{},
		{Teams: [3]int{2, 1, 1}},
		{Threads: [3]int{32, 1, 1}},
		{Teams: [3]int{3, 2, 1}, Threads: [3]int{4, 4, 2}},
	} {
		put(t, q, dst, make([]byte, 4*n))
		if err := gl.LaunchGeometry(kAddInt32, []plugin.Arg{slice(dst, n), slice(p, n), scalar(int32(5))}, g); err != nil {
			t.Fatalf("LaunchGeometry(%s, %v): %v", kAddInt32.Name(), g, err)
		}
		got := fromBytes[int32](get(t, q, dst, 4*n))
		for i := range got {
			if got[i] != src[i]+5 {
				t.Fatalf("geometry %+v: element %d = %d, want %d", g, i, got[i], src[i]+5)
			}
		}
	}
	// Its arguments are checked as Launch's are.
	expectErr(t, "LaunchGeometry with a slice past the allocation's end", q,
		gl.LaunchGeometry(kAddInt32, []plugin.Arg{slice(dst, n+1), slice(p, n), scalar(int32(1))}, plugin.Geometry{Teams: [3]int{1, 1, 1}}), plugin.ErrBadPointer)
}

// reindexed is a kernel with another index: not the image's kernel there.
type reindexed struct {
	plugin.Kernel
	index int
}

func (r reindexed) Index() int   { return r.index }
func (r reindexed) Name() string { return "plugintest.notLoaded" }
