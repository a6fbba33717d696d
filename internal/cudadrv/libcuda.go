package cudadrv

import (
	"fmt"
	"strings"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// DefaultLibrary is the driver library Load opens: the driver's own
// soname, installed with the NVIDIA driver (not with the CUDA toolkit).
const DefaultLibrary = "libcuda.so.1"

// LoadError is why Load could not give a driver: the library is missing,
// or lacks a function goffload needs.
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
	byPath map[string]*lib
}

// Load opens the driver library at path (a soname such as DefaultLibrary,
// or a file) and binds the functions of Driver. The library stays open for
// the life of the process, and loading the same path again returns the
// same driver. It does not call cuInit.
func Load(path string) (Driver, error) {
	loaded.Lock()
	defer loaded.Unlock()
	if l, ok := loaded.byPath[path]; ok {
		return l, nil
	}
	h, err := purego.Dlopen(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		return nil, &LoadError{Path: path, Err: err}
	}
	l := &lib{handle: h}
	var missing []string
	for _, s := range l.symbols() {
		for _, name := range s.names {
			if p, err := purego.Dlsym(h, name); err == nil && p != 0 {
				*s.addr = p
				break
			}
		}
		if *s.addr == 0 && !s.optional {
			missing = append(missing, s.names[0])
		}
	}
	if len(missing) > 0 {
		purego.Dlclose(h)
		return nil, &LoadError{Path: path, Err: fmt.Errorf("the library lacks %s (a CUDA driver older than 11.0?)", strings.Join(missing, ", "))}
	}
	if loaded.byPath == nil {
		loaded.byPath = map[string]*lib{}
	}
	loaded.byPath[path] = l
	return l, nil
}

// lib is the driver library: the addresses of its functions, called with
// purego.SyscallN (no cgo). Every argument is an integer or a pointer;
// SyscallN keeps the Go memory its pointer arguments point to alive and in
// place for the call.
type lib struct {
	handle uintptr

	cuGetErrorName, cuGetErrorString                                               uintptr
	cuInit, cuDriverGetVersion                                                     uintptr
	cuDeviceGetCount, cuDeviceGet, cuDeviceGetName, cuDeviceGetAttribute           uintptr
	cuDeviceTotalMem, cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRelease          uintptr
	cuCtxSetCurrent, cuCtxSynchronize                                              uintptr
	cuDeviceCanAccessPeer, cuCtxEnablePeerAccess                                   uintptr
	cuModuleLoadData, cuModuleUnload, cuModuleGetFunction, cuLaunchKernel          uintptr
	cuMemAlloc, cuMemFree, cuMemHostAlloc, cuMemFreeHost                           uintptr
	cuMemcpyHtoD, cuMemcpyHtoDAsync, cuMemcpyDtoHAsync, cuMemcpyDtoDAsync          uintptr
	cuMemcpyPeerAsync                                                              uintptr
	cuStreamCreate, cuStreamSynchronize, cuStreamQuery, cuStreamWaitEvent          uintptr
	cuStreamDestroy                                                                uintptr
	cuEventCreate, cuEventRecord, cuEventSynchronize, cuEventQuery, cuEventDestroy uintptr
	cuEventElapsedTime                                                             uintptr
}

type symbol struct {
	addr     *uintptr
	names    []string // the first one found is bound: newest ABI first
	optional bool
}

func (l *lib) symbols() []symbol {
	s := func(addr *uintptr, names ...string) symbol { return symbol{addr: addr, names: names} }
	return []symbol{
		s(&l.cuGetErrorName, "cuGetErrorName"),
		s(&l.cuGetErrorString, "cuGetErrorString"),
		s(&l.cuInit, "cuInit"),
		s(&l.cuDriverGetVersion, "cuDriverGetVersion"),
		s(&l.cuDeviceGetCount, "cuDeviceGetCount"),
		s(&l.cuDeviceGet, "cuDeviceGet"),
		s(&l.cuDeviceGetName, "cuDeviceGetName"),
		s(&l.cuDeviceGetAttribute, "cuDeviceGetAttribute"),
		s(&l.cuDeviceTotalMem, "cuDeviceTotalMem_v2"),
		s(&l.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
		s(&l.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease"),
		s(&l.cuCtxSetCurrent, "cuCtxSetCurrent"),
		s(&l.cuCtxSynchronize, "cuCtxSynchronize"),
		s(&l.cuDeviceCanAccessPeer, "cuDeviceCanAccessPeer"),
		s(&l.cuCtxEnablePeerAccess, "cuCtxEnablePeerAccess"),
		s(&l.cuModuleLoadData, "cuModuleLoadData"),
		s(&l.cuModuleUnload, "cuModuleUnload"),
		s(&l.cuModuleGetFunction, "cuModuleGetFunction"),
		s(&l.cuLaunchKernel, "cuLaunchKernel"),
		s(&l.cuMemAlloc, "cuMemAlloc_v2"),
		s(&l.cuMemFree, "cuMemFree_v2"),
		s(&l.cuMemHostAlloc, "cuMemHostAlloc"),
		s(&l.cuMemFreeHost, "cuMemFreeHost"),
		s(&l.cuMemcpyHtoD, "cuMemcpyHtoD_v2"),
		s(&l.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2"),
		s(&l.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"),
		s(&l.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2"),
		s(&l.cuMemcpyPeerAsync, "cuMemcpyPeerAsync"),
		s(&l.cuStreamCreate, "cuStreamCreate"),
		s(&l.cuStreamSynchronize, "cuStreamSynchronize"),
		s(&l.cuStreamQuery, "cuStreamQuery"),
		s(&l.cuStreamWaitEvent, "cuStreamWaitEvent"),
		s(&l.cuStreamDestroy, "cuStreamDestroy_v2"),
		s(&l.cuEventCreate, "cuEventCreate"),
		s(&l.cuEventRecord, "cuEventRecord"),
		s(&l.cuEventSynchronize, "cuEventSynchronize"),
		s(&l.cuEventQuery, "cuEventQuery"),
		s(&l.cuEventElapsedTime, "cuEventElapsedTime"),
		s(&l.cuEventDestroy, "cuEventDestroy_v2"),
	}
}

// check turns fn's CUresult r into an error, nil for CUDA_SUCCESS.
func (l *lib) check(fn string, r uintptr) error {
	res := Result(uint32(r))
	if res == Success {
		return nil
	}
	e := &Error{Func: fn, Code: res, Name: res.Name()}
	var p unsafe.Pointer // a static string of the driver
	if Result(uint32(call(l.cuGetErrorName, uintptr(res), uintptr(unsafe.Pointer(&p))))) == Success && p != nil {
		e.Name = goString(p)
	}
	p = nil
	if Result(uint32(call(l.cuGetErrorString, uintptr(res), uintptr(unsafe.Pointer(&p))))) == Success && p != nil {
		e.Desc = goString(p)
	}
	return e
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

// goString copies the NUL-terminated C string at p (static strings of the
// driver).
func goString(p unsafe.Pointer) string {
	var b []byte
	for i := 0; i < 4096; i++ {
		c := *(*byte)(unsafe.Add(p, i))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}

func cString(s string) []byte { return append([]byte(s), 0) }

func (l *lib) Init() error { return l.check("cuInit", call(l.cuInit, 0)) }

func (l *lib) DriverGetVersion() (int, error) {
	var v int32
	err := l.check("cuDriverGetVersion", call(l.cuDriverGetVersion, uintptr(unsafe.Pointer(&v))))
	return int(v), err
}

func (l *lib) DeviceGetCount() (int, error) {
	var n int32
	err := l.check("cuDeviceGetCount", call(l.cuDeviceGetCount, uintptr(unsafe.Pointer(&n))))
	return int(n), err
}

func (l *lib) DeviceGet(ordinal int) (Device, error) {
	var d int32
	err := l.check("cuDeviceGet", call(l.cuDeviceGet, uintptr(unsafe.Pointer(&d)), uintptr(ordinal)))
	return Device(d), err
}

func (l *lib) DeviceGetName(dev Device) (string, error) {
	buf := make([]byte, 256)
	if err := l.check("cuDeviceGetName", call(l.cuDeviceGetName, uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), uintptr(dev))); err != nil {
		return "", err
	}
	for i, c := range buf {
		if c == 0 {
			return string(buf[:i]), nil
		}
	}
	return string(buf), nil
}

func (l *lib) DeviceGetAttribute(attr Attribute, dev Device) (int, error) {
	var v int32
	err := l.check("cuDeviceGetAttribute", call(l.cuDeviceGetAttribute, uintptr(unsafe.Pointer(&v)), uintptr(attr), uintptr(dev)))
	return int(v), err
}

func (l *lib) DeviceTotalMem(dev Device) (int64, error) {
	var n uint64
	err := l.check("cuDeviceTotalMem_v2", call(l.cuDeviceTotalMem, uintptr(unsafe.Pointer(&n)), uintptr(dev)))
	return int64(n), err
}

func (l *lib) DevicePrimaryCtxRetain(dev Device) (Context, error) {
	var c uintptr
	err := l.check("cuDevicePrimaryCtxRetain", call(l.cuDevicePrimaryCtxRetain, uintptr(unsafe.Pointer(&c)), uintptr(dev)))
	return Context(c), err
}

func (l *lib) DevicePrimaryCtxRelease(dev Device) error {
	return l.check("cuDevicePrimaryCtxRelease", call(l.cuDevicePrimaryCtxRelease, uintptr(dev)))
}

func (l *lib) CtxSetCurrent(ctx Context) error {
	return l.check("cuCtxSetCurrent", call(l.cuCtxSetCurrent, uintptr(ctx)))
}

func (l *lib) CtxSynchronize() error {
	return l.check("cuCtxSynchronize", call(l.cuCtxSynchronize))
}

func (l *lib) DeviceCanAccessPeer(dev, peer Device) (bool, error) {
	var can int32
	err := l.check("cuDeviceCanAccessPeer", call(l.cuDeviceCanAccessPeer, uintptr(unsafe.Pointer(&can)), uintptr(dev), uintptr(peer)))
	return can != 0, err
}

func (l *lib) CtxEnablePeerAccess(peer Context, flags uint32) error {
	return l.check("cuCtxEnablePeerAccess", call(l.cuCtxEnablePeerAccess, uintptr(peer), uintptr(flags)))
}

func (l *lib) ModuleLoadData(image []byte) (Module, error) {
	img := image
	if len(img) == 0 || img[len(img)-1] != 0 {
		img = append(append(make([]byte, 0, len(image)+1), image...), 0)
	}
	var m uintptr
	err := l.check("cuModuleLoadData", call(l.cuModuleLoadData, uintptr(unsafe.Pointer(&m)), uintptr(unsafe.Pointer(&img[0]))))
	return Module(m), err
}

func (l *lib) ModuleUnload(mod Module) error {
	return l.check("cuModuleUnload", call(l.cuModuleUnload, uintptr(mod)))
}

func (l *lib) ModuleGetFunction(mod Module, name string) (Function, error) {
	var f uintptr
	cs := cString(name)
	err := l.check("cuModuleGetFunction", call(l.cuModuleGetFunction, uintptr(unsafe.Pointer(&f)), uintptr(mod), uintptr(unsafe.Pointer(&cs[0]))))
	return Function(f), err
}

func (l *lib) LaunchKernel(f Function, grid, block [3]uint32, sharedMem uint32, s Stream, params unsafe.Pointer) error {
	return l.check("cuLaunchKernel", call(l.cuLaunchKernel, uintptr(f),
		uintptr(grid[0]), uintptr(grid[1]), uintptr(grid[2]),
		uintptr(block[0]), uintptr(block[1]), uintptr(block[2]),
		uintptr(sharedMem), uintptr(s), uintptr(params), 0))
}

func (l *lib) MemAlloc(size int64) (DevPtr, error) {
	var p uint64
	err := l.check("cuMemAlloc_v2", call(l.cuMemAlloc, uintptr(unsafe.Pointer(&p)), uintptr(size)))
	return DevPtr(p), err
}

func (l *lib) MemFree(p DevPtr) error { return l.check("cuMemFree_v2", call(l.cuMemFree, uintptr(p))) }

func (l *lib) MemHostAlloc(size int64, flags uint32) (unsafe.Pointer, error) {
	var p unsafe.Pointer // pinned C memory, never Go's
	if err := l.check("cuMemHostAlloc", call(l.cuMemHostAlloc, uintptr(unsafe.Pointer(&p)), uintptr(size), uintptr(flags))); err != nil {
		return nil, err
	}
	return p, nil
}

func (l *lib) MemFreeHost(p unsafe.Pointer) error {
	return l.check("cuMemFreeHost", call(l.cuMemFreeHost, uintptr(p)))
}

func (l *lib) MemcpyHtoD(dst DevPtr, src unsafe.Pointer, n int64) error {
	return l.check("cuMemcpyHtoD_v2", call(l.cuMemcpyHtoD, uintptr(dst), uintptr(src), uintptr(n)))
}

func (l *lib) MemcpyHtoDAsync(dst DevPtr, src unsafe.Pointer, n int64, s Stream) error {
	return l.check("cuMemcpyHtoDAsync_v2", call(l.cuMemcpyHtoDAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s)))
}

func (l *lib) MemcpyDtoHAsync(dst unsafe.Pointer, src DevPtr, n int64, s Stream) error {
	return l.check("cuMemcpyDtoHAsync_v2", call(l.cuMemcpyDtoHAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s)))
}

func (l *lib) MemcpyDtoDAsync(dst, src DevPtr, n int64, s Stream) error {
	return l.check("cuMemcpyDtoDAsync_v2", call(l.cuMemcpyDtoDAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s)))
}

func (l *lib) MemcpyPeerAsync(dst DevPtr, dstCtx Context, src DevPtr, srcCtx Context, n int64, s Stream) error {
	return l.check("cuMemcpyPeerAsync", call(l.cuMemcpyPeerAsync, uintptr(dst), uintptr(dstCtx), uintptr(src), uintptr(srcCtx), uintptr(n), uintptr(s)))
}

func (l *lib) StreamCreate(flags uint32) (Stream, error) {
	var s uintptr
	err := l.check("cuStreamCreate", call(l.cuStreamCreate, uintptr(unsafe.Pointer(&s)), uintptr(flags)))
	return Stream(s), err
}

func (l *lib) StreamSynchronize(s Stream) error {
	return l.check("cuStreamSynchronize", call(l.cuStreamSynchronize, uintptr(s)))
}

func (l *lib) StreamQuery(s Stream) error {
	return l.check("cuStreamQuery", call(l.cuStreamQuery, uintptr(s)))
}

func (l *lib) StreamWaitEvent(s Stream, e Event, flags uint32) error {
	return l.check("cuStreamWaitEvent", call(l.cuStreamWaitEvent, uintptr(s), uintptr(e), uintptr(flags)))
}

func (l *lib) StreamDestroy(s Stream) error {
	return l.check("cuStreamDestroy_v2", call(l.cuStreamDestroy, uintptr(s)))
}

func (l *lib) EventCreate(flags uint32) (Event, error) {
	var e uintptr
	err := l.check("cuEventCreate", call(l.cuEventCreate, uintptr(unsafe.Pointer(&e)), uintptr(flags)))
	return Event(e), err
}

func (l *lib) EventRecord(e Event, s Stream) error {
	return l.check("cuEventRecord", call(l.cuEventRecord, uintptr(e), uintptr(s)))
}

func (l *lib) EventSynchronize(e Event) error {
	return l.check("cuEventSynchronize", call(l.cuEventSynchronize, uintptr(e)))
}

func (l *lib) EventQuery(e Event) error {
	return l.check("cuEventQuery", call(l.cuEventQuery, uintptr(e)))
}

func (l *lib) EventElapsedTime(start, end Event) (float32, error) {
	var ms float32 // written by the driver through the pointer: no float return to read
	err := l.check("cuEventElapsedTime", call(l.cuEventElapsedTime, uintptr(unsafe.Pointer(&ms)), uintptr(start), uintptr(end)))
	return ms, err
}

func (l *lib) EventDestroy(e Event) error {
	return l.check("cuEventDestroy_v2", call(l.cuEventDestroy, uintptr(e)))
}
