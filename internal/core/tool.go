package core

import "time"

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

// Where says where an event happened: a device, one of its queues, and the
// task it belongs to (0 for a synchronous construct).
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
