package core

import (
	"time"

	"github.com/goffload/offload/plugin"
)

// Tool receives the runtime's events as they happen, the role OMPT plays
// for OpenMP. Methods are called from many goroutines and must not block.
// The trace writer (GOFFLOAD_PROFILE) is one Tool.
type Tool interface {
	// TargetBegin: a construct (target, enter/exit data, update, memcpy,
	// host task) starts being enqueued on a device queue.
	TargetBegin(TargetEvent)
	// TargetEnd: the construct completed; Err says how.
	TargetEnd(TargetEvent)
	// DataOp: a copy was enqueued, or a mapping was created or removed.
	DataOp(DataEvent)
	// KernelLaunch: a kernel launch was enqueued.
	KernelLaunch(KernelEvent)
	// Wait: a construct waits for another task, on its device's queue or on
	// the host.
	Wait(WaitEvent)
}

// DeviceOpTool is a Tool that also takes the device-side times of the
// queue operations of each construct, from devices that can time them
// (host and remote devices can): it is found by type assertion, and its
// devices time their operations only when it is set.
type DeviceOpTool interface {
	Tool
	DeviceOp(DeviceOpEvent)
}

// DeviceOpEvent is one queue operation as the device ran it. Time is its
// start and End its end, on the host's clock (a device process's clock is
// aligned to the host's); Task is the construct it belongs to, whose
// TargetBegin names its queue. It comes before the construct's TargetEnd.
type DeviceOpEvent struct {
	Where
	Kind   plugin.OpKind
	Kernel string // the kernel's name (a launch)
	Bytes  int64  // bytes copied
	End    time.Time
	Failed bool
}

// Where says where an event happened: a device, one of its queues, and the
// task or construct it belongs to (tasks and synchronous constructs are
// numbered together).
type Where struct {
	Time   time.Time
	Device int
	Queue  int
	Task   uint64
}

// TargetEvent describes a construct.
type TargetEvent struct {
	Where
	Name   string // "target saxpy", "target enter data", …
	Nowait bool
	Err    error // at TargetEnd
}

// DataKind is the kind of a data operation.
type DataKind int

// Data operations.
const (
	CopyToDevice DataKind = iota
	CopyFromDevice
	CopyDeviceToDevice
	MapCreate
	MapRemove
)

// String names the kind.
func (k DataKind) String() string {
	return [...]string{"copy to device", "copy from device", "copy device to device", "map create", "map remove"}[k]
}

// DataEvent describes a data operation.
type DataEvent struct {
	Where
	Kind   DataKind
	Name   string // the buffer's name
	Host   uintptr
	Target uint64
	Bytes  int64
}

// KernelEvent describes a kernel launch.
type KernelEvent struct {
	Where
	Name     string
	Args     int   // number of arguments
	ArgBytes int64 // bytes of the slice arguments
}

// WaitEvent describes a wait: on a device queue (OnDevice) or on the host.
type WaitEvent struct {
	Where
	For      uint64 // the task waited for
	ForName  string
	OnDevice bool
	Dur      time.Duration // how long the host waited (host waits)
}

// tools sends every event to each of a list of tools.
type tools []Tool

func (ts tools) TargetBegin(e TargetEvent) {
	for _, t := range ts {
		t.TargetBegin(e)
	}
}

func (ts tools) TargetEnd(e TargetEvent) {
	for _, t := range ts {
		t.TargetEnd(e)
	}
}

func (ts tools) DataOp(e DataEvent) {
	for _, t := range ts {
		t.DataOp(e)
	}
}

func (ts tools) KernelLaunch(e KernelEvent) {
	for _, t := range ts {
		t.KernelLaunch(e)
	}
}

func (ts tools) Wait(e WaitEvent) {
	for _, t := range ts {
		t.Wait(e)
	}
}

// DeviceOp sends e to the tools that take device operations.
func (ts tools) DeviceOp(e DeviceOpEvent) {
	for _, t := range ts {
		if dt, ok := t.(DeviceOpTool); ok {
			dt.DeviceOp(e)
		}
	}
}

// wantOps reports whether one of the tools takes device operations.
func (ts tools) wantOps() bool {
	for _, t := range ts {
		if _, ok := t.(DeviceOpTool); ok {
			return true
		}
	}
	return false
}
