package plugin

import "time"

// OpKind is the kind of a queue operation a traced queue times.
type OpKind uint8

// The operations a traced queue times.
const (
	OpLaunch   OpKind = iota + 1 // a kernel ran
	OpSubmit                     // a copy from host memory to the device
	OpRetrieve                   // a copy from the device to host memory
	OpExchange                   // a copy from this device to another (or within it)
	OpWait                       // the queue waited for an event
)

// String names the kind.
func (k OpKind) String() string {
	switch k {
	case OpLaunch:
		return "launch"
	case OpSubmit:
		return "submit"
	case OpRetrieve:
		return "retrieve"
	case OpExchange:
		return "exchange"
	case OpWait:
		return "wait"
	}
	return "op"
}

// OpTime is when one operation of a traced queue ran on the device, in the
// host's clock. A device with a clock of its own aligns it first.
type OpTime struct {
	// Tag is the queue's tag when the operation was enqueued (see
	// TaggedQueue). The core tags a queue with the task whose operations
	// follow.
	Tag        uint64
	Kind       OpKind
	Kernel     string // the kernel's name (OpLaunch)
	Bytes      int64  // bytes copied (submit, retrieve, exchange)
	Start, End time.Time
	Err        bool // the operation failed
}

// Tracer is implemented by devices that can time their queues' operations
// on the device. Trace sets the function f the device reports each timed
// operation to; nil stops the reports. Reports come in order per queue,
// before anything recorded after the operation fires. Trace is called
// once, before any queue is tagged. f must not block.
//
// Package plugin/optrace holds what every kind's timing shares: the Tracer,
// the queues' tags, operations timed where they run, and reports in queue
// order. A kind adds its clock.
type Tracer interface {
	Trace(f func(OpTime))
}

// TaggedQueue is implemented by the queues of a Tracer. Tag sets the tag of
// the operations enqueued after it; 0 means do not time them.
type TaggedQueue interface {
	Tag(tag uint64)
}
