package gpukind

import "github.com/goffload/offload/plugin"

// Op is the kind of an operation that a GPU kind's queue issues. It holds
// those every kind's queues have, and the kind's own from OpKindOps on.
type Op uint8

// The operations of every GPU kind's queues.
const (
	OpSubmit   Op = iota + 1 // a copy from host memory (plugin.Queue's Submit)
	OpRetrieve               // a copy to host memory
	OpExchange               // a copy to another device, or within this one
	OpLaunch                 // a kernel's device code
	OpEmulate                // a kernel's Go body (the emulate mode: Emulate)
	OpRecord                 // an event's record (Issuer.RecordOp)
	OpWait                   // a wait for an event (Issuer.WaitOp)
	OpKindOps                // the first of the kind's own operations
)

// Traced is the kind of operation a trace reports o as (plugin.OpTime.Kind).
// It is 0 for a record and the kind's own operations, which a trace does not
// time.
func (o Op) Traced() plugin.OpKind {
	switch o {
	case OpSubmit:
		return plugin.OpSubmit
	case OpRetrieve:
		return plugin.OpRetrieve
	case OpExchange:
		return plugin.OpExchange
	case OpLaunch, OpEmulate:
		return plugin.OpLaunch
	case OpWait:
		return plugin.OpWait
	}
	return 0
}

// String names o as errors do: "submit", "launch", "record".
func (o Op) String() string {
	switch o {
	case OpEmulate:
		return "launch"
	case OpRecord:
		return "record"
	case OpWait:
		return "wait"
	}
	if k := o.Traced(); k != 0 {
		return k.String()
	}
	return "operation"
}
