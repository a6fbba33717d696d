package offload

import (
	"context"

	"github.com/goffload/offload/internal/anyrun"
	"github.com/goffload/offload/internal/core"
	"github.com/goffload/offload/internal/mapping"
)

// anyNum is the device number Any stands for: no device has it.
const anyNum = -1 << 30

// Any returns the device that means "a device the runtime picks".
// It is for target tasks: Any().Nowait(deps...) with Run or a typed
// kernel's Nowait, and Any().Run for a synchronous launch.
// The runtime places each such task (an Any-task) when it is created.
// It picks the device where the task is expected to finish first.
// It weighs the work already placed there, the copies the task's inputs
// need there, and the kernel's time there.
// It learns the kernel's time per kernel, per device and per size from the
// tasks that ran (see docs/tasks.md).
//
// The data follows the tasks.
// The kernel's parameters say what it does with each buffer: In, Out,
// InOut or Scratch, and a bare slice as the Defaultmap says.
// The runtime keeps copies of the buffers on the devices that use them.
// It copies a task's inputs from the nearest valid copy, device to device
// where the kinds allow, and makes the task's outputs the one valid copy.
// An Any-task also depends on its buffers as its parameters say (in for In,
// inout for the others), beside its own depend clauses.
// The program's own copy of a buffer is valid again when it could look at it:
//   - after Taskwait, which also frees the device copies and gives the
//     buffers back to the program;
//   - after a task's Wait or its group's Wait, for what those tasks wrote;
//   - after Any().Update(From(x)).
//
// Until Taskwait gives them back, the buffers Any-tasks use belong to the
// runtime. A construct placed by hand that maps one of them fails rather
// than read a stale copy; its error wraps ErrBadMap and says so.
// The first section of a buffer that an Any-task uses is the extent the
// runtime tracks. Later sections must lie inside it or not overlap it
// (two halves, say). A section that partly overlaps one in use is refused
// the same way. Any().EnterData(To(x)) names all of x first, so that its
// sections may then be any parts of it. For example: a task per band, then
// tasks that read rows across the bands.
//
// A kernel of an Any-task should compute its outputs from its inputs only.
// When a device is lost, its Any-tasks run again on the devices left, and
// their dependents wait for them. Their inputs are read from a device that
// still holds them, or recomputed from the tasks that wrote them.
// Recomputing can go back to each buffer's first version, which the runtime
// keeps until Taskwait. See docs/tasks.md.
// Kernel.Once opts a kernel out, and GOFFLOAD_ANY_RERUN=0 the whole runtime.
func Any() Device { return Device{num: anyNum} }

// IsAny reports whether d is Any().
func (d Device) IsAny() bool { return d.num == anyNum }

// runAny places kernel k's task with args and makes it, with the copies
// its inputs need (core.Runtime.AnyTarget).
func (a Async) runAny(k *Kernel, o launchOpts, args []any) *Task {
	rt, err := runtimeOrErr()
	if err != nil {
		return a.failed(err)
	}
	if k == nil || k.k == nil {
		return a.failed(core.Errorf("goffload: Any(): target: %w: nil kernel", ErrBadArgument))
	}
	if len(rt.Devices) == 0 { // nothing to place on: the initial device, as for On(0)
		a.dev = Device{num: 0, ctx: a.dev.ctx, dm: a.dev.dm, geo: a.dev.geo, clauseErr: a.dev.clauseErr}
		return a.run(k, o, args)
	}
	kargs, err := kernelArgs(rt.Initial, k, a.dev.dm, o, args)
	if err != nil {
		return a.failed(core.Errorf("goffload: Any(): %w", err))
	}
	geo, err := a.dev.geometry()
	if err != nil {
		return a.failed(core.Errorf("goffload: Any(): target %s%s: %w", k.k.Name(), k.k.Describe(), err))
	}
	return a.start(func(rt *core.Runtime, deps []core.Dep) (*core.Task, error) {
		return anyrun.AnyTarget(rt, anyrun.AnyLaunch{Kernel: k.k, Args: kargs, Geo: geo, Deps: deps, Once: k.once,
			Plain: len(kargs) == len(args) && len(o.with) == 0})
	})
}

// anyEnterData is Any().EnterData: each To or Alloc clause names a whole
// buffer as Any-tasks' (core.Runtime.AnyEnterData).
func anyEnterData(maps []Map) error {
	rt, err := runtimeOrErr()
	if err != nil {
		return err
	}
	cs := make([]anyrun.AnyClause, len(maps))
	for i, m := range maps {
		if m.err != nil {
			return m.err
		}
		if !m.slice.IsValid() || m.item.Type&^(mapping.MapTo|mapping.MapImplicit) != 0 {
			return core.Errorf("goffload: Any(): enter data: clause %d: %w: Any() takes To and Alloc clauses here (whole buffers for Any-tasks; the runtime copies what tasks need itself)", i, ErrBadMap)
		}
		cs[i] = anyrun.AnyClause{Slice: m.slice, Buf: m.item.Buf}
	}
	return anyrun.AnyEnterData(rt, cs)
}

// anyUpdate is Any().Update: From clauses make the host's copies valid.
func anyUpdate(maps []Map) error {
	rt, err := runtimeOrErr()
	if err != nil {
		return err
	}
	bufs := make([]mapping.Buf, len(maps))
	for i, m := range maps {
		if m.err != nil {
			return m.err
		}
		if !m.slice.IsValid() || m.item.Type&mapping.MapTo != 0 || m.item.Type&mapping.MapFrom == 0 {
			return core.Errorf("goffload: Any(): update: clause %d: %w: Any() takes From clauses only (the runtime copies the inputs of Any-tasks itself)", i, ErrBadMap)
		}
		bufs[i] = m.item.Buf
	}
	return anyrun.AnyUpdate(rt, context.Background(), bufs)
}

// anyOwns refuses a hand-placed construct's clause on b while Any-tasks
// use it (core.Runtime.AnyOwns).
func anyOwns(b mapping.Buf) error {
	if rt := current.Load(); rt != nil {
		return anyrun.AnyOwns(rt, b)
	}
	return nil
}

// handArgs is kernelArgs for a construct placed by hand: a buffer that
// Any-tasks use is refused (anyOwns).
func handArgs(cd *core.Device, kk *Kernel, dm defaultmap, o launchOpts, args []any) ([]core.KernelArg, error) {
	kargs, err := kernelArgs(cd, kk, dm, o, args)
	for _, a := range kargs {
		if err == nil {
			err = anyOwns(a.Map.Buf)
		}
	}
	return kargs, err
}
