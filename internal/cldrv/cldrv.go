// Package cldrv is the part of the OpenCL API that goffload's opencl kind
// uses, bound at run time from the ICD loader (libOpenCL.so.1) with purego:
// no cgo, no OpenCL headers to build. Load opens the library; a *Lib's
// methods are the API's functions with Go types, returning *Error for a
// status other than CL_SUCCESS.
//
// Handles are the API's opaque pointers as integers. The functions are
// safe for concurrent use as OpenCL's are (all but clSetKernelArg on one
// kernel object, which the caller serializes with its launch).
package cldrv

import (
	"errors"
	"fmt"
)

// DefaultLibrary is the library Load opens by default: the ICD loader's
// soname, which dispatches to every vendor driver registered in
// /etc/OpenCL/vendors.
const DefaultLibrary = "libOpenCL.so.1"

// Handles of OpenCL objects.
type (
	Platform uintptr // cl_platform_id
	Device   uintptr // cl_device_id
	Context  uintptr // cl_context
	Queue    uintptr // cl_command_queue
	Mem      uintptr // cl_mem
	Program  uintptr // cl_program
	Kernel   uintptr // cl_kernel
	Event    uintptr // cl_event
)

// Status is a cl_int status code: CL_SUCCESS (0) or a negative error.
type Status int32

// Status codes the kind tells apart.
const (
	Success                     Status = 0
	DeviceNotFound              Status = -1
	DeviceNotAvailable          Status = -2
	CompilerNotAvailable        Status = -3
	MemObjectAllocationFailure  Status = -4
	OutOfResources              Status = -5
	OutOfHostMemory             Status = -6
	ProfilingInfoNotAvailable   Status = -7
	BuildProgramFailure         Status = -11
	MisalignedSubBufferOffset   Status = -13
	ExecStatusErrorForEvents    Status = -14
	KernelArgInfoNotAvailable   Status = -19
	InvalidValue                Status = -30
	InvalidDevice               Status = -33
	InvalidContext              Status = -34
	InvalidCommandQueue         Status = -36
	InvalidMemObject            Status = -38
	InvalidBuildOptions         Status = -43
	InvalidProgram              Status = -44
	InvalidProgramExecutable    Status = -45
	InvalidKernelName           Status = -46
	InvalidKernel               Status = -48
	InvalidArgIndex             Status = -49
	InvalidArgValue             Status = -50
	InvalidArgSize              Status = -51
	InvalidKernelArgs           Status = -52
	InvalidWorkDimension        Status = -53
	InvalidWorkGroupSize        Status = -54
	InvalidWorkItemSize         Status = -55
	InvalidEventWaitList        Status = -57
	InvalidEvent                Status = -58
	InvalidOperation            Status = -59
	InvalidBufferSize           Status = -61
	InvalidGlobalWorkSize       Status = -63
	PlatformNotFoundKHR         Status = -1001
	errUnknown                  Status = -9999
	InvalidPlatform             Status = -32
	InvalidQueueProperties      Status = -35
	InvalidHostPtr              Status = -37
	InvalidBinary               Status = -42
	InvalidKernelDefinition     Status = -47
	InvalidGlobalOffset         Status = -56
	InvalidProperty             Status = -64
	InvalidDeviceType           Status = -31
	MemCopyOverlap              Status = -8
	MapFailure                  Status = -12
	LinkProgramFailure          Status = -17
	InvalidImageSize            Status = -40
	InvalidSampler              Status = -41
	InvalidMipLevel             Status = -62
	InvalidDevicePartitionCount Status = -68
	InvalidPipeSize             Status = -69
	InvalidDeviceQueue          Status = -70
	InvalidSpecID               Status = -71
	MaxSizeRestrictionExceeded  Status = -72
	DevicePartitionFailed       Status = -18
	CompileProgramFailure       Status = -15
	LinkerNotAvailable          Status = -16
	ImageFormatMismatch         Status = -9
	ImageFormatNotSupported     Status = -10
	InvalidCompilerOptions      Status = -66
	InvalidLinkerOptions        Status = -67
)

var names = map[Status]string{
	Success: "CL_SUCCESS", DeviceNotFound: "CL_DEVICE_NOT_FOUND", DeviceNotAvailable: "CL_DEVICE_NOT_AVAILABLE",
	CompilerNotAvailable: "CL_COMPILER_NOT_AVAILABLE", MemObjectAllocationFailure: "CL_MEM_OBJECT_ALLOCATION_FAILURE",
	OutOfResources: "CL_OUT_OF_RESOURCES", OutOfHostMemory: "CL_OUT_OF_HOST_MEMORY",
	ProfilingInfoNotAvailable: "CL_PROFILING_INFO_NOT_AVAILABLE", MemCopyOverlap: "CL_MEM_COPY_OVERLAP",
	ImageFormatMismatch: "CL_IMAGE_FORMAT_MISMATCH", ImageFormatNotSupported: "CL_IMAGE_FORMAT_NOT_SUPPORTED",
	BuildProgramFailure: "CL_BUILD_PROGRAM_FAILURE", MapFailure: "CL_MAP_FAILURE",
	MisalignedSubBufferOffset: "CL_MISALIGNED_SUB_BUFFER_OFFSET", ExecStatusErrorForEvents: "CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST",
	CompileProgramFailure: "CL_COMPILE_PROGRAM_FAILURE", LinkerNotAvailable: "CL_LINKER_NOT_AVAILABLE",
	LinkProgramFailure: "CL_LINK_PROGRAM_FAILURE", DevicePartitionFailed: "CL_DEVICE_PARTITION_FAILED",
	KernelArgInfoNotAvailable: "CL_KERNEL_ARG_INFO_NOT_AVAILABLE", InvalidValue: "CL_INVALID_VALUE",
	InvalidDeviceType: "CL_INVALID_DEVICE_TYPE", InvalidPlatform: "CL_INVALID_PLATFORM", InvalidDevice: "CL_INVALID_DEVICE",
	InvalidContext: "CL_INVALID_CONTEXT", InvalidQueueProperties: "CL_INVALID_QUEUE_PROPERTIES",
	InvalidCommandQueue: "CL_INVALID_COMMAND_QUEUE", InvalidHostPtr: "CL_INVALID_HOST_PTR",
	InvalidMemObject: "CL_INVALID_MEM_OBJECT", InvalidImageSize: "CL_INVALID_IMAGE_SIZE", InvalidSampler: "CL_INVALID_SAMPLER",
	InvalidBinary: "CL_INVALID_BINARY", InvalidBuildOptions: "CL_INVALID_BUILD_OPTIONS", InvalidProgram: "CL_INVALID_PROGRAM",
	InvalidProgramExecutable: "CL_INVALID_PROGRAM_EXECUTABLE", InvalidKernelName: "CL_INVALID_KERNEL_NAME",
	InvalidKernelDefinition: "CL_INVALID_KERNEL_DEFINITION", InvalidKernel: "CL_INVALID_KERNEL",
	InvalidArgIndex: "CL_INVALID_ARG_INDEX", InvalidArgValue: "CL_INVALID_ARG_VALUE", InvalidArgSize: "CL_INVALID_ARG_SIZE",
	InvalidKernelArgs: "CL_INVALID_KERNEL_ARGS", InvalidWorkDimension: "CL_INVALID_WORK_DIMENSION",
	InvalidWorkGroupSize: "CL_INVALID_WORK_GROUP_SIZE", InvalidWorkItemSize: "CL_INVALID_WORK_ITEM_SIZE",
	InvalidGlobalOffset: "CL_INVALID_GLOBAL_OFFSET", InvalidEventWaitList: "CL_INVALID_EVENT_WAIT_LIST",
	InvalidEvent: "CL_INVALID_EVENT", InvalidOperation: "CL_INVALID_OPERATION", InvalidBufferSize: "CL_INVALID_BUFFER_SIZE",
	InvalidMipLevel: "CL_INVALID_MIP_LEVEL", InvalidGlobalWorkSize: "CL_INVALID_GLOBAL_WORK_SIZE",
	InvalidProperty: "CL_INVALID_PROPERTY", InvalidCompilerOptions: "CL_INVALID_COMPILER_OPTIONS",
	InvalidLinkerOptions: "CL_INVALID_LINKER_OPTIONS", InvalidDevicePartitionCount: "CL_INVALID_DEVICE_PARTITION_COUNT",
	InvalidPipeSize: "CL_INVALID_PIPE_SIZE", InvalidDeviceQueue: "CL_INVALID_DEVICE_QUEUE", InvalidSpecID: "CL_INVALID_SPEC_ID",
	MaxSizeRestrictionExceeded: "CL_MAX_SIZE_RESTRICTION_EXCEEDED", PlatformNotFoundKHR: "CL_PLATFORM_NOT_FOUND_KHR",
}

// Name is the status's name in the OpenCL headers ("CL_OUT_OF_RESOURCES").
func (s Status) Name() string {
	if n, ok := names[s]; ok {
		return n
	}
	return fmt.Sprintf("cl_int(%d)", int32(s))
}

// Error is a failed call: the function and the status it returned.
type Error struct {
	Func string
	Code Status
}

// Error describes the failure: "clCreateBuffer: CL_OUT_OF_RESOURCES (-5)".
func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s (%d)", e.Func, e.Code.Name(), int32(e.Code))
}

// Code returns the status of err's *Error; Success for nil, and a status
// no call returns for an error that holds none.
func Code(err error) Status {
	if err == nil {
		return Success
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return errUnknown
}

// check returns nil for CL_SUCCESS and an *Error naming fn otherwise.
func check(fn string, r uintptr) error {
	if s := Status(int32(uint32(r))); s != Success {
		return &Error{Func: fn, Code: s}
	}
	return nil
}

// Device types (cl_device_type bits).
const (
	TypeDefault     uint64 = 1 << 0
	TypeCPU         uint64 = 1 << 1
	TypeGPU         uint64 = 1 << 2
	TypeAccelerator uint64 = 1 << 3
	TypeAll         uint64 = 0xFFFFFFFF
)

// Platform info.
const (
	PlatformVersion uint32 = 0x0901
	PlatformName    uint32 = 0x0902
	PlatformVendor  uint32 = 0x0903
)

// Device info.
const (
	DeviceType                uint32 = 0x1000
	DeviceVendorID            uint32 = 0x1001
	DeviceMaxComputeUnits     uint32 = 0x1002
	DeviceMaxWorkItemDims     uint32 = 0x1003
	DeviceMaxWorkGroupSize    uint32 = 0x1004
	DeviceMaxWorkItemSizes    uint32 = 0x1005
	DeviceMaxMemAllocSize     uint32 = 0x1010
	DeviceMemBaseAddrAlign    uint32 = 0x1019
	DeviceGlobalMemSize       uint32 = 0x101F
	DeviceAvailable           uint32 = 0x1027
	DeviceQueueProperties     uint32 = 0x102A
	DeviceName                uint32 = 0x102B
	DeviceVendor              uint32 = 0x102C
	DriverVersion             uint32 = 0x102D
	DeviceVersion             uint32 = 0x102F
	DeviceOpenCLCVersion      uint32 = 0x103D
	DeviceSVMCapabilities     uint32 = 0x1053
	DevicePCIBusIDNV          uint32 = 0x4008 // cl_nv_device_attribute_query
	DeviceHostUnifiedMemory   uint32 = 0x1035
	DeviceProfilingResolution uint32 = 0x1025
)

// SVM capabilities (CL_DEVICE_SVM_CAPABILITIES bits).
const (
	SVMCoarseGrainBuffer uint64 = 1 << 0
	SVMFineGrainBuffer   uint64 = 1 << 1
)

// Vendor IDs (CL_DEVICE_VENDOR_ID).
const VendorNVIDIA = 0x10DE

// Other constants.
const (
	ContextPlatform        uintptr = 0x1084
	QueueProperties        uint64  = 0x1093
	QueueProfilingEnable   uint64  = 1 << 1
	MemReadWrite           uint64  = 1 << 0
	BufferCreateTypeRegion uint32  = 0x1220

	ProgramKernelNames uint32 = 0x1168
	ProgramBuildStatus uint32 = 0x1181
	ProgramBuildLog    uint32 = 0x1183

	KernelNumArgs        uint32  = 0x1191
	KernelArgAddressQual uint32  = 0x1196
	KernelArgTypeName    uint32  = 0x1198
	KernelArgName        uint32  = 0x119A
	AddressGlobal        uint32  = 0x119B
	AddressLocal         uint32  = 0x119C
	AddressConstant      uint32  = 0x119D
	AddressPrivate       uint32  = 0x119E
	KernelWorkGroupSize  uint32  = 0x11B0
	EventExecutionStatus uint32  = 0x11D3
	Complete             int32   = 0
	ProfilingQueued      uint32  = 0x1280
	ProfilingSubmit      uint32  = 0x1281
	ProfilingStart       uint32  = 0x1282
	ProfilingEnd         uint32  = 0x1283
	BlockingTrue         uintptr = 1
	BlockingFalse        uintptr = 0
)
