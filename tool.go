package offload

import "github.com/goffload/offload/internal/core"

// Tool receives the runtime's events as they happen, the role OMPT plays
// for OpenMP; set it with WithTool. Its methods are called from many
// goroutines and must not block. The trace GOFFLOAD_PROFILE writes is made
// by a Tool.
type Tool = core.Tool

// Where says where a tool event happened: the time, the device number, the
// queue (its track in a trace) and the task: tasks and synchronous
// constructs are numbered together, from 1.
type Where = core.Where

// TargetEvent describes a construct beginning or ending.
type TargetEvent = core.TargetEvent

// DataEvent describes a copy or a mapping change.
type DataEvent = core.DataEvent

// DataKind says which data operation a DataEvent is.
type DataKind = core.DataKind

// DeviceOpTool is a Tool that also takes the device-side times of the queue
// operations of each construct (kernels, copies, waits), from devices that
// can time them; it is found by type assertion. The GOFFLOAD_PROFILE trace
// is one.
type DeviceOpTool = core.DeviceOpTool

// DeviceOpEvent is one queue operation as the device ran it, with its start
// (Time) and End on the host's clock; remote devices' clocks are aligned to
// the host's.
type DeviceOpEvent = core.DeviceOpEvent

// OpKind says which queue operation a DeviceOpEvent reports.
type OpKind = core.OpKind

// The queue operations a DeviceOpEvent reports.
const (
	OpLaunch   = core.OpLaunch
	OpSubmit   = core.OpSubmit
	OpRetrieve = core.OpRetrieve
	OpExchange = core.OpExchange
	OpWait     = core.OpWait
)

// KernelEvent describes a kernel launch.
type KernelEvent = core.KernelEvent

// WaitEvent describes a wait for another task, on a device queue or on the
// host.
type WaitEvent = core.WaitEvent

// The data operations a DataEvent reports.
const (
	CopyToDevice       = core.CopyToDevice
	CopyFromDevice     = core.CopyFromDevice
	CopyDeviceToDevice = core.CopyDeviceToDevice
	MapCreate          = core.MapCreate
	MapRemove          = core.MapRemove
)
