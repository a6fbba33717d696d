package cldrv

import (
	"errors"
	"strings"
	"testing"
	"unsafe"

	"github.com/goffload/offload/internal/opencltest"
)

// TestLoadMissing: a library that is not there is a *LoadError naming the
// path and dlopen's reason.
func TestLoadMissing(t *testing.T) {
	_, err := Load("libgoffload-no-such-opencl.so.1")
	var le *LoadError
	if !errors.As(err, &le) || le.Path != "libgoffload-no-such-opencl.so.1" {
		t.Fatalf("Load of a missing library = %v, want a *LoadError naming it", err)
	}
}

// TestLoadLacksFunctions: a library that is no OpenCL library (libc) is
// refused, naming what it lacks.
func TestLoadLacksFunctions(t *testing.T) {
	_, err := Load("libc.so.6")
	if err == nil || !strings.Contains(err.Error(), "clGetPlatformIDs") {
		t.Fatalf("Load(libc.so.6) = %v, want an error naming clGetPlatformIDs", err)
	}
}

func TestErrorText(t *testing.T) {
	err := error(&Error{Func: "clCreateBuffer", Code: OutOfResources})
	if got, want := err.Error(), "clCreateBuffer: CL_OUT_OF_RESOURCES (-5)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if Code(err) != OutOfResources || Code(nil) != Success || Code(errors.New("x")) == Success {
		t.Errorf("Code: %v %v %v", Code(err), Code(nil), Code(errors.New("x")))
	}
	if Status(-12345).Name() != "cl_int(-12345)" {
		t.Errorf("unknown name %q", Status(-12345).Name())
	}
}

// firstDevice returns the first OpenCL device of the machine's first
// platform that has one; the test skips where there is none, unless
// GOFFLOAD_REQUIRE_OPENCL is set (scripts/test installs PoCL).
func firstDevice(t *testing.T) (*Lib, Platform, Device) {
	t.Helper()
	skip := func(why string, args ...any) {
		t.Helper()
		opencltest.Skip(t, why, args...)
	}
	l, err := Load(DefaultLibrary)
	if err != nil {
		skip("no OpenCL library: %v", err)
	}
	ps, err := l.Platforms()
	if err != nil {
		t.Fatal(err)
	}
	for _, pl := range ps {
		ds, err := l.Devices(pl, TypeAll)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) > 0 {
			return l, pl, ds[0]
		}
	}
	skip("no OpenCL device (install pocl-opencl-icd)")
	return nil, 0, 0
}

// TestRealDriver builds a kernel on the machine's first OpenCL device and
// runs it over a buffer: the binding's calls on a real driver.
func TestRealDriver(t *testing.T) {
	l, pl, d := firstDevice(t)
	name, err := l.DeviceInfoString(d, DeviceName)
	if err != nil || name == "" {
		t.Fatalf("device name %q, %v", name, err)
	}
	pname, _ := l.PlatformInfoString(pl, PlatformName)
	cus, err := l.DeviceInfoUint(d, DeviceMaxComputeUnits)
	if err != nil || cus == 0 {
		t.Fatalf("compute units %d, %v", cus, err)
	}
	t.Logf("%s: %s, %d compute units", pname, name, cus)
	ctx, err := l.CreateContext(pl, []Device{d})
	if err != nil {
		t.Fatal(err)
	}
	defer l.ReleaseContext(ctx)
	q, err := l.CreateQueue(ctx, d, true, false)
	if err != nil {
		t.Fatal(err)
	}
	defer l.ReleaseQueue(q)
	pr, err := l.CreateProgram(ctx, []byte("kernel void add(global int *x, int k) { x[get_global_id(0)] += k; }\n"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.ReleaseProgram(pr)
	if err := l.BuildProgram(pr, []Device{d}, "-cl-kernel-arg-info"); err != nil {
		t.Fatalf("%v: %s", err, l.BuildLog(pr, d))
	}
	names, err := l.KernelNames(pr)
	if err != nil || len(names) != 1 || names[0] != "add" {
		t.Fatalf("kernel names %q, %v", names, err)
	}
	k, err := l.CreateKernel(pr, "add")
	if err != nil {
		t.Fatal(err)
	}
	defer l.ReleaseKernel(k)
	if n, err := l.KernelNumArgs(k); err != nil || n != 2 {
		t.Fatalf("num args %d, %v", n, err)
	}
	if typ, err := l.KernelArgString(k, 0, KernelArgTypeName); err != nil || typ != "int*" {
		t.Errorf("arg 0 type %q, %v", typ, err)
	}
	if aq, err := l.KernelArgUint(k, 0, KernelArgAddressQual); err != nil || aq != AddressGlobal {
		t.Errorf("arg 0 address qualifier %#x, %v", aq, err)
	}
	m, err := l.CreateBuffer(ctx, 16)
	if err != nil {
		t.Fatal(err)
	}
	defer l.ReleaseMem(m)
	x := []int32{1, 2, 3, 4}
	if err := l.WriteBuffer(q, m, true, 0, 16, unsafe.Pointer(&x[0]), nil, nil); err != nil {
		t.Fatal(err)
	}
	kv := int32(10)
	if err := l.SetKernelArg(k, 0, unsafe.Sizeof(m), unsafe.Pointer(&m)); err != nil {
		t.Fatal(err)
	}
	if err := l.SetKernelArg(k, 1, 4, unsafe.Pointer(&kv)); err != nil {
		t.Fatal(err)
	}
	global := [3]uintptr{4, 1, 1}
	var ev Event
	if err := l.EnqueueKernel(q, k, 1, &global, nil, nil, &ev); err != nil {
		t.Fatal(err)
	}
	defer l.ReleaseEvent(ev)
	if err := l.ReadBuffer(q, m, true, 0, 16, unsafe.Pointer(&x[0]), nil, nil); err != nil {
		t.Fatal(err)
	}
	if x[0] != 11 || x[3] != 14 {
		t.Errorf("x = %v, want [11 12 13 14]", x)
	}
	if st, err := l.EventStatus(ev); err != nil || st != Complete {
		t.Errorf("kernel event status %d, %v", st, err)
	}
	s, err1 := l.ProfilingInfo(ev, ProfilingStart)
	e, err2 := l.ProfilingInfo(ev, ProfilingEnd)
	if err1 != nil || err2 != nil || e < s {
		t.Errorf("profiling times %d..%d, %v %v", s, e, err1, err2)
	}
	bad, _ := l.CreateProgram(ctx, []byte("kernel void f(global int *x) { x[0] = y; }\n"))
	defer l.ReleaseProgram(bad)
	if err := l.BuildProgram(bad, []Device{d}, ""); Code(err) != BuildProgramFailure {
		t.Errorf("a program that does not compile built with %v", err)
	} else if log := l.BuildLog(bad, d); !strings.Contains(log, "y") {
		t.Errorf("build log %q does not name the undeclared y", log)
	}
}
