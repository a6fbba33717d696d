// Package tool is goffload's tool interface, the role OMPT plays for
// OpenMP. A Tool given to offload.WithTool receives the runtime's events as
// they happen.
//
// The runtime calls a Tool's methods from many goroutines at once. They
// must not block. The trace that GOFFLOAD_PROFILE writes comes from a Tool
// of the runtime's own.
package tool

import (
	"time"

	"github.com/goffload/offload/plugin"
)

// Tool receives the runtime's events.
type Tool interface {
	// TargetBegin: a construct starts being enqueued on a device queue.
	// Constructs are target, target data, enter and exit data, update, a
	// memory copy, and a host task of Async.Go.
	TargetBegin(TargetEvent)
	// TargetEnd: the construct completed; the event's Err says how.
	TargetEnd(TargetEvent)
	// DataOp: a copy was enqueued, or a mapping was created or removed.
	DataOp(DataEvent)
	// KernelLaunch: a kernel launch was enqueued.
	KernelLaunch(KernelEvent)
	// Wait: a construct waits for another task, on its device's queue
	// or on the host.
	Wait(WaitEvent)
}

// DeviceOpTool is a Tool that also takes the device-side times of queue
// operations: kernels, copies and waits. Devices that can time them do so
// (host devices and device processes can). The runtime finds a
// DeviceOpTool by type assertion, and devices time their operations only
// while one is set. The GOFFLOAD_PROFILE trace is one.
type DeviceOpTool interface {
	Tool
	// DeviceOp: an operation ran on its device. It comes before the
	// TargetEnd of its construct.
	DeviceOp(DeviceOpEvent)
}

// Where says where and when an event happened.
type Where struct {
	// Time is when it happened. For a DeviceOpEvent it is when the
	// operation started on the device, on the host's clock.
	Time time.Time
	// Device is the device number; the initial device's is
	// offload.NumDevices().
	Device int
	// Queue numbers the device queue of the construct: its track in a
	// trace.
	Queue int
	// Task is the task or synchronous construct the event belongs to.
	// Tasks and synchronous constructs are numbered together, from 1, in
	// the order they are made (offload.Task.ID).
	Task uint64
}

// TargetEvent describes a construct beginning or ending.
type TargetEvent struct {
	Where
	// Name is the construct: "target saxpy", "target enter data", …
	Name string
	// Nowait says the construct is a task.
	Nowait bool
	// Err is the construct's error at TargetEnd, nil if it succeeded. It
	// is the error the construct returns: errors.As finds an
	// *offload.MapError or *offload.KernelPanic in it.
	Err error
}

// DataKind says which data operation a DataEvent reports.
type DataKind int

// The data operations a DataEvent reports.
const (
	CopyToDevice       DataKind = iota // a copy from host memory to the device
	CopyFromDevice                     // a copy from the device to host memory
	CopyDeviceToDevice                 // a copy between devices, or within one
	MapCreate                          // a mapping was added to the device's present table
	MapRemove                          // a mapping was removed from it
)

// String names the kind: "copy to device", "map create", …
func (k DataKind) String() string {
	names := [...]string{"copy to device", "copy from device", "copy device to device", "map create", "map remove"}
	if k < 0 || int(k) >= len(names) {
		return "data op"
	}
	return names[k]
}

// DataEvent describes a copy or a change of a device's present table.
// A copy is enqueued on the construct's queue.
type DataEvent struct {
	Where
	Kind DataKind
	// Name is the buffer's name (see offload.Map.Named); empty if none.
	Name string
	// Host is the host address of the buffer; 0 for a copy between
	// devices.
	Host uintptr
	// Target is the device address; the source's, for a copy between
	// devices.
	Target uint64
	// Bytes is the size copied or mapped.
	Bytes int64
}

// KernelEvent describes a kernel launch.
type KernelEvent struct {
	Where
	// Name is the kernel's name.
	Name string
	// Args is the number of arguments of the launch, after struct
	// parameters are flattened into their fields.
	Args int
	// ArgBytes is the size of the launch's slice arguments, in bytes.
	ArgBytes int64
}

// WaitEvent describes a wait for another task. A wait on a device queue
// (OnDevice) holds the construct back there until the task's event
// fires. A wait on the host comes before the construct is enqueued.
type WaitEvent struct {
	Where
	// For is the task waited for (its Task.ID), ForName its construct.
	For     uint64
	ForName string
	// OnDevice says the wait is on the device queue, not the host.
	OnDevice bool
	// Dur is how long the host waited; zero for a wait on the device.
	Dur time.Duration
}

// OpKind says which queue operation a DeviceOpEvent reports.
type OpKind = plugin.OpKind

// The queue operations a DeviceOpEvent reports.
const (
	OpLaunch   = plugin.OpLaunch   // a kernel ran
	OpSubmit   = plugin.OpSubmit   // a copy from host memory to the device
	OpRetrieve = plugin.OpRetrieve // a copy from the device to host memory
	OpExchange = plugin.OpExchange // a copy from this device to another, or within it
	OpWait     = plugin.OpWait     // the queue waited for an event
)

// DeviceOpEvent is one queue operation as the device ran it.
// Time (in Where) is its start and End its end, on the host's clock.
// A device process's clock is aligned to the host's. Task is the construct
// it belongs to, whose TargetBegin names its queue.
type DeviceOpEvent struct {
	Where
	Kind OpKind
	// Kernel is the kernel's name (OpLaunch).
	Kernel string
	// Bytes is the size copied (OpSubmit, OpRetrieve, OpExchange).
	Bytes int64
	// End is when the operation ended on the device.
	End time.Time
	// Failed says the operation failed.
	Failed bool
}
