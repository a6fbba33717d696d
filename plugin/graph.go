package plugin

// GraphDefiner is implemented by devices that keep their part of a
// recorded task graph and run it again on one call: a device process,
// which then gets one message per replay instead of one per operation.
// DefineGraph defines part on the device and returns the handle its runs
// go through. A part it cannot run (an operation it does not take) is
// refused with an error wrapping ErrUnsupported before anything is sent:
// the core then replays the graph operation by operation.
type GraphDefiner interface {
	DefineGraph(part GraphPart) (GraphRunner, error)
}

// GraphPart is one device's part of a recorded graph: its operations in
// the graph's order, each on one of Lanes in-order queues of the device
// that the part owns. Lanes run concurrently; a lane waits for another's
// signal (of this device's part or of another device's) only where a Wait
// says so.
type GraphPart struct {
	// Key names the graph: the same in every device's part, and no other
	// graph of the process has it while this one is defined.
	Key   uint64
	Lanes int
	Ops   []GraphOp
}

// GraphOpKind is what a graph operation does.
type GraphOpKind uint8

// The operations of a graph part.
const (
	// GraphLaunch launches Kernel with Args (ArgAt says where a run's
	// arguments for it lie).
	GraphLaunch GraphOpKind = iota + 1
	// GraphExchange copies Size bytes from Src on this device to DstPtr
	// on Dst (this device or another), as Exchanger.Exchange does.
	GraphExchange
	// GraphSignal fires signal Signal, once the lane's operations before
	// it are done, for the parts of the devices in To (this device among
	// them where its own lanes wait for it), with the lane's error state.
	GraphSignal
	// GraphWait holds back the lane's operations after it until signal
	// Signal of device From's part fired (From is this device for its own
	// lanes' signals); a signal with an error puts the lane in the error
	// state.
	GraphWait
)

// GraphOp is one operation of a graph part; which fields it uses depends
// on Op.
type GraphOp struct {
	Op   GraphOpKind
	Lane int
	// GraphLaunch: the kernel, its arguments as defined, and where a
	// run's arguments for it are: args[ArgAt:ArgAt+len(Args)].
	Kernel Kernel
	Args   []Arg
	ArgAt  int
	// GraphExchange.
	Dst    Device
	DstPtr Ptr
	Src    Ptr
	Size   int64
	// GraphSignal and GraphWait: the signal's number, the same in every
	// part; the device whose part fires it (GraphWait) or whose parts
	// wait for it (GraphSignal).
	Signal int
	From   Device
	To     []Device
}

// GraphRunner is a defined graph part.
type GraphRunner interface {
	// Run runs the part again as run gen of the graph, with args. gen is the
	// same in every part of one replay, and a new one each replay. Each
	// launch's scalars are read from args at its ArgAt. Its device addresses
	// must be the defined ones. The returned event fires when every lane is
	// done, with the first error of any. The core starts a graph's next run
	// only once the last one's events fired on every device, unless the
	// runner is a GraphQueuer that queues it.
	Run(gen uint64, args []Arg) (Event, error)
	// Free forgets the part on the device, once its runs are done. The
	// runner is not used after.
	Free() error
}

// GraphQueuer is a GraphRunner that can take a run before the last one
// ended: the device starts it once the last one has ended there, as if the
// core had waited. The core asks only where the part is the graph's only
// one and the last run was sent.
type GraphQueuer interface {
	// Queues reports whether the next run, with args, can be queued so.
	Queues(args []Arg) bool
	// RunQueued is Run for such a run. If chained, the run follows the
	// last one only if that one ended without an error; else it fails
	// and runs nothing (the core reports its predecessor's failure).
	RunQueued(gen uint64, args []Arg, chained bool) (Event, error)
}
