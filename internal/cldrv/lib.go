package cldrv

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// LoadError is why Load could not give a library: it is missing, or lacks
// a function the kind needs.
type LoadError struct {
	Path string
	Err  error
}

// Error describes the failure.
func (e *LoadError) Error() string { return fmt.Sprintf("%s: %v", e.Path, e.Err) }

// Unwrap returns the error the failure wraps.
func (e *LoadError) Unwrap() error { return e.Err }

var loaded struct {
	sync.Mutex
	byPath map[string]*Lib
}

// Lib is a loaded OpenCL library: the addresses of its functions, called
// with purego.SyscallN (no cgo). Every argument is an integer or a
// pointer; call keeps the Go memory its pointer arguments point to alive
// and in place for the call.
type Lib struct {
	handle uintptr

	clGetPlatformIDs, clGetPlatformInfo, clGetDeviceIDs, clGetDeviceInfo   uintptr
	clCreateContext, clReleaseContext                                      uintptr
	clCreateCommandQueue, clCreateCommandQueueWithProperties               uintptr
	clReleaseCommandQueue, clFlush, clFinish                               uintptr
	clCreateBuffer, clCreateSubBuffer, clReleaseMemObject                  uintptr
	clEnqueueWriteBuffer, clEnqueueReadBuffer, clEnqueueCopyBuffer         uintptr
	clSVMAlloc, clSVMFree, clEnqueueSVMMemcpy, clSetKernelArgSVMPointer    uintptr
	clCreateProgramWithSource, clBuildProgram, clGetProgramBuildInfo       uintptr
	clGetProgramInfo, clReleaseProgram                                     uintptr
	clCreateKernel, clReleaseKernel, clSetKernelArg, clGetKernelArgInfo    uintptr
	clGetKernelWorkGroupInfo, clEnqueueNDRangeKernel, clGetKernelInfo      uintptr
	clEnqueueMarkerWithWaitList, clEnqueueBarrierWithWaitList              uintptr
	clWaitForEvents, clGetEventInfo, clGetEventProfilingInfo               uintptr
	clReleaseEvent, clRetainEvent, clCreateUserEvent, clSetUserEventStatus uintptr
	clGetDeviceAndHostTimer                                                uintptr
}

type symbol struct {
	addr     *uintptr
	name     string
	optional bool // OpenCL 2.0 and later: used only on devices that have it
}

func (l *Lib) symbols() []symbol {
	s := func(addr *uintptr, name string) symbol { return symbol{addr: addr, name: name} }
	o := func(addr *uintptr, name string) symbol { return symbol{addr: addr, name: name, optional: true} }
	return []symbol{
		s(&l.clGetPlatformIDs, "clGetPlatformIDs"), s(&l.clGetPlatformInfo, "clGetPlatformInfo"),
		s(&l.clGetDeviceIDs, "clGetDeviceIDs"), s(&l.clGetDeviceInfo, "clGetDeviceInfo"),
		s(&l.clCreateContext, "clCreateContext"), s(&l.clReleaseContext, "clReleaseContext"),
		s(&l.clCreateCommandQueue, "clCreateCommandQueue"),
		o(&l.clCreateCommandQueueWithProperties, "clCreateCommandQueueWithProperties"),
		s(&l.clReleaseCommandQueue, "clReleaseCommandQueue"), s(&l.clFlush, "clFlush"), s(&l.clFinish, "clFinish"),
		s(&l.clCreateBuffer, "clCreateBuffer"), s(&l.clCreateSubBuffer, "clCreateSubBuffer"),
		s(&l.clReleaseMemObject, "clReleaseMemObject"),
		s(&l.clEnqueueWriteBuffer, "clEnqueueWriteBuffer"), s(&l.clEnqueueReadBuffer, "clEnqueueReadBuffer"),
		s(&l.clEnqueueCopyBuffer, "clEnqueueCopyBuffer"),
		o(&l.clSVMAlloc, "clSVMAlloc"), o(&l.clSVMFree, "clSVMFree"), o(&l.clEnqueueSVMMemcpy, "clEnqueueSVMMemcpy"),
		o(&l.clSetKernelArgSVMPointer, "clSetKernelArgSVMPointer"),
		s(&l.clCreateProgramWithSource, "clCreateProgramWithSource"), s(&l.clBuildProgram, "clBuildProgram"),
		s(&l.clGetProgramBuildInfo, "clGetProgramBuildInfo"), s(&l.clGetProgramInfo, "clGetProgramInfo"),
		s(&l.clReleaseProgram, "clReleaseProgram"),
		s(&l.clCreateKernel, "clCreateKernel"), s(&l.clReleaseKernel, "clReleaseKernel"),
		s(&l.clSetKernelArg, "clSetKernelArg"), s(&l.clGetKernelArgInfo, "clGetKernelArgInfo"),
		s(&l.clGetKernelWorkGroupInfo, "clGetKernelWorkGroupInfo"), s(&l.clGetKernelInfo, "clGetKernelInfo"), s(&l.clEnqueueNDRangeKernel, "clEnqueueNDRangeKernel"),
		s(&l.clEnqueueMarkerWithWaitList, "clEnqueueMarkerWithWaitList"),
		s(&l.clEnqueueBarrierWithWaitList, "clEnqueueBarrierWithWaitList"),
		s(&l.clWaitForEvents, "clWaitForEvents"), s(&l.clGetEventInfo, "clGetEventInfo"),
		s(&l.clGetEventProfilingInfo, "clGetEventProfilingInfo"), s(&l.clReleaseEvent, "clReleaseEvent"),
		s(&l.clRetainEvent, "clRetainEvent"),
		s(&l.clCreateUserEvent, "clCreateUserEvent"), s(&l.clSetUserEventStatus, "clSetUserEventStatus"),
		o(&l.clGetDeviceAndHostTimer, "clGetDeviceAndHostTimer"),
	}
}

// Load opens the OpenCL library at path (a soname such as DefaultLibrary,
// or a file) and binds its functions. The library stays open for the life
// of the process; loading the same path again returns the same *Lib.
func Load(path string) (*Lib, error) {
	loaded.Lock()
	defer loaded.Unlock()
	if l, ok := loaded.byPath[path]; ok {
		return l, nil
	}
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, &LoadError{Path: path, Err: err}
	}
	l := &Lib{handle: h}
	var missing []string
	for _, s := range l.symbols() {
		if p, err := purego.Dlsym(h, s.name); err == nil && p != 0 {
			*s.addr = p
		} else if !s.optional {
			missing = append(missing, s.name)
		}
	}
	if len(missing) > 0 {
		purego.Dlclose(h)
		return nil, &LoadError{Path: path, Err: fmt.Errorf("the library lacks %s (not an OpenCL 1.2 library?)", strings.Join(missing, ", "))}
	}
	if loaded.byPath == nil {
		loaded.byPath = map[string]*Lib{}
	}
	loaded.byPath[path] = l
	return l, nil
}

// call calls the C function at fn. Like purego.SyscallN, it keeps the Go
// memory that pointer arguments converted to uintptr in its call point to
// alive and in place until it returns.
//
//go:uintptrescapes
func call(fn uintptr, args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(fn, args...)
	return r
}

// The address arguments of a call are converted to uintptr in the call's
// argument list (uintptr(uintptr(p(&n)))), where //go:uintptrescapes makes the
// memory they point to escape to the heap and stay alive for the call: a
// goroutine's stack can move during the call, and an address converted
// earlier would then point to where a result used to be.

// p is the address of Go memory for a call.
func p[T any](v *T) unsafe.Pointer { return unsafe.Pointer(v) }

// sliceAddr is the address of s's first element, nil for an empty slice.
func sliceAddr[T any](s []T) unsafe.Pointer {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Pointer(&s[0])
}

// cstr returns s as a NUL-terminated string.
func cstr(s string) []byte { return append([]byte(s), 0) }

// trimNUL cuts b at its first NUL.
func trimNUL(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// infoBytes runs an OpenCL get-info function twice: for the size, then the
// value.
func infoBytes(name string, get func(size uintptr, val unsafe.Pointer, sizeRet *uintptr) uintptr) ([]byte, error) {
	var n uintptr
	if err := check(name, get(0, nil, &n)); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	b := make([]byte, n)
	if err := check(name, get(n, unsafe.Pointer(&b[0]), nil)); err != nil {
		return nil, err
	}
	return b, nil
}

// sizeRetAddr is the address of a size_t result, or 0.
func sizeRetAddr(r *uintptr) unsafe.Pointer {
	if r == nil {
		return nil
	}
	return unsafe.Pointer(r)
}

// Platforms returns the platforms the ICD loader found. None is not an
// error: an empty list (the loader's CL_PLATFORM_NOT_FOUND_KHR).
func (l *Lib) Platforms() ([]Platform, error) {
	var n uint32
	if r := call(l.clGetPlatformIDs, 0, 0, uintptr(p(&n))); Status(int32(uint32(r))) == PlatformNotFoundKHR {
		return nil, nil
	} else if err := check("clGetPlatformIDs", r); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	ps := make([]Platform, n)
	if err := check("clGetPlatformIDs", call(l.clGetPlatformIDs, uintptr(n), uintptr(sliceAddr(ps)), 0)); err != nil {
		return nil, err
	}
	return ps, nil
}

// PlatformInfoString returns a string parameter of a platform.
func (l *Lib) PlatformInfoString(pl Platform, param uint32) (string, error) {
	b, err := infoBytes("clGetPlatformInfo", func(size uintptr, val unsafe.Pointer, ret *uintptr) uintptr {
		return call(l.clGetPlatformInfo, uintptr(pl), uintptr(param), size, uintptr(val), uintptr(sizeRetAddr(ret)))
	})
	return trimNUL(b), err
}

// Devices returns a platform's devices of the types in typ (TypeAll).
// None is not an error.
func (l *Lib) Devices(pl Platform, typ uint64) ([]Device, error) {
	var n uint32
	r := call(l.clGetDeviceIDs, uintptr(pl), uintptr(typ), 0, 0, uintptr(p(&n)))
	if Status(int32(uint32(r))) == DeviceNotFound {
		return nil, nil
	}
	if err := check("clGetDeviceIDs", r); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	ds := make([]Device, n)
	if err := check("clGetDeviceIDs", call(l.clGetDeviceIDs, uintptr(pl), uintptr(typ), uintptr(n), uintptr(sliceAddr(ds)), 0)); err != nil {
		return nil, err
	}
	return ds, nil
}

// DeviceInfo returns a device parameter's bytes.
func (l *Lib) DeviceInfo(d Device, param uint32) ([]byte, error) {
	return infoBytes("clGetDeviceInfo", func(size uintptr, val unsafe.Pointer, ret *uintptr) uintptr {
		return call(l.clGetDeviceInfo, uintptr(d), uintptr(param), size, uintptr(val), uintptr(sizeRetAddr(ret)))
	})
}

// DeviceInfoString returns a string parameter of a device.
func (l *Lib) DeviceInfoString(d Device, param uint32) (string, error) {
	b, err := l.DeviceInfo(d, param)
	return trimNUL(b), err
}

// DeviceInfoUint returns an integer parameter of a device (cl_uint,
// cl_ulong, size_t or cl_bool, by its size).
func (l *Lib) DeviceInfoUint(d Device, param uint32) (uint64, error) {
	b, err := l.DeviceInfo(d, param)
	if err != nil {
		return 0, err
	}
	var v uint64
	for i := len(b) - 1; i >= 0 && i < 8; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v, nil
}

// DeviceInfoSizes returns a size_t[] parameter of a device.
func (l *Lib) DeviceInfoSizes(d Device, param uint32) ([]uint64, error) {
	b, err := l.DeviceInfo(d, param)
	if err != nil {
		return nil, err
	}
	out := make([]uint64, len(b)/8)
	for i := range out {
		out[i] = *(*uint64)(unsafe.Pointer(&b[8*i]))
	}
	return out, nil
}

// CreateContext makes a context of devs, which are all of platform pl.
func (l *Lib) CreateContext(pl Platform, devs []Device) (Context, error) {
	props := []uintptr{ContextPlatform, uintptr(pl), 0}
	var st int32
	c := call(l.clCreateContext, uintptr(sliceAddr(props)), uintptr(len(devs)), uintptr(sliceAddr(devs)), 0, 0, uintptr(p(&st)))
	return Context(c), check("clCreateContext", uintptr(uint32(st)))
}

// ReleaseContext releases a context.
func (l *Lib) ReleaseContext(c Context) error {
	return check("clReleaseContext", call(l.clReleaseContext, uintptr(c)))
}

// CreateQueue makes an in-order command queue for d, with profiling if
// profile is set: clCreateCommandQueueWithProperties where the library
// has it and useProps is set (an OpenCL 2.0 device), else
// clCreateCommandQueue.
func (l *Lib) CreateQueue(c Context, d Device, profile, useProps bool) (Queue, error) {
	var flags uint64
	if profile {
		flags = QueueProfilingEnable
	}
	var st int32
	if useProps && l.clCreateCommandQueueWithProperties != 0 {
		props := []uint64{QueueProperties, flags, 0}
		q := call(l.clCreateCommandQueueWithProperties, uintptr(c), uintptr(d), uintptr(sliceAddr(props)), uintptr(p(&st)))
		return Queue(q), check("clCreateCommandQueueWithProperties", uintptr(uint32(st)))
	}
	q := call(l.clCreateCommandQueue, uintptr(c), uintptr(d), uintptr(flags), uintptr(p(&st)))
	return Queue(q), check("clCreateCommandQueue", uintptr(uint32(st)))
}

// ReleaseQueue releases a command queue.
func (l *Lib) ReleaseQueue(q Queue) error {
	return check("clReleaseCommandQueue", call(l.clReleaseCommandQueue, uintptr(q)))
}

// Flush submits what was enqueued on q to its device.
func (l *Lib) Flush(q Queue) error { return check("clFlush", call(l.clFlush, uintptr(q))) }

// Finish waits until everything enqueued on q is done.
func (l *Lib) Finish(q Queue) error { return check("clFinish", call(l.clFinish, uintptr(q))) }

// CreateBuffer allocates a read-write buffer of size bytes.
func (l *Lib) CreateBuffer(c Context, size int64) (Mem, error) {
	var st int32
	m := call(l.clCreateBuffer, uintptr(c), uintptr(MemReadWrite), uintptr(size), 0, uintptr(p(&st)))
	return Mem(m), check("clCreateBuffer", uintptr(uint32(st)))
}

// CreateSubBuffer makes a buffer of size bytes at origin in m.
func (l *Lib) CreateSubBuffer(m Mem, origin, size int64) (Mem, error) {
	region := [2]uintptr{uintptr(origin), uintptr(size)}
	var st int32
	s := call(l.clCreateSubBuffer, uintptr(m), uintptr(MemReadWrite), uintptr(BufferCreateTypeRegion), uintptr(p(&region)), uintptr(p(&st)))
	return Mem(s), check("clCreateSubBuffer", uintptr(uint32(st)))
}

// ReleaseMem releases a buffer.
func (l *Lib) ReleaseMem(m Mem) error {
	return check("clReleaseMemObject", call(l.clReleaseMemObject, uintptr(m)))
}

// HasSVM reports whether the library has the SVM functions (OpenCL 2.0).
func (l *Lib) HasSVM() bool {
	return l.clSVMAlloc != 0 && l.clSVMFree != 0 && l.clEnqueueSVMMemcpy != 0 && l.clSetKernelArgSVMPointer != 0
}

// SVMAlloc allocates size bytes of coarse-grained shared virtual memory;
// 0 if the driver could not.
func (l *Lib) SVMAlloc(c Context, size int64, align uint32) uintptr {
	return call(l.clSVMAlloc, uintptr(c), uintptr(MemReadWrite), uintptr(size), uintptr(align))
}

// SVMFree frees SVM memory (the driver's deferred free: commands enqueued
// before still see it).
func (l *Lib) SVMFree(c Context, ptr uintptr) { call(l.clSVMFree, uintptr(c), ptr) }

// waitList returns the count and address of a wait list.
func waitList(wait []Event) (uintptr, unsafe.Pointer) { return uintptr(len(wait)), sliceAddr(wait) }

// evAddr is the address of an event result, or 0.
func evAddr(ev *Event) unsafe.Pointer {
	if ev == nil {
		return nil
	}
	return unsafe.Pointer(ev)
}

// SVMWrite enqueues a copy of size bytes from Go memory at src to the
// SVM address dst. The caller keeps src pinned until the copy is done
// when blocking is false.
func (l *Lib) SVMWrite(q Queue, blocking bool, dst uintptr, src unsafe.Pointer, size int64, wait []Event, ev *Event) error {
	n, w := waitList(wait)
	return check("clEnqueueSVMMemcpy", call(l.clEnqueueSVMMemcpy, uintptr(q), boolArg(blocking), dst, uintptr(src), uintptr(size), n, uintptr(w), uintptr(evAddr(ev))))
}

// SVMRead enqueues a copy of size bytes from the SVM address src to Go
// memory at dst, as SVMWrite does.
func (l *Lib) SVMRead(q Queue, blocking bool, dst unsafe.Pointer, src uintptr, size int64, wait []Event, ev *Event) error {
	n, w := waitList(wait)
	return check("clEnqueueSVMMemcpy", call(l.clEnqueueSVMMemcpy, uintptr(q), boolArg(blocking), uintptr(dst), src, uintptr(size), n, uintptr(w), uintptr(evAddr(ev))))
}

// SVMCopy enqueues a copy of size bytes between SVM addresses (or from a
// buffer's host memory: addresses the driver owns).
func (l *Lib) SVMCopy(q Queue, dst, src uintptr, size int64, wait []Event, ev *Event) error {
	n, w := waitList(wait)
	return check("clEnqueueSVMMemcpy", call(l.clEnqueueSVMMemcpy, uintptr(q), BlockingFalse, dst, src, uintptr(size), n, uintptr(w), uintptr(evAddr(ev))))
}

// WriteBufferSVM enqueues a copy of size bytes from the SVM address src to
// m at offset.
func (l *Lib) WriteBufferSVM(q Queue, m Mem, offset, size int64, src uintptr, wait []Event, ev *Event) error {
	n, w := waitList(wait)
	return check("clEnqueueWriteBuffer", call(l.clEnqueueWriteBuffer, uintptr(q), uintptr(m), BlockingFalse, uintptr(offset), uintptr(size), src, n, uintptr(w), uintptr(evAddr(ev))))
}

// ReadBufferSVM enqueues a copy of size bytes from m at offset to the SVM
// address dst.
func (l *Lib) ReadBufferSVM(q Queue, m Mem, offset, size int64, dst uintptr, wait []Event, ev *Event) error {
	n, w := waitList(wait)
	return check("clEnqueueReadBuffer", call(l.clEnqueueReadBuffer, uintptr(q), uintptr(m), BlockingFalse, uintptr(offset), uintptr(size), dst, n, uintptr(w), uintptr(evAddr(ev))))
}

func boolArg(b bool) uintptr {
	if b {
		return BlockingTrue
	}
	return BlockingFalse
}

// WriteBuffer enqueues a copy of size bytes from host memory at src to m
// at offset.
func (l *Lib) WriteBuffer(q Queue, m Mem, blocking bool, offset, size int64, src unsafe.Pointer, wait []Event, ev *Event) error {
	n, w := waitList(wait)
	return check("clEnqueueWriteBuffer", call(l.clEnqueueWriteBuffer, uintptr(q), uintptr(m), boolArg(blocking), uintptr(offset), uintptr(size), uintptr(src), n, uintptr(w), uintptr(evAddr(ev))))
}

// ReadBuffer enqueues a copy of size bytes from m at offset to host
// memory at dst.
func (l *Lib) ReadBuffer(q Queue, m Mem, blocking bool, offset, size int64, dst unsafe.Pointer, wait []Event, ev *Event) error {
	n, w := waitList(wait)
	return check("clEnqueueReadBuffer", call(l.clEnqueueReadBuffer, uintptr(q), uintptr(m), boolArg(blocking), uintptr(offset), uintptr(size), uintptr(dst), n, uintptr(w), uintptr(evAddr(ev))))
}

// CopyBuffer enqueues a copy of size bytes between buffers.
func (l *Lib) CopyBuffer(q Queue, src, dst Mem, srcOff, dstOff, size int64, wait []Event, ev *Event) error {
	n, w := waitList(wait)
	return check("clEnqueueCopyBuffer", call(l.clEnqueueCopyBuffer, uintptr(q), uintptr(src), uintptr(dst), uintptr(srcOff), uintptr(dstOff), uintptr(size), n, uintptr(w), uintptr(evAddr(ev))))
}

// CreateProgram makes a program of OpenCL C source.
func (l *Lib) CreateProgram(c Context, src []byte) (Program, error) {
	strs := []unsafe.Pointer{sliceAddr(src)} // on the heap, as src is
	n := uintptr(len(src))
	var st int32
	pr := call(l.clCreateProgramWithSource, uintptr(c), 1, uintptr(sliceAddr(strs)), uintptr(p(&n)), uintptr(p(&st)))
	runtime.KeepAlive(src)
	return Program(pr), check("clCreateProgramWithSource", uintptr(uint32(st)))
}

// BuildProgram builds pr for devs with options, blocking until it is
// built.
func (l *Lib) BuildProgram(pr Program, devs []Device, options string) error {
	opt := cstr(options)
	return check("clBuildProgram", call(l.clBuildProgram, uintptr(pr), uintptr(len(devs)), uintptr(sliceAddr(devs)), uintptr(sliceAddr(opt)), 0, 0))
}

// BuildLog returns pr's build log for d.
func (l *Lib) BuildLog(pr Program, d Device) string {
	b, _ := infoBytes("clGetProgramBuildInfo", func(size uintptr, val unsafe.Pointer, ret *uintptr) uintptr {
		return call(l.clGetProgramBuildInfo, uintptr(pr), uintptr(d), uintptr(ProgramBuildLog), size, uintptr(val), uintptr(sizeRetAddr(ret)))
	})
	return trimNUL(b)
}

// KernelNames returns the names of a built program's kernels.
func (l *Lib) KernelNames(pr Program) ([]string, error) {
	b, err := infoBytes("clGetProgramInfo", func(size uintptr, val unsafe.Pointer, ret *uintptr) uintptr {
		return call(l.clGetProgramInfo, uintptr(pr), uintptr(ProgramKernelNames), size, uintptr(val), uintptr(sizeRetAddr(ret)))
	})
	if err != nil {
		return nil, err
	}
	s := trimNUL(b)
	if s == "" {
		return nil, nil
	}
	return strings.Split(s, ";"), nil
}

// ReleaseProgram releases a program.
func (l *Lib) ReleaseProgram(pr Program) error {
	return check("clReleaseProgram", call(l.clReleaseProgram, uintptr(pr)))
}

// CreateKernel makes a kernel object of pr's entry name.
func (l *Lib) CreateKernel(pr Program, name string) (Kernel, error) {
	n := cstr(name)
	var st int32
	k := call(l.clCreateKernel, uintptr(pr), uintptr(sliceAddr(n)), uintptr(p(&st)))
	return Kernel(k), check("clCreateKernel", uintptr(uint32(st)))
}

// ReleaseKernel releases a kernel object.
func (l *Lib) ReleaseKernel(k Kernel) error {
	return check("clReleaseKernel", call(l.clReleaseKernel, uintptr(k)))
}

// SetKernelArg sets argument i of k to size bytes at val (0: a __local
// argument of size bytes).
func (l *Lib) SetKernelArg(k Kernel, i int, size uintptr, val unsafe.Pointer) error {
	return check("clSetKernelArg", call(l.clSetKernelArg, uintptr(k), uintptr(i), size, uintptr(val)))
}

// SetKernelArgSVM sets argument i of k to the SVM address ptr.
func (l *Lib) SetKernelArgSVM(k Kernel, i int, ptr uintptr) error {
	return check("clSetKernelArgSVMPointer", call(l.clSetKernelArgSVMPointer, uintptr(k), uintptr(i), ptr))
}

// KernelArgUint returns an integer parameter of argument i of k.
func (l *Lib) KernelArgUint(k Kernel, i int, param uint32) (uint32, error) {
	var v uint32
	err := check("clGetKernelArgInfo", call(l.clGetKernelArgInfo, uintptr(k), uintptr(i), uintptr(param), 4, uintptr(p(&v)), 0))
	return v, err
}

// KernelArgString returns a string parameter of argument i of k.
func (l *Lib) KernelArgString(k Kernel, i int, param uint32) (string, error) {
	b, err := infoBytes("clGetKernelArgInfo", func(size uintptr, val unsafe.Pointer, ret *uintptr) uintptr {
		return call(l.clGetKernelArgInfo, uintptr(k), uintptr(i), uintptr(param), size, uintptr(val), uintptr(sizeRetAddr(ret)))
	})
	return trimNUL(b), err
}

// KernelNumArgs returns how many arguments k takes.
func (l *Lib) KernelNumArgs(k Kernel) (int, error) {
	var v uint32
	err := check("clGetKernelInfo", call(l.clGetKernelInfo, uintptr(k), uintptr(KernelNumArgs), 4, uintptr(p(&v)), 0))
	return int(v), err
}

// KernelWorkGroupSize returns the largest work-group k runs with on d.
func (l *Lib) KernelWorkGroupSize(k Kernel, d Device) (int, error) {
	var v uintptr
	err := check("clGetKernelWorkGroupInfo", call(l.clGetKernelWorkGroupInfo, uintptr(k), uintptr(d), uintptr(KernelWorkGroupSize), unsafe.Sizeof(v), uintptr(p(&v)), 0))
	return int(v), err
}

// EnqueueKernel enqueues k over dims dimensions of global work-items, in
// work-groups of local (nil: the driver's choice).
func (l *Lib) EnqueueKernel(q Queue, k Kernel, dims int, global, local *[3]uintptr, wait []Event, ev *Event) error {
	return l.EnqueueKernelAt(q, k, dims, nil, global, local, wait, ev)
}

// EnqueueKernelAt is EnqueueKernel with the work-items numbered from
// offset (clEnqueueNDRangeKernel's global_work_offset; nil: from 0).
func (l *Lib) EnqueueKernelAt(q Queue, k Kernel, dims int, offset, global, local *[3]uintptr, wait []Event, ev *Event) error {
	n, w := waitList(wait)
	var la, oa unsafe.Pointer
	if local != nil {
		la = unsafe.Pointer(local)
	}
	if offset != nil {
		oa = unsafe.Pointer(offset)
	}
	return check("clEnqueueNDRangeKernel", call(l.clEnqueueNDRangeKernel, uintptr(q), uintptr(k), uintptr(dims), uintptr(oa), uintptr(unsafe.Pointer(global)), uintptr(la), n, uintptr(w), uintptr(evAddr(ev))))
}

// Marker enqueues a marker, which completes when everything enqueued on q
// before it (and wait) has, and returns its event.
func (l *Lib) Marker(q Queue, wait []Event) (Event, error) {
	n, w := waitList(wait)
	var ev Event
	err := check("clEnqueueMarkerWithWaitList", call(l.clEnqueueMarkerWithWaitList, uintptr(q), n, uintptr(w), uintptr(p(&ev))))
	return ev, err
}

// Barrier enqueues a barrier: what is enqueued on q after it waits for
// wait (and for everything before it). ev, if not nil, gets its event.
func (l *Lib) Barrier(q Queue, wait []Event, ev *Event) error {
	n, w := waitList(wait)
	return check("clEnqueueBarrierWithWaitList", call(l.clEnqueueBarrierWithWaitList, uintptr(q), n, uintptr(w), uintptr(evAddr(ev))))
}

// WaitForEvents blocks until evs are complete.
func (l *Lib) WaitForEvents(evs []Event) error {
	n, w := waitList(evs)
	return check("clWaitForEvents", call(l.clWaitForEvents, n, uintptr(w)))
}

// EventStatus returns an event's execution status: CL_COMPLETE (0),
// CL_RUNNING, CL_SUBMITTED, CL_QUEUED (positive), or a negative error.
func (l *Lib) EventStatus(ev Event) (int32, error) {
	var v int32
	err := check("clGetEventInfo", call(l.clGetEventInfo, uintptr(ev), uintptr(EventExecutionStatus), 4, uintptr(p(&v)), 0))
	return v, err
}

// ProfilingInfo returns one of an event's times, in nanoseconds of the
// device's clock.
func (l *Lib) ProfilingInfo(ev Event, param uint32) (uint64, error) {
	var v uint64
	err := check("clGetEventProfilingInfo", call(l.clGetEventProfilingInfo, uintptr(ev), uintptr(param), 8, uintptr(p(&v)), 0))
	return v, err
}

// ReleaseEvent releases an event.
func (l *Lib) ReleaseEvent(ev Event) error {
	return check("clReleaseEvent", call(l.clReleaseEvent, uintptr(ev)))
}

// RetainEvent takes a reference to an event.
func (l *Lib) RetainEvent(ev Event) error {
	return check("clRetainEvent", call(l.clRetainEvent, uintptr(ev)))
}

// CreateUserEvent makes an event that the host completes.
func (l *Lib) CreateUserEvent(c Context) (Event, error) {
	var st int32
	ev := call(l.clCreateUserEvent, uintptr(c), uintptr(p(&st)))
	return Event(ev), check("clCreateUserEvent", uintptr(uint32(st)))
}

// SetUserEventStatus completes a user event (CL_COMPLETE) or fails it (a
// negative status).
func (l *Lib) SetUserEventStatus(ev Event, status int32) error {
	return check("clSetUserEventStatus", call(l.clSetUserEventStatus, uintptr(ev), uintptr(uint32(status))))
}

// DeviceAndHostTimer returns the device's clock and the host's at one
// moment (OpenCL 2.1); ok false where the library or device has none.
func (l *Lib) DeviceAndHostTimer(d Device) (dev, host uint64, ok bool) {
	if l.clGetDeviceAndHostTimer == 0 {
		return 0, 0, false
	}
	err := check("clGetDeviceAndHostTimer", call(l.clGetDeviceAndHostTimer, uintptr(d), uintptr(p(&dev)), uintptr(p(&host))))
	return dev, host, err == nil
}
