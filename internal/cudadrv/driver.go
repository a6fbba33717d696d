// Package cudadrv is the CUDA driver API as goffload's cuda device kind
// uses it: the functions it calls, behind the Driver interface, and the
// real binding (Load), which opens libcuda.so.1 at run time with purego —
// no cgo, no CUDA headers or toolkit at build time.
//
// The interface is what lets the kind's logic (queues, events, memory,
// argument packing) be tested without a GPU: package cudafake is an
// in-memory Driver. Its methods are the driver API functions of the same
// names, with Go types: handles are opaque integers, a failure is an
// *Error naming the function and the CUDA error.
//
// As in C, the functions that work in "the current context" (MemAlloc,
// MemHostAlloc, ModuleLoadData, StreamCreate, EventCreate, CtxSynchronize,
// MemcpyHtoD) use the context CtxSetCurrent made current on the calling OS
// thread: a caller locks its goroutine to its thread
// (runtime.LockOSThread) around CtxSetCurrent and the calls that need it.
package cudadrv

import (
	"errors"
	"fmt"
	"unsafe"
)

// Handles, as the driver API's types.
type (
	Device   int32   // CUdevice: an ordinal's device
	Context  uintptr // CUcontext
	Module   uintptr // CUmodule
	Function uintptr // CUfunction
	Stream   uintptr // CUstream
	Event    uintptr // CUevent
	DevPtr   uint64  // CUdeviceptr
)

// Attribute is a CUdevice_attribute.
type Attribute int32

// The device attributes goffload reads.
const (
	AttrMaxThreadsPerBlock     Attribute = 1
	AttrMultiprocessorCount    Attribute = 16
	AttrUnifiedAddressing      Attribute = 41
	AttrComputeCapabilityMajor Attribute = 75
	AttrComputeCapabilityMinor Attribute = 76
)

// Flags.
const (
	StreamNonBlocking    = 0x1 // CU_STREAM_NON_BLOCKING: no implicit sync with the legacy default stream
	EventDisableTiming   = 0x2 // CU_EVENT_DISABLE_TIMING: the cheapest events
	MemHostAllocPortable = 0x1 // CU_MEMHOSTALLOC_PORTABLE: pinned for every context
)

// Result is a CUresult.
type Result uint32

// The CUresult values goffload tells apart (cuda.h).
const (
	Success                     Result = 0
	ErrInvalidValue             Result = 1
	ErrOutOfMemory              Result = 2
	ErrNotInitialized           Result = 3
	ErrDeinitialized            Result = 4
	ErrStubLibrary              Result = 34
	ErrInsufficientDriver       Result = 35
	ErrNoDevice                 Result = 100
	ErrInvalidDevice            Result = 101
	ErrInvalidImage             Result = 200
	ErrInvalidContext           Result = 201
	ErrNoBinaryForGPU           Result = 209
	ErrECCUncorrectable         Result = 214
	ErrPeerAccessUnsupported    Result = 217
	ErrInvalidPTX               Result = 218
	ErrJITCompilerNotFound      Result = 221
	ErrUnsupportedPTX           Result = 222
	ErrInvalidHandle            Result = 400
	ErrNotFound                 Result = 500
	ErrNotReady                 Result = 600
	ErrIllegalAddress           Result = 700
	ErrLaunchOutOfResources     Result = 701
	ErrLaunchTimeout            Result = 702
	ErrPeerAccessAlreadyEnabled Result = 704
	ErrContextIsDestroyed       Result = 709
	ErrAssert                   Result = 710
	ErrHardwareStackError       Result = 714
	ErrIllegalInstruction       Result = 715
	ErrMisalignedAddress        Result = 716
	ErrInvalidAddressSpace      Result = 717
	ErrInvalidPC                Result = 718
	ErrLaunchFailed             Result = 719
	ErrNotPermitted             Result = 800
	ErrNotSupported             Result = 801
	ErrUnknown                  Result = 999
)

// names are the CUresult names of cuda.h, for drivers (and fakes) whose
// cuGetErrorName fails.
var names = map[Result]string{
	Success: "CUDA_SUCCESS", ErrInvalidValue: "CUDA_ERROR_INVALID_VALUE", ErrOutOfMemory: "CUDA_ERROR_OUT_OF_MEMORY",
	ErrNotInitialized: "CUDA_ERROR_NOT_INITIALIZED", ErrDeinitialized: "CUDA_ERROR_DEINITIALIZED",
	ErrStubLibrary: "CUDA_ERROR_STUB_LIBRARY", ErrInsufficientDriver: "CUDA_ERROR_INSUFFICIENT_DRIVER",
	ErrNoDevice: "CUDA_ERROR_NO_DEVICE", ErrInvalidDevice: "CUDA_ERROR_INVALID_DEVICE",
	ErrInvalidImage: "CUDA_ERROR_INVALID_IMAGE", ErrInvalidContext: "CUDA_ERROR_INVALID_CONTEXT",
	ErrNoBinaryForGPU: "CUDA_ERROR_NO_BINARY_FOR_GPU", ErrECCUncorrectable: "CUDA_ERROR_ECC_UNCORRECTABLE",
	ErrPeerAccessUnsupported: "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", ErrInvalidPTX: "CUDA_ERROR_INVALID_PTX", ErrJITCompilerNotFound: "CUDA_ERROR_JIT_COMPILER_NOT_FOUND",
	ErrUnsupportedPTX: "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", ErrInvalidHandle: "CUDA_ERROR_INVALID_HANDLE",
	ErrNotFound: "CUDA_ERROR_NOT_FOUND", ErrNotReady: "CUDA_ERROR_NOT_READY",
	ErrIllegalAddress: "CUDA_ERROR_ILLEGAL_ADDRESS", ErrLaunchOutOfResources: "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
	ErrLaunchTimeout: "CUDA_ERROR_LAUNCH_TIMEOUT", ErrPeerAccessAlreadyEnabled: "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", ErrContextIsDestroyed: "CUDA_ERROR_CONTEXT_IS_DESTROYED",
	ErrAssert: "CUDA_ERROR_ASSERT", ErrHardwareStackError: "CUDA_ERROR_HARDWARE_STACK_ERROR",
	ErrIllegalInstruction: "CUDA_ERROR_ILLEGAL_INSTRUCTION", ErrMisalignedAddress: "CUDA_ERROR_MISALIGNED_ADDRESS",
	ErrInvalidAddressSpace: "CUDA_ERROR_INVALID_ADDRESS_SPACE", ErrInvalidPC: "CUDA_ERROR_INVALID_PC",
	ErrLaunchFailed: "CUDA_ERROR_LAUNCH_FAILED", ErrNotPermitted: "CUDA_ERROR_NOT_PERMITTED",
	ErrNotSupported: "CUDA_ERROR_NOT_SUPPORTED", ErrUnknown: "CUDA_ERROR_UNKNOWN",
}

// Name is r's name in cuda.h ("CUDA_ERROR_OUT_OF_MEMORY"), or its number.
func (r Result) Name() string {
	if n, ok := names[r]; ok {
		return n
	}
	return fmt.Sprintf("CUresult(%d)", uint32(r))
}

// Sticky reports whether r is an error that leaves the context unusable:
// a kernel that faulted, trapped or timed out, or uncorrectable memory.
// Every later call in the context fails with it until the context is
// destroyed (for the primary context: reset).
func (r Result) Sticky() bool {
	switch r {
	case ErrIllegalAddress, ErrLaunchTimeout, ErrAssert, ErrHardwareStackError, ErrIllegalInstruction,
		ErrMisalignedAddress, ErrInvalidAddressSpace, ErrInvalidPC, ErrLaunchFailed, ErrECCUncorrectable:
		return true
	}
	return false
}

// Error is a failed driver call: the function ("cuMemAlloc_v2"), the
// CUresult, its name and description (cuGetErrorName, cuGetErrorString).
type Error struct {
	Func string
	Code Result
	Name string
	Desc string
}

// Error describes the failure.
func (e *Error) Error() string {
	if e.Desc != "" {
		return fmt.Sprintf("%s: %s (%s)", e.Func, e.Name, e.Desc)
	}
	return fmt.Sprintf("%s: %s", e.Func, e.Name)
}

// NewError is the error of fn returning r, with r's name from cuda.h.
func NewError(fn string, r Result, desc string) *Error {
	return &Error{Func: fn, Code: r, Name: r.Name(), Desc: desc}
}

// Code returns the CUresult err carries: Success for nil, ErrUnknown for
// an error that is not an *Error.
func Code(err error) Result {
	if err == nil {
		return Success
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ErrUnknown
}

// Driver is the CUDA driver API as goffload calls it. Methods are safe for
// concurrent use (as the driver API is); see the package doc for the
// current context.
type Driver interface {
	Init() error
	DriverGetVersion() (int, error)
	DeviceGetCount() (int, error)
	DeviceGet(ordinal int) (Device, error)
	DeviceGetName(dev Device) (string, error)
	DeviceGetAttribute(attr Attribute, dev Device) (int, error)
	DeviceTotalMem(dev Device) (int64, error)
	DevicePrimaryCtxRetain(dev Device) (Context, error)
	DevicePrimaryCtxRelease(dev Device) error
	CtxSetCurrent(ctx Context) error
	CtxSynchronize() error
	// DeviceCanAccessPeer reports whether contexts on dev can access
	// peer's memory directly (NVLink or PCIe peer-to-peer).
	DeviceCanAccessPeer(dev, peer Device) (bool, error)
	// CtxEnablePeerAccess lets the current context access peer's memory
	// directly, and makes cuMemcpyPeer between them a direct copy instead
	// of one through host memory. Flags must be 0. A second call for the
	// same pair fails with ErrPeerAccessAlreadyEnabled; a pair that
	// DeviceCanAccessPeer says no to, with ErrPeerAccessUnsupported.
	CtxEnablePeerAccess(peer Context, flags uint32) error

	// ModuleLoadData loads a module from image (PTX text or a cubin) in the
	// current context; the binding adds the NUL that PTX text needs.
	ModuleLoadData(image []byte) (Module, error)
	ModuleUnload(mod Module) error
	ModuleGetFunction(mod Module, name string) (Function, error)
	// LaunchKernel is cuLaunchKernel with kernelParams: params points to
	// an array of one pointer per kernel parameter, each to the
	// parameter's value; the driver copies them before it returns.
	LaunchKernel(f Function, grid, block [3]uint32, sharedMem uint32, s Stream, params unsafe.Pointer) error

	MemAlloc(size int64) (DevPtr, error)
	MemFree(p DevPtr) error
	// MemHostAlloc allocates size bytes of page-locked host memory.
	MemHostAlloc(size int64, flags uint32) (unsafe.Pointer, error)
	MemFreeHost(p unsafe.Pointer) error
	MemcpyHtoD(dst DevPtr, src unsafe.Pointer, n int64) error
	MemcpyHtoDAsync(dst DevPtr, src unsafe.Pointer, n int64, s Stream) error
	MemcpyDtoHAsync(dst unsafe.Pointer, src DevPtr, n int64, s Stream) error
	MemcpyDtoDAsync(dst, src DevPtr, n int64, s Stream) error
	MemcpyPeerAsync(dst DevPtr, dstCtx Context, src DevPtr, srcCtx Context, n int64, s Stream) error

	StreamCreate(flags uint32) (Stream, error)
	StreamSynchronize(s Stream) error
	// StreamQuery returns nil when the stream is done, an *Error with
	// ErrNotReady while it is not, or the stream's failure.
	StreamQuery(s Stream) error
	StreamWaitEvent(s Stream, e Event, flags uint32) error
	StreamDestroy(s Stream) error

	EventCreate(flags uint32) (Event, error)
	EventRecord(e Event, s Stream) error
	EventSynchronize(e Event) error
	// EventQuery is StreamQuery's like for an event.
	EventQuery(e Event) error
	// EventElapsedTime is the time from start's record to end's, in
	// milliseconds, with a resolution of about 0.5 µs. Both events must be
	// created without EventDisableTiming and recorded (else
	// ErrInvalidHandle), and their records complete (else ErrNotReady).
	EventElapsedTime(start, end Event) (float32, error)
	EventDestroy(e Event) error
}
