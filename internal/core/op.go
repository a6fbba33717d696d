package core

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/goffload/offload/internal/config"
	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
)

// KernelArg is one argument of a target region.
type KernelArg struct {
	// Scalar is the value of a scalar parameter. Its name for the info
	// output (Named; empty: argI) is Map.Buf.Name: a scalar has no map
	// clause, and a launch's records keep one string less an argument.
	Scalar any
	// Slice is the host slice of a slice parameter, and Map its map clause.
	Slice reflect.Value
	Map   MapItem
	// DevPtr says the slice is device memory at Ptr already (OpenMP's
	// is_device_ptr); Slice then holds that memory if it is host memory.
	DevPtr bool
	Ptr    plugin.Ptr
	Len    int
}

// TargetOp is the target construct: kernel k with args.
func TargetOp(k *entries.Kernel, args []KernelArg) Op {
	return TargetOpWith(k, args, plugin.Geometry{})
}

// TargetOpWith is the target construct with the launch geometry g (the
// num_teams and thread_limit clauses; zero: the device chooses). The Op
// holds k, args and g itself: making it allocates nothing.
func TargetOpWith(k *entries.Kernel, args []KernelArg, g plugin.Geometry) Op {
	return Op{Name: k.OpName(), kernel: k, kargs: args, geo: g}
}

// enqueue enqueues op's work on w: its target region, or its Enqueue.
func (op *Op) enqueue(d *Device, w *work) {
	switch {
	case op.x2x.dst != nil:
		d.enqueueExchange(w, op.x2x)
		return
	case op.kernel == nil:
		op.Enqueue(d, w)
		return
	}
	if d.log.On(config.InfoKernelArgs) {
		d.logArgs(w.task, op.kernel, op.kargs)
	}
	d.target(w, op.kernel, op.kargs, op.geo)
}

// hasInitial reports whether op does something on the initial device.
func (op *Op) hasInitial() bool { return op.kernel != nil || op.Initial != nil }

// initial runs op on the initial device: its kernel, or its Initial.
func (op *Op) initial(d *Device, task uint64, fallback bool, stop *plugin.StopSignal) error {
	if op.kernel == nil {
		return op.Initial(d, task, fallback, stop)
	}
	if d.log.On(config.InfoKernelArgs) {
		d.logArgs(task, op.kernel, op.kargs)
	}
	return d.runInitial(task, op.kernel, op.kargs, fallback, stop)
}

// EnterData maps buffers: target enter data.
func (d *Device) EnterData(ctx context.Context, maps []MapItem) error {
	return d.Run(ctx, EnterDataOp(maps), false)
}

// ExitData unmaps buffers: target exit data.
func (d *Device) ExitData(ctx context.Context, maps []MapItem) error {
	return d.Run(ctx, ExitDataOp(maps), false)
}

// Update copies present buffers: target update.
func (d *Device) Update(ctx context.Context, maps []MapItem) error {
	return d.Run(ctx, UpdateOp(maps), false)
}

// Target runs kernel k with args on d: the target construct.
func (d *Device) Target(ctx context.Context, k *entries.Kernel, args []KernelArg, fallback bool) error {
	return d.Run(ctx, TargetOp(k, args), fallback)
}

// Op is a construct lowered for one device: what it enqueues on a queue of
// the device, or what it does on the initial device.
type Op struct {
	// Name is the construct as OpenMP spells it, for messages.
	Name string
	// Maps are the clauses to check against the construct, if any.
	Maps []MapItem
	// Enqueue enqueues the construct's work on w.
	Enqueue func(d *Device, w *work)
	// Initial runs the construct on the initial device; nil means there
	// is nothing to do there (data constructs: host memory is the data).
	Initial func(d *Device, task uint64, fallback bool, stop *plugin.StopSignal) error
	// Done, if set, is called once the task Spawn makes of the construct
	// has completed, with its error, on the goroutine that completed it.
	// It must not block. The runtime's placement of Any-tasks learns from
	// it.
	//
	// ready is when the last of the task's predecessors completed: the
	// task could not start before. It is zero if none did, or none had a
	// recovery. The predecessors' completion is kept only for tasks with
	// one (Recover).
	Done func(err error, ready time.Time)
	// Recover, if set, is called instead of completing the task Spawn
	// makes of the construct when it fails. It is called on a goroutine of
	// its own, once the task's predecessors are done, with the task's
	// error. The task completes with what it returns: the error itself
	// where it can do nothing. Its dependents wait for it meanwhile.
	// The runtime's placement of Any-tasks re-runs a lost device's work
	// elsewhere with it. used says whether a task enqueued on a device
	// behind the task's event ran well. What the task did may have reached
	// that task, though the task's completion never reached the host. It is called at most
	// once per task.
	Recover func(err error, used bool) error
	// ArgRoom, if its capacity is enough, is where a target region's
	// arguments are lowered for its launch: the task's records' room, so
	// that neither the launch nor a copy's work carries room of its own.
	// It must stay untouched until the task completes.
	ArgRoom []plugin.Arg

	// A target region (TargetOpWith) in place of Enqueue and Initial: its
	// kernel, arguments and geometry.
	kernel *entries.Kernel
	kargs  []KernelArg
	geo    plugin.Geometry
	// A device-to-device copy (MemcpyOp) in place of Enqueue, if x2x.dst
	// is set.
	x2x exchangeArgs
}

// check validates op's clauses on d.
func (op Op) check(d *Device) error {
	if op.Maps == nil {
		return nil
	}
	return d.CheckMaps(op.Name, op.Maps)
}

// Errors of the runtime; every error it returns wraps one of these or a
// plugin error, so callers can tell them apart with errors.Is.
var (
	ErrNotStarted  = errors.New("runtime not started")
	ErrNoDevice    = errors.New("no such device")
	ErrMandatory   = errors.New("offload is mandatory and the device is unavailable")
	ErrUnavailable = errors.New("the device is unavailable; OMP_TARGET_OFFLOAD is not MANDATORY, so its work runs on the initial device")
	ErrNotPresent  = errors.New("not present on the device")
	ErrExtension   = errors.New("explicit extension not allowed")
	ErrBadMap      = errors.New("invalid map clause")
	ErrBadArgument = errors.New("invalid argument")
)

// MapError is the error of a map clause or data routine that cannot be
// done (package plugin declares it, for package offload to share).
type MapError = plugin.MapError

// unnamed is how errors show a buffer without a name (the info output says
// Name=unknown, as libomptarget's does).
const unnamed = "unnamed buffer"

// QuoteName is how errors show a buffer's name (plugin.QuoteName).
var QuoteName = plugin.QuoteName

// mappingName shows a mapping's name inside an error's detail: "Name=x",
// or "unnamed buffer".
func mappingName(n string) string {
	if n == "" {
		return unnamed
	}
	return "Name=" + n
}

// reason is a MapError's cause in its own words, where the sentinel's text
// would say something else (an update "extends" nothing); errors.Is still
// matches the sentinel.
type reason struct {
	text string
	is   error
}

func (r *reason) Error() string { return r.text }
func (r *reason) Unwrap() error { return r.is }

// Errorf is fmt.Errorf for the runtime's messages, which start with
// "goffload: ": each error among args is quoted (Quote), so that the
// message says it once.
func Errorf(format string, args ...any) error {
	for i, a := range args {
		if err, ok := a.(error); ok {
			args[i] = Quote(err)
		}
	}
	return fmt.Errorf(format, args...)
}

// errPrefix starts the runtime's error messages.
const errPrefix = "goffload: "

// Quote is err as the cause inside another of the runtime's errors: the
// same error, whose text drops its own leading "goffload: ", so that the
// message says it once, at its start.
func Quote(err error) error {
	if err == nil || !strings.HasPrefix(err.Error(), errPrefix) {
		return err
	}
	return quoted{err}
}

// quoted is an error quoted inside another (Quote).
type quoted struct{ err error }

func (q quoted) Error() string { return strings.TrimPrefix(q.err.Error(), errPrefix) }
func (q quoted) Unwrap() error { return q.err }
