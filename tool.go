package offload

import (
	"github.com/goffload/offload/plugin"
	"time"

	"github.com/goffload/offload/internal/core"
)

// Tool receives the runtime's events as they happen, the role OMPT plays
// for OpenMP; set it with WithTool. The runtime calls its methods from many
// goroutines, concurrently: they must not block. The trace GOFFLOAD_PROFILE
// writes is made by a Tool of the runtime's own.
type Tool interface {
	// TargetBegin: a construct (target, target data, enter or exit data,
	// update, a memory copy, a host task of Async.Go) starts being
	// enqueued on a device queue.
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

// DeviceOpTool is a Tool that also takes the device-side times of the queue
// operations of each construct (kernels, copies, waits), from devices that
// can time them (host devices and device processes can). The runtime finds
// it by type assertion on the Tool given to WithTool, and devices time
// their operations only when one is set. The GOFFLOAD_PROFILE trace is one.
type DeviceOpTool interface {
	Tool
	// DeviceOp: an operation ran on its device. It comes before the
	// TargetEnd of its construct.
	DeviceOp(DeviceOpEvent)
}

// Where says where and when a tool event happened.
type Where struct {
	// Time is when it happened (for a DeviceOpEvent: when the operation
	// started on the device, on the host's clock).
	Time time.Time
	// Device is the device number (the initial device's is NumDevices()).
	Device int
	// Queue numbers the device queue the construct was enqueued on: its
	// track in a trace.
	Queue int
	// Task is the task or synchronous construct the event belongs to:
	// tasks and synchronous constructs are numbered together, from 1, in
	// the order they are created (Task.ID).
	Task uint64
}

// TargetEvent describes a construct beginning (Tool.TargetBegin) or ending
// (Tool.TargetEnd).
type TargetEvent struct {
	Where
	// Name is the construct: "target saxpy", "target enter data", …
	Name string
	// Nowait says the construct is a task (Device.Nowait).
	Nowait bool
	// Err is the construct's error at TargetEnd (nil if it succeeded):
	// errors.As finds a *MapError or *KernelPanic in it as in the error the
	// construct returns.
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
func (k DataKind) String() string { return core.DataKind(k).String() }

// DataEvent describes a copy (enqueued on the construct's queue) or a
// change of a device's present table.
type DataEvent struct {
	Where
	Kind DataKind
	// Name is the buffer's name (see Map.Named); empty if it has none.
	Name string
	// Host is the host address of the buffer (0 for a copy between
	// devices).
	Host uintptr
	// Target is the device address (the source's, for a copy between
	// devices).
	Target uint64
	// Bytes is the size copied or mapped.
	Bytes int64
}

// KernelEvent describes a kernel launch.
type KernelEvent struct {
	Where
	// Name is the kernel's name.
	Name string
	// Args is the number of arguments of the launch (after the flattening
	// of struct parameters into their fields).
	Args int
	// ArgBytes is the size of the launch's slice arguments, in bytes.
	ArgBytes int64
}

// WaitEvent describes a wait for another task: on a device queue, which
// holds the construct back until the task's event fires (OnDevice), or on
// the host, which waits before it enqueues the construct.
type WaitEvent struct {
	Where
	// For is the task waited for (its Task.ID) and ForName its construct.
	For     uint64
	ForName string
	// OnDevice says the wait is on the device queue, not the host.
	OnDevice bool
	// Dur is how long the host waited (host waits only).
	Dur time.Duration
}

// OpKind says which queue operation a DeviceOpEvent reports.
type OpKind uint8

// The queue operations a DeviceOpEvent reports.
const (
	OpLaunch   OpKind = iota + 1 // a kernel ran
	OpSubmit                     // a copy from host memory to the device
	OpRetrieve                   // a copy from the device to host memory
	OpExchange                   // a copy from this device to another (or within it)
	OpWait                       // the queue waited for an event
)

// String names the kind: "launch", "submit", "retrieve", "exchange",
// "wait".
func (k OpKind) String() string { return plugin.OpKind(k).String() }

// DeviceOpEvent is one queue operation as the device ran it. Time (in
// Where) is its start and End its end, on the host's clock (a device
// process's clock is aligned to the host's); Task is the construct it
// belongs to, whose TargetBegin names its queue.
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

// coreTool is the runtime's side of a Tool: t wrapped so that it takes the
// runtime's events, converted to the Tool's (nil for none). A DeviceOpTool
// stays one, so that the runtime finds it by type assertion.
func coreTool(t Tool) core.Tool {
	if t == nil {
		return nil
	}
	if dt, ok := t.(DeviceOpTool); ok {
		return opToolAdapter{toolAdapter{t}, dt}
	}
	return toolAdapter{t}
}

// toolAdapter is a Tool as the runtime calls it: each event converted.
type toolAdapter struct{ t Tool }

func (a toolAdapter) TargetBegin(e core.TargetEvent) { a.t.TargetBegin(targetEvent(e)) }
func (a toolAdapter) TargetEnd(e core.TargetEvent)   { a.t.TargetEnd(targetEvent(e)) }

func (a toolAdapter) DataOp(e core.DataEvent) {
	a.t.DataOp(DataEvent{Where: Where(e.Where), Kind: DataKind(e.Kind), Name: e.Name, Host: e.Host, Target: e.Target, Bytes: e.Bytes})
}

func (a toolAdapter) KernelLaunch(e core.KernelEvent) {
	a.t.KernelLaunch(KernelEvent{Where: Where(e.Where), Name: e.Name, Args: e.Args, ArgBytes: e.ArgBytes})
}

func (a toolAdapter) Wait(e core.WaitEvent) {
	a.t.Wait(WaitEvent{Where: Where(e.Where), For: e.For, ForName: e.ForName, OnDevice: e.OnDevice, Dur: e.Dur})
}

// opToolAdapter is a DeviceOpTool as the runtime calls it.
type opToolAdapter struct {
	toolAdapter
	dt DeviceOpTool
}

func (a opToolAdapter) DeviceOp(e core.DeviceOpEvent) {
	a.dt.DeviceOp(DeviceOpEvent{Where: Where(e.Where), Kind: OpKind(e.Kind), Kernel: e.Kernel, Bytes: e.Bytes, End: e.End, Failed: e.Failed})
}

// targetEvent converts a construct's event, its error as the construct
// returns it (see apiError).
func targetEvent(e core.TargetEvent) TargetEvent {
	return TargetEvent{Where: Where(e.Where), Name: e.Name, Nowait: e.Nowait, Err: apiError(e.Err)}
}
