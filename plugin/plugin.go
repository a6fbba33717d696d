// Package plugin is the contract between the goffload runtime core and the
// device kinds (host, remote, cuda, …). It is to goffload what
// database/sql/driver is to database/sql. Programs use package offload.
// This package is for those who write a device kind, in this module or
// outside it.
//
// # Writing a device kind
//
// A kind registers itself with [RegisterKind] from an init function of its
// package. Programs import that package for its side effect, as
// database/sql drivers are imported. The kind's [Kind] says how devices are
// opened. Open opens the items of GOFFLOAD_DEVICES that name the kind
// ("mykind" or "mykind:ARG"). Discover finds devices when GOFFLOAD_DEVICES
// is unset. A kind that acts for the whole process (serving as a device
// process, finalizing MPI) gives its process hooks there too: ServeIfDevice,
// Serving and Finish.
//
// The core then loads the kernel image on each device ([Device.Load]).
// It drives the device through [Device], [Queue] and [Event]:
//
//   - Memory: Alloc and Free, device addresses as [Ptr]; any address inside
//     a live allocation must be accepted.
//   - Queues: in-order streams of Submit, Retrieve, Launch, Record and
//     Wait (and Exchange, with [Exchanger]); errors put the queue in an
//     error state that Synchronize or Query returns and clears.
//   - Events: recorded on a queue, waited on by other queues of the device
//     (of other devices, with [ForeignEventWaiter]) and by the host.
//   - Kernels: the [Image] holds the program's kernels, as read-only
//     [Kernel] handles in the same order in every process. A queue runs one
//     with [Kernel.Launch]. Launch decodes the [Arg]s over the device's
//     memory (a [Mem]) and calls the Go body with a [KernelCtx], made with
//     [NewKernelCtx] over a [Pool]. A kind that cannot run Go code (a GPU)
//     launches the kernel's device code ([Kernel.Code]) instead. It refuses
//     kernels that have none.
//
// Optional capabilities are separate interfaces found by type assertion, as
// database/sql/driver's are. This is the only way a capability is offered:
// no required method answers "unsupported" for a whole capability.
// A kind implements those it can do better than the core's fallback.
//
// On a [Device]:
//   - [ForeignEventWaiter]: its queues wait on other devices' events;
//   - [LostReporter]: why it stopped working;
//   - [Tracer]: device-side timing of operations;
//   - [Canceler]: ask running kernels to stop;
//   - [Killer]: end kernels that did not stop;
//   - [Abandoner]: give up on kernels that cannot be ended (nothing after
//     them runs);
//   - [AddrResolver]: a device address as kernels see it;
//   - [HostSharer]: kernels work on the host's buffers in place (maps
//     neither allocate nor copy).
//   - [GraphDefiner]: keep a part of a recorded task graph and run it on
//     one call a replay.
//
// On a [Queue]:
//   - [Exchanger]: device-to-device copies;
//   - [GeometryLauncher]: a launch with a grid;
//   - [StopLauncher]: a launch with its own stop signal;
//   - [InlineQueue]: run on the enqueuing goroutine;
//   - [TaggedQueue]: tags for a Tracer.
//
// On an [Event]: [FireNotifier], a callback when it fires.
//
// Every kind must pass the conformance suite in package plugintest: its
// tests call plugintest.Run with a function that opens devices of the kind.
// The suite checks each optional interface the kind's values implement.
// plugin/plugintest/testdata/outside is a complete CPU kind in a module of
// its own, written against this package and the plugin/... packages
// alone.
//
// # What a kind uses
//
// A CPU kind (one that runs the Go bodies) needs:
//   - [RegisterKind];
//   - [NewPool], one per device, closed with the device (what the runtime
//     keeps for the device in this process goes with it);
//   - [NewKernelCtx] in Load;
//   - [Kernel.Launch] with a [Mem] over its memory;
//   - the Err variables, wrapped with detail.
//
// What kinds repeat is in packages beside this one, as the host kind and
// testdata/outside use them:
//   - plugin/hostmem: Go memory as device memory;
//   - plugin/opqueue: in-order queues that run Go functions on a goroutine
//     of their own, one-shot events, the error state;
//   - plugin/devstate: a device's label, closed and lost state;
//   - plugin/optrace: timing for Tracer.
//
// A kind that runs device code reads [Kernel.Code] and [Kernel.Params].
// It checks a launch's arguments with [CheckArgs] before it packs them.
// A kind whose kernels run in another process of the program sends a
// [KernelPanic]'s fields back. The host then rebuilds the error
// ([NewKernelPanic]).
//
// Everything here is for kinds. The runtime's own side of the kernel table
// is internal to goffload: registration, sealing at Start, declare target
// variables, the goroutines that call kernel bodies. A kind never
// registers, seals or binds anything. It gets kernels only as the handles
// of an Image.
package plugin

import (
	"errors"
	"fmt"
)

// Ptr is an address in a device's memory. Plugins must accept any address
// inside a live allocation (base plus offset), not only the base.
type Ptr uint64

// Info describes a device.
type Info struct {
	Kind   string // device kind, as GOFFLOAD_DEVICES names it: "host", "local", "tcp", "mpi", "cuda"
	Name   string // human-readable name
	Cores  int    // cores a kernel's parallel loop is split over
	Memory int64  // device memory in bytes (0 if unknown)
	Arch   string // architecture, e.g. "amd64"
	Host   string // host name of the machine the device is on
	PID    int    // process that serves the device (0 if not a process)
	// Serves is the kind of the device that a device process drives for
	// the host ("opencl" for local:1[opencl]); empty where the device is
	// the process's own CPUs, or not a process at all.
	Serves string
}

// Device is one device of a kind. All methods are safe for concurrent use.
type Device interface {
	// Info describes the device.
	Info() Info
	// Load makes the kernel image runnable on the device, which is device
	// number num of the program (what a kernel's context reports). It is
	// called once, before any launch.
	Load(img *Image, num int) error
	// Alloc allocates size bytes of device memory. A zero size is allowed and
	// returns a distinct address that holds no bytes.
	// The core calls Alloc when a task maps a buffer, in the goroutine that
	// creates the task. So it should not wait for the device where it can
	// avoid it. The remote kind, for one, numbers allocations itself and
	// tells the device in order with the operations that use them. A failure
	// there is reported by the first of those operations.
	Alloc(size int64) (Ptr, error)
	// Free releases an allocation by its base address.
	Free(p Ptr) error
	// NewQueue creates a queue of in-order operations.
	NewQueue() (Queue, error)
	// NewEvent creates an event, unrecorded.
	NewEvent() (Event, error)
	// Close releases the device and everything allocated on it.
	Close() error
}

// Queue is an ordered stream of operations on one device.
// Enqueueing methods return once the operation is accepted. Their errors
// report only bad arguments detected at once.
// An operation that fails later puts the queue in an error state.
// The operations after it are skipped, and events recorded after it carry
// the error. Synchronize returns the error and clears the state.
//
// Buffers passed to Submit and Retrieve must stay untouched until the queue
// has been synchronized, or an event recorded after them has fired.
//
// Host memory is read and written in queue order, as seen from every device.
// A Submit enqueued after a Wait reads the host memory once the wait is
// over, not when it was enqueued. An event recorded after a Retrieve fires
// only once the data is in host memory, for the host and for other devices
// waiting on it. Dependent tasks on different devices that pass data
// through host memory rely on this.
//
// A Queue is used by one goroutine at a time.
type Queue interface {
	// Submit copies len(src) bytes from host memory to the device at dst.
	Submit(dst Ptr, src []byte) error
	// Retrieve copies len(dst) bytes from the device at src to host memory.
	Retrieve(dst []byte, src Ptr) error
	// Launch runs kernel k of the loaded image with args, one per parameter.
	Launch(k Kernel, args []Arg) error
	// Record makes ev fire when every operation enqueued before it is done.
	Record(ev Event) error
	// Wait holds back the operations after it until ev has fired.
	// ev is an event of this queue's device, or one that the device's
	// ForeignEventWaiter.CanWait accepted. The core asks CanWait first, and
	// waits on the host for any other event. Wait refuses any other event
	// with an error wrapping ErrUnsupported.
	Wait(ev Event) error
	// Synchronize blocks until every enqueued operation is done and returns
	// the first error since the last Synchronize.
	Synchronize() error
	// Query reports whether every enqueued operation is done, without
	// blocking. Once it reports true, it also returns and clears the error
	// state, like Synchronize.
	Query() (done bool, err error)
	// Close releases the queue. It synchronizes first.
	Close() error
}

// Event marks a point in a queue.
type Event interface {
	// Synchronize blocks until the event has fired and returns the error it
	// carries, if the operations before it failed. An event that was never
	// recorded returns ErrNotRecorded.
	Synchronize() error
	// Query reports whether the event has fired, and its error if so.
	Query() (fired bool, err error)
	// Close releases the event. Waits already enqueued on it still work.
	Close() error
}

// Exchanger is implemented by queues that copy device memory themselves,
// within their device or to another device, without the host in between.
// Exchange copies size bytes from src on this queue's device to dstPtr on
// dst, in queue order; dst may be this device. For a dst it cannot reach,
// it returns an error wrapping ErrUnsupported at once. The core then stages
// the copy through host memory, as it does for queues that do not
// implement Exchanger.
type Exchanger interface {
	Exchange(dst Device, dstPtr, src Ptr, size int64) error
}

// ForeignEventWaiter is implemented by devices whose queues can wait on
// events of other devices themselves, without the host in between.
// CanWait reports whether Queue.Wait accepts ev.
type ForeignEventWaiter interface {
	CanWait(ev Event) bool
}

// LostReporter is implemented by devices that can be lost (a device process
// that dies, a link that breaks). Lost returns why the device stopped
// working, an error wrapping ErrDeviceLost; nil while it works.
type LostReporter interface {
	Lost() error
}

// KernelChecker is implemented by devices that cannot launch every kernel
// of the image; a GPU needs the kernel's code in its format.
// CanLaunch returns nil if the device can launch k, else why not.
// The runtime asks before it places a task there itself (offload.Any).
// Devices that run every kernel's Go body need not implement it.
type KernelChecker interface {
	CanLaunch(k Kernel) error
}

// Arg is one kernel argument: a scalar, or a slice of device memory.
type Arg struct {
	// Scalar holds the value of a scalar parameter, of the parameter's type.
	Scalar any
	// Ptr and Len describe a slice parameter: Len elements at Ptr.
	Ptr Ptr
	Len int
}

// Errors that plugins return, wrapped with detail; compare with errors.Is.
var (
	// ErrUnsupported: the device cannot do this directly.
	ErrUnsupported = errors.New("not supported by this device")
	// ErrBadPointer: an address that is not inside a live allocation, or a
	// range that runs past the end of one.
	ErrBadPointer = errors.New("invalid device pointer")
	// ErrBadHandle: a queue or event that is closed or not of this device.
	ErrBadHandle = errors.New("invalid handle")
	// ErrNotRecorded: an event that was never recorded.
	ErrNotRecorded = errors.New("event not recorded")
	// ErrOutOfMemory: the device has not enough free memory.
	ErrOutOfMemory = errors.New("out of device memory")
	// ErrKernelFailed: a kernel failed on the device (for example it panicked).
	ErrKernelFailed = errors.New("kernel failed")
	// ErrBadKernel: a kernel or argument list that the image does not match.
	ErrBadKernel = errors.New("invalid kernel launch")
	// ErrSkipped: an operation skipped because an earlier one in its queue
	// failed.
	ErrSkipped = errors.New("skipped after an earlier failure in the queue")
	// ErrDeviceLost: the device stopped working (its process died, the link
	// broke).
	ErrDeviceLost = errors.New("device lost")
	// ErrBadSpec: a GOFFLOAD_DEVICES item whose argument is malformed. Start
	// refuses it under every offload policy, unlike a device that is
	// well named but cannot be reached.
	ErrBadSpec = errors.New("malformed device spec")
	// ErrKindEnded: the kind's devices were ended for good in this
	// process (MPI, finalized by Stop: an MPI program cannot start it
	// again). Open returns it, wrapped, and Start refuses it under every
	// offload policy: falling back to the initial device would run the
	// work meant for the devices on the host without a word.
	ErrKindEnded = errors.New("the device kind was ended for good in this process")
	// ErrNoDevices: the kind found no devices, for the reason the error
	// gives (no driver installed, no GPU). Discover returns it, wrapped,
	// instead of an empty list when the reason is worth telling: the core
	// writes it to the info output (GOFFLOAD_INFO=offload) and goes on
	// without the kind, under every offload policy. Open returns it for a
	// spec that names all the devices of the kind ("cuda") when there are
	// none: the spec then gives no devices, an error at Start only under
	// OMP_TARGET_OFFLOAD=MANDATORY. (An Open that fails for a spec naming
	// one device returns another error: the core keeps the device's number
	// as an unavailable device.)
	ErrNoDevices = errors.New("no devices")
)

// Kind is a registered device kind.
type Kind struct {
	// Name is the spec scheme of GOFFLOAD_DEVICES that selects this kind
	// ("host" in "host:2").
	Name string
	// Open opens the devices a spec names; arg is what follows the scheme
	// ("2" in "host:2", "h:p" in "tcp://h:p"), empty if nothing follows.
	Open func(arg string) ([]Device, error)
	// Discover, if set, opens the devices this kind finds by itself; it is
	// used when GOFFLOAD_DEVICES is unset. No devices is not an error: an
	// empty list, or an error wrapping ErrNoDevices that says why.
	Discover func() ([]Device, error)
	// Sole, if set and true, makes discovery open this kind alone (MPI
	// under an MPI launcher: the job's ranks are the devices).
	Sole func() bool
	// Order sorts kinds for discovery: lower first (GPUs before the host).
	Order int
	// Help is a one-line description of the spec syntax.
	Help string

	// The process hooks: what a kind does for the whole process, outside
	// any device. The runtime calls every registered kind's; a kind that
	// has nothing to do leaves them nil.

	// ServeIfDevice, if set, serves as one of the kind's devices and ends
	// the process when this process was started as one (a device process,
	// an MPI rank). In any other process it returns at once.
	// img is the program's kernel image as this process registered it:
	// what the device's kernels run. It is the same as the host's if both
	// run the same build. offload.Start and role.ServeDevice call
	// ServeIfDevice first, before anything else.
	ServeIfDevice func(img *Image)
	// Serving, if set, reports whether this process serves as one of the
	// kind's devices. Code running here is then a kernel, not the program's
	// host side, and the runtime's errors say so.
	Serving func() bool
	// Finish, if set, ends what the kind holds for the whole process once
	// the runtime has stopped (MPI, which a process finalizes once).
	// offload.Stop calls it, after every device has closed.
	Finish func() error
}

var kinds = map[string]*Kind{}

// RegisterKind makes a device kind available. It panics if the name is taken
// or empty, like database/sql.Register: that is a programming error.
func RegisterKind(k Kind) {
	if k.Name == "" || k.Open == nil {
		panic("plugin: RegisterKind needs a name and an Open function")
	}
	if _, dup := kinds[k.Name]; dup {
		panic(fmt.Sprintf("plugin: device kind %q registered twice", k.Name))
	}
	kinds[k.Name] = &k
}

// Kinds returns the registered kinds, sorted by Order then name.
func Kinds() []*Kind {
	out := make([]*Kind, 0, len(kinds))
	for _, k := range kinds {
		out = append(out, k)
	}
	for i := 1; i < len(out); i++ { // few kinds: insertion sort
		for j := i; j > 0 && less(out[j], out[j-1]); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

func less(a, b *Kind) bool {
	if a.Order != b.Order {
		return a.Order < b.Order
	}
	return a.Name < b.Name
}

// LookupKind returns the kind registered under name.
func LookupKind(name string) (*Kind, bool) {
	k, ok := kinds[name]
	return k, ok
}

// InlineQueue is implemented by queues that can run operations on the
// goroutine that enqueues them. While SetInline(true) holds, an operation
// enqueued on an idle queue may run before the enqueueing call returns.
// A Wait may then block that call. The core sets it for synchronous
// constructs, whose caller waits for the queue right after enqueueing.
// It clears it before the queue is used for anything else.
type InlineQueue interface {
	SetInline(on bool)
}

// FireNotifier is implemented by events that can run a function when they
// fire, so that the core needs no goroutine waiting on each.
// OnFire makes f run once the event has fired: on the goroutine that fires
// it, or at once if it has fired. So f must not block. The core calls
// OnFire only on recorded events.
type FireNotifier interface {
	OnFire(f func())
}
