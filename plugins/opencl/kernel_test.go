package opencl_test

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/goffload/offload"
	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/internal/opencltest"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/opencl"
)

// testCL is the OpenCL C of the kernels below: one program, built once
// per OpenCL device in the test binary.
const testCL = `
kernel void addf(global float *x, float a, long n) {
	long i = get_global_id(0);
	if (i < n) x[i] += a;
}

// geom writes, for each work-item, its group and local ids and sizes.
kernel void geom(global int *out) {
	size_t i = get_global_id(0) + get_global_id(1) * get_global_size(0);
	out[4*i] = get_group_id(0); out[4*i+1] = get_local_id(0);
	out[4*i+2] = get_local_size(0); out[4*i+3] = get_num_groups(0) * 100 + get_group_id(1);
}

kernel void narrow(global float *x, int n) { }
`

// badCL does not build: y is not declared (line 3).
const badCL = `
kernel void broken(global int *x) {
	x[0] = y;
}
`

var (
	kAddF   = register("opencltest.addf", func(x []float32, a float32, n int) {}, testCL, "addf")
	kGeom   = register("opencltest.geom", func(out []int32) {}, testCL, "geom")
	kBroken = register("opencltest.broken", func(x []int32) {}, badCL, "broken")
	// kNarrow takes an int where the entry takes an int (4 bytes): Go's
	// int is 8.
	kNarrow = register("opencltest.narrow", func(x []float32, n int) {}, testCL, "narrow")
	// kPtr takes a value where the entry takes a pointer.
	kPtr = register("opencltest.ptr", func(x float32, a float32, n int) {}, testCL, "addf")
	// kCount takes one parameter too many.
	kCount = register("opencltest.count", func(x []float32, a float32, n int, m int) {}, testCL, "addf")
	// kMissing names an entry the program lacks.
	kMissing = register("opencltest.missing", func(x []float32) {}, testCL, "nosuch")
	// kNoCode has no OpenCL C.
	kNoCode = register("opencltest.nocode", func(x []float32) {}, "", "")
)

func register(name string, fn any, src, entry string) plugin.Kernel {
	k, err := entries.RegisterKernel(name, fn)
	if err != nil {
		panic(err)
	}
	if src != "" {
		if err := k.SetCode(plugin.DeviceCode{Format: "opencl", Image: []byte(src), Entry: entry}); err != nil {
			panic(err)
		}
	}
	return k
}

// loaded opens and loads one device (not emulated): kernels run their
// OpenCL C or fail.
func loaded(t *testing.T) plugin.Device {
	t.Helper()
	d := opencltest.Open(t)
	if err := d.Load(entries.Current(), 0); err != nil {
		t.Fatal(err)
	}
	return d
}

func mustQueue(t *testing.T, d plugin.Device) plugin.Queue {
	t.Helper()
	q, err := d.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

func mustAlloc(t *testing.T, d plugin.Device, n int64) plugin.Ptr {
	t.Helper()
	p, err := d.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func f32bytes(x []float32) []byte { return unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x)) }

// TestSuiteKernelsOnDriver: the conformance suite's kernels that have
// OpenCL C run it on the driver, not their Go bodies.
func TestSuiteKernelsOnDriver(t *testing.T) {
	t.Cleanup(opencl.UseEmulationForTests())
	d := loaded(t)
	n := 0
	for _, k := range entries.Current().Kernels {
		if strings.HasPrefix(k.Name(), "plugintest.") {
			if _, ok := k.Code("opencl"); ok {
				n++
				if !opencl.OnDriver(d, k) {
					t.Errorf("%s has OpenCL C but does not run it", k.Name())
				}
			}
		}
	}
	if n < 3 {
		t.Errorf("%d of the suite's kernels have OpenCL C, want 3", n)
	}
}

// TestLaunchSubSlices runs a kernel on slices inside an allocation: at
// any offset with SVM; with buffers at an offset the device aligns
// sub-buffers to, and refused with an error that says why elsewhere.
func TestLaunchSubSlices(t *testing.T) {
	for _, svm := range []string{"1", "0"} {
		t.Run("svm="+svm, func(t *testing.T) {
			t.Setenv(opencl.SVMEnv, svm)
			d := loaded(t)
			q := mustQueue(t, d)
			x := make([]float32, 1024)
			p := mustAlloc(t, d, 4*1024)
			if err := q.Submit(p, f32bytes(x)); err != nil {
				t.Fatal(err)
			}
			// 256 floats from float 256 (1 KiB: aligned on every device).
			if err := q.Launch(kAddF, []plugin.Arg{{Ptr: p + 1024, Len: 256}, {Scalar: float32(2)}, {Scalar: 256}}); err != nil {
				t.Fatal(err)
			}
			err := q.Launch(kAddF, []plugin.Arg{{Ptr: p + 4, Len: 3}, {Scalar: float32(5)}, {Scalar: 3}})
			if opencl.UsesSVM(d) {
				if err != nil {
					t.Fatalf("a sub-slice at byte 4 with SVM: %v", err)
				}
			} else if err == nil || !errors.Is(err, plugin.ErrBadKernel) || !strings.Contains(err.Error(), "CL_DEVICE_MEM_BASE_ADDR_ALIGN") || !strings.Contains(err.Error(), kAddF.Name()) {
				t.Fatalf("a sub-slice at byte 4 with buffers: %v, want an error naming the kernel and the alignment", err)
			}
			if err := q.Retrieve(f32bytes(x), p); err != nil {
				t.Fatal(err)
			}
			if err := q.Synchronize(); err != nil {
				t.Fatal(err)
			}
			for i, v := range x {
				want := float32(0)
				switch {
				case i >= 256 && i < 512:
					want = 2
				case i >= 1 && i < 4 && opencl.UsesSVM(d):
					want = 5
				}
				if v != want {
					t.Fatalf("x[%d] = %v, want %v", i, v, want)
				}
			}
		})
	}
}

// TestGeometry: num_teams and thread_limit are the work-groups; one
// beyond the device's limit is refused naming the kernel.
func TestGeometry(t *testing.T) {
	d := loaded(t)
	q := mustQueue(t, d)
	gl := q.(plugin.GeometryLauncher)
	const teams, threads = 3, 4
	out := mustAlloc(t, d, 4*4*teams*threads*2)
	if err := gl.LaunchGeometry(kGeom, []plugin.Arg{{Ptr: out, Len: 4 * teams * threads * 2}}, plugin.Geometry{Teams: [3]int{teams, 2, 1}, Threads: [3]int{threads, 1, 1}}); err != nil {
		t.Fatal(err)
	}
	got := make([]int32, 4*teams*threads*2)
	if err := q.Retrieve(unsafe.Slice((*byte)(unsafe.Pointer(&got[0])), 4*len(got)), out); err != nil {
		t.Fatal(err)
	}
	if err := q.Synchronize(); err != nil {
		t.Fatal(err)
	}
	for i := range teams * threads * 2 {
		x, y := i%(teams*threads), i/(teams*threads)
		w := []int32{int32(x / threads), int32(x % threads), threads, teams*100 + int32(y)}
		if g := got[4*i : 4*i+4]; g[0] != w[0] || g[1] != w[1] || g[2] != w[2] || g[3] != w[3] {
			t.Fatalf("work-item %d: group, local id, local size, groups = %v, want %v", i, g, w)
		}
	}
	err := gl.LaunchGeometry(kGeom, []plugin.Arg{{Ptr: out, Len: 1}}, plugin.Geometry{Teams: [3]int{1, 1, 1}, Threads: [3]int{1 << 20, 1, 1}})
	if !errors.Is(err, plugin.ErrBadKernel) || !strings.Contains(err.Error(), kGeom.Name()) {
		t.Errorf("a work-group of 2^20: %v, want ErrBadKernel naming the kernel", err)
	}
}

// TestKernelFaults: a source that does not build, parameters that do not
// match the entry, a missing entry and a kernel without OpenCL C fail
// their launches with errors that name the kernel and say what is wrong.
func TestKernelFaults(t *testing.T) {
	d := loaded(t)
	q := mustQueue(t, d)
	x := mustAlloc(t, d, 64)
	cases := []struct {
		k    plugin.Kernel
		args []plugin.Arg
		want []string
	}{
		{kBroken, []plugin.Arg{{Ptr: x, Len: 1}}, []string{"opencltest.broken", "does not build", "CL_BUILD_PROGRAM_FAILURE", ":3:", "y"}},
		{kNarrow, []plugin.Arg{{Ptr: x, Len: 1}, {Scalar: 1}}, []string{"opencltest.narrow", "entry narrow parameter 1 is int, 4 bytes; the Go parameter 1 (int) is 8 bytes: declare it long, or take int32 in Go"}},
		{kPtr, []plugin.Arg{{Scalar: float32(1)}, {Scalar: float32(1)}, {Scalar: 1}}, []string{"opencltest.ptr", "parameter 0 is float*, a pointer; the Go parameter 0 (float32) is a value: declare it float, or take []float32 in Go"}},
		{kCount, []plugin.Arg{{Ptr: x, Len: 1}, {Scalar: float32(1)}, {Scalar: 1}, {Scalar: 1}}, []string{"opencltest.count", "entry addf has 3 parameters (float*, float, long); the Go kernel has 4 parameters ([]float32, float32, int, int): the Go parameter 3 (int) has none in the entry"}},
		{kMissing, []plugin.Arg{{Ptr: x, Len: 1}}, []string{"opencltest.missing", `"nosuch"`, "CL_INVALID_KERNEL_NAME", "addf"}},
		{kNoCode, []plugin.Arg{{Ptr: x, Len: 1}}, []string{"opencltest.nocode", "has no OpenCL C"}},
	}
	for _, c := range cases {
		err := q.Launch(c.k, c.args)
		if !errors.Is(err, plugin.ErrBadKernel) {
			t.Errorf("%s: %v, want ErrBadKernel", c.k.Name(), err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v\ndoes not say %q", c.k.Name(), err, w)
			}
		}
	}
	if err := q.Synchronize(); err != nil {
		t.Errorf("the refused launches left the queue failed: %v", err)
	}
}

// TestOutOfMemory: an allocation beyond the device's is refused with
// ErrOutOfMemory naming the device, and the device goes on.
func TestOutOfMemory(t *testing.T) {
	d := loaded(t)
	for _, n := range []int64{d.Info().Memory + 1, 1 << 62} {
		if _, err := d.Alloc(n); !errors.Is(err, plugin.ErrOutOfMemory) || !strings.Contains(err.Error(), "opencl device 0") {
			t.Errorf("Alloc(%d) = %v, want ErrOutOfMemory naming the device", n, err)
		}
	}
	p := mustAlloc(t, d, 16)
	if err := d.Free(p); err != nil {
		t.Error(err)
	}
}

// TestLostQueue: a command queue that breaks (LoseQueueForTests: the
// driver refuses it from then on) fails what was enqueued after, loses
// the device with the driver's error, and fires the events after it with
// the error; nothing hangs.
func TestLostQueue(t *testing.T) {
	k, _ := plugin.LookupKind("opencl")
	ds, err := k.Open("0")
	if err != nil {
		t.Skip(err)
	}
	d := ds[0]
	defer d.Close()
	if err := d.Load(entries.Current(), 0); err != nil {
		t.Fatal(err)
	}
	q, err := d.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	x := mustAlloc(t, d, 64)
	buf := make([]byte, 64)
	// The event is made first: the device may be lost as soon as the
	// submit reaches the broken queue, and a lost device makes none.
	ev, err := d.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	if err := opencl.LoseQueueForTests(q); err != nil {
		t.Fatal(err)
	}
	q.Submit(x, buf)
	if err := q.Record(ev); err != nil && !errors.Is(err, plugin.ErrDeviceLost) {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- q.Synchronize() }()
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Synchronize hangs after the queue was lost")
	}
	if !errors.Is(err, plugin.ErrDeviceLost) || !strings.Contains(err.Error(), "CL_INVALID_COMMAND_QUEUE") {
		t.Errorf("Synchronize = %v, want ErrDeviceLost with the driver's error", err)
	}
	if lost := d.(plugin.LostReporter).Lost(); !errors.Is(lost, plugin.ErrDeviceLost) {
		t.Errorf("Lost() = %v", lost)
	}
	if err := ev.Synchronize(); err == nil {
		t.Error("the event recorded after the loss fired without an error")
	}
	if _, err := d.Alloc(8); !errors.Is(err, plugin.ErrDeviceLost) {
		t.Errorf("Alloc on the lost device = %v, want ErrDeviceLost", err)
	}
	q.Close()
}

// structCL takes structs and a typedef'd float through pointers.
const structCL = `
typedef struct { double a, b, c, d; long e; } P5; // 40 bytes
struct Q { int x; float y; };                      // 8 bytes
typedef float real;

kernel void p5(global const P5 *in, global long *out, long n) {
	size_t i = get_global_id(0);
	if (i < n) out[i] = in[i].e;
}

kernel void q8(global struct Q *q, long n) {
	size_t i = get_global_id(0);
	if (i < n) q[i].x += 1;
}

kernel void reals(global real *x, long n) {
	size_t i = get_global_id(0);
	if (i < n) x[i] *= 2;
}

kernel void p5val(P5 v, global long *out) { out[0] = v.e; }
`

// p5 is structCL's P5; p5wide has a field more (48 bytes).
type (
	p5 struct {
		A, B, C, D float64
		E          int64
	}
	p5wide struct {
		A, B, C, D float64
		E, F       int64
	}
	q8 struct {
		X int32
		Y float32
	}
)

var (
	kP5      = register("opencltest.p5", func(in []p5, out []int64, n int) {}, structCL, "p5")
	kP5Wide  = register("opencltest.p5wide", func(in []p5wide, out []int64, n int) {}, structCL, "p5")
	kQ8      = register("opencltest.q8", func(q []q8, n int) {}, structCL, "q8")
	kReals   = register("opencltest.reals", func(x []float64, n int) {}, structCL, "reals")
	kP5Value = register("opencltest.p5value", func(v p5wide, out []int64) {}, structCL, "p5val")
)

// TestStructSizes: a slice's elements must have the size of the structs
// (or typedefs) the entry's pointer points to, and a value the size of
// the entry's struct, or the launch is refused with an error naming the
// kernel, the parameter and both sizes (issue 47: a []T of a 48-byte Go
// struct passed to a 40-byte P5* ran and gave zeros); a Go struct of the
// same layout runs.
func TestStructSizes(t *testing.T) {
	d := loaded(t)
	q := mustQueue(t, d)
	in := []p5{{E: 0}, {E: 10}, {E: 20}, {E: 30}}
	pin := mustAlloc(t, d, int64(unsafe.Sizeof(p5{}))*4)
	pout := mustAlloc(t, d, 8*4)
	if err := q.Submit(pin, unsafe.Slice((*byte)(unsafe.Pointer(&in[0])), int(unsafe.Sizeof(p5{}))*4)); err != nil {
		t.Fatal(err)
	}
	if err := q.Launch(kP5, []plugin.Arg{{Ptr: pin, Len: 4}, {Ptr: pout, Len: 4}, {Scalar: 4}}); err != nil {
		t.Fatalf("a Go struct of P5's layout: %v", err)
	}
	out := make([]int64, 4)
	if err := q.Retrieve(unsafe.Slice((*byte)(unsafe.Pointer(&out[0])), 32), pout); err != nil {
		t.Fatal(err)
	}
	if err := q.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if out[0] != 0 || out[1] != 10 || out[2] != 20 || out[3] != 30 {
		t.Fatalf("out = %v, want [0 10 20 30]", out)
	}
	wide := mustAlloc(t, d, 48*4)
	x := mustAlloc(t, d, 64)
	for _, c := range []struct {
		k    plugin.Kernel
		args []plugin.Arg
		want []string
	}{
		{kP5Wide, []plugin.Arg{{Ptr: wide, Len: 4}, {Ptr: pout, Len: 4}, {Scalar: 4}},
			[]string{`kernel "opencltest.p5wide": OpenCL C entry p5 parameter 0 is P5*, whose elements are 40 bytes (sizeof(P5)); the Go parameter 0 ([]opencl_test.p5wide) has elements of 48 bytes: make the Go type match P5`}},
		{kReals, []plugin.Arg{{Ptr: x, Len: 8}, {Scalar: 8}},
			[]string{`kernel "opencltest.reals": OpenCL C entry reals parameter 0 is real*, whose elements are 4 bytes (sizeof(real)); the Go parameter 0 ([]float64) has elements of 8 bytes`}},
		{kP5Value, []plugin.Arg{{Scalar: p5wide{}}, {Ptr: pout, Len: 1}},
			[]string{`kernel "opencltest.p5value": OpenCL C entry p5val parameter 0 is P5, 40 bytes; the Go parameter 0 (opencl_test.p5wide) is 48 bytes`}},
	} {
		err := q.Launch(c.k, c.args)
		if !errors.Is(err, plugin.ErrBadKernel) {
			t.Errorf("%s: %v, want ErrBadKernel", c.k.Name(), err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %v\ndoes not say %q", c.k.Name(), err, w)
			}
		}
	}
	if err := q.Launch(kQ8, []plugin.Arg{{Ptr: x, Len: 8}, {Scalar: 8}}); err != nil {
		t.Errorf("a Go struct of struct Q's size: %v", err)
	}
	if err := q.Synchronize(); err != nil {
		t.Fatal(err)
	}
}

// rangeCL writes each work-item's global id, size and offset.
const rangeCL = `
kernel void ids(global long *out, long n) {
	size_t i = get_global_id(0) - get_global_offset(0);
	if (i < n) {
		out[3*i] = get_global_id(0);
		out[3*i+1] = get_global_size(0);
		out[3*i+2] = get_global_offset(0);
	}
}

kernel void sizes(global const long *grid, global long *out, long n) {
	size_t i = get_global_id(0);
	if (i < n) out[i] = get_global_size(0);
}
`

var (
	kIDs   = register("opencltest.ids", func(out []int64, n int) {}, rangeCL, "ids")
	kSizes = register("opencltest.sizes", func(grid offload.In[int64], out []int64, n int) {}, rangeCL, "sizes")
)

// TestGlobalSizeOffset: a launch's global size and offset reach the
// NDRange, a size is rounded up to whole work-groups of thread_limit, and
// by default a launch runs one work-item per element of the longest slice
// the kernel may write, not of a longer one it only reads (issue 47 item
// 9: XSBench got 52 million work-items for 2 million lookups).
func TestGlobalSizeOffset(t *testing.T) {
	d := loaded(t)
	q := mustQueue(t, d)
	gl := q.(plugin.GeometryLauncher)
	const n = 8
	out := mustAlloc(t, d, 8*3*n)
	grid := mustAlloc(t, d, 8*1000)
	got := make([]int64, 3*n)
	read := func() {
		t.Helper()
		if err := q.Retrieve(unsafe.Slice((*byte)(unsafe.Pointer(&got[0])), 8*len(got)), out); err != nil {
			t.Fatal(err)
		}
		if err := q.Synchronize(); err != nil {
			t.Fatal(err)
		}
	}
	args := []plugin.Arg{{Ptr: out, Len: 3 * n}, {Scalar: n}}
	if err := gl.LaunchGeometry(kIDs, args, plugin.Geometry{Size: [3]int{n, 1, 1}, Offset: [3]int{100, 0, 0}}); err != nil {
		t.Fatal(err)
	}
	read()
	for i := range n {
		if w := []int64{100 + int64(i), n, 100}; got[3*i] != w[0] || got[3*i+1] != w[1] || got[3*i+2] != w[2] {
			t.Fatalf("work-item %d: id, size, offset %v, want %v", i, got[3*i:3*i+3], w)
		}
	}
	if err := gl.LaunchGeometry(kIDs, args, plugin.Geometry{Size: [3]int{5, 1, 1}, Threads: [3]int{4, 1, 1}}); err != nil {
		t.Fatal(err)
	}
	read()
	if got[1] != 8 {
		t.Errorf("global_size(5) thread_limit(4): a global size of %d, want 8 (two work-groups)", got[1])
	}
	if err := q.Launch(kSizes, []plugin.Arg{{Ptr: grid, Len: 1000}, {Ptr: out, Len: n}, {Scalar: n}}); err != nil {
		t.Fatal(err)
	}
	read()
	if got[0] != n {
		t.Errorf("by default: a global size of %d, want %d (the slice written, not the 1000 read)", got[0], n)
	}
}
