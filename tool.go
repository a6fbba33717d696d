package offload

import "github.com/goffload/offload/internal/core"

// Tool receives the runtime's events as they happen, the role OMPT plays
// for OpenMP; set it with WithTool. Its methods are called from many
// goroutines and must not block. The trace GOFFLOAD_PROFILE writes is made
// by a Tool.
type Tool = core.Tool

// Where says where a tool event happened: the time, the device number, the
// queue (its track in a trace) and the task (0 for a synchronous construct).
type Where = core.Where

// TargetEvent describes a construct beginning or ending.
type TargetEvent = core.TargetEvent

// DataEvent describes a copy or a mapping change.
type DataEvent = core.DataEvent

// DataKind says which data operation a DataEvent is.
type DataKind = core.DataKind

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
