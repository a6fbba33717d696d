package offload

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"unsafe"

	"github.com/goffload/offload/internal/anyrun"
	"github.com/goffload/offload/internal/core"
	"github.com/goffload/offload/plugin"
)

// A Dep is a depend clause: a buffer (or any object) that a task reads
// (DependIn) or writes (DependOut, DependInOut).
// Tasks are ordered by OpenMP's rules. A task that reads waits for the last
// task that wrote the same object. A task that writes waits for that task
// and for every task that read the object since. Tasks that only read the
// same object run concurrently.
//
// The object is the memory a slice covers (an array section), or what a
// pointer points to. Objects that overlap are ordered as if they were one,
// whatever their start addresses. This goes beyond OpenMP, which leaves
// overlapping sections that start at different addresses unspecified.
// A task that writes x[0:10] and one that reads x[5:15] are ordered, so a
// halo exchange written with the sections it moves is correct.
type Dep struct {
	dep core.Dep
	err error
}

func newDep(kind core.DepKind, x any) Dep {
	v := reflect.ValueOf(x)
	switch {
	case v.IsValid() && v.Kind() == reflect.Slice && v.Len() > 0:
		return sliceDep(kind, v.UnsafePointer(), v.Len(), v.Type().Elem())
	case v.IsValid() && v.Kind() == reflect.Pointer && !v.IsNil():
		return pointerDep(kind, v.UnsafePointer(), v.Type().Elem())
	}
	return Dep{err: core.Errorf("goffload: depend on a %T: %w: want a non-empty slice or a non-nil pointer", x, ErrBadArgument)}
}

// depOf is newDep without boxing x in an interface (which would cost a
// heap allocation per clause): a slice's or pointer's address read from
// x itself.
func depOf[T any](kind core.DepKind, x *T) Dep {
	switch t := reflect.TypeFor[T](); t.Kind() {
	case reflect.Slice:
		if h := (*sliceHeader)(unsafe.Pointer(x)); h.len > 0 {
			return sliceDep(kind, h.data, h.len, t.Elem())
		}
	case reflect.Pointer:
		if p := *(*unsafe.Pointer)(unsafe.Pointer(x)); p != nil {
			return pointerDep(kind, p, t.Elem())
		}
	}
	// An interface (T is any: x holds the object), or the error naming
	// x's type.
	return newDep(kind, *x)
}

func sliceDep(kind core.DepKind, p unsafe.Pointer, n int, elem reflect.Type) Dep {
	return Dep{dep: core.Dep{Kind: kind, Addr: uintptr(p), Size: uintptr(n) * elem.Size(), Keep: p}}
}

func pointerDep(kind core.DepKind, p unsafe.Pointer, elem reflect.Type) Dep {
	return Dep{dep: core.Dep{Kind: kind, Addr: uintptr(p), Size: elem.Size(), Keep: p}}
}

// DependIn says the task reads x (depend(in: x)): a non-empty slice or a
// non-nil pointer.
func DependIn[T any](x T) Dep { return depOf(core.DepIn, &x) }

// DependOut says the task writes x (depend(out: x)).
func DependOut[T any](x T) Dep { return depOf(core.DepOut, &x) }

// DependInOut says the task reads and writes x (depend(inout: x)).
func DependInOut[T any](x T) Dep { return depOf(core.DepInOut, &x) }

// A Task is a construct or piece of host work running asynchronously.
type Task struct {
	t   *core.Task
	err error // a task that could not be created
}

// Wait waits for the task and returns its error, the construct's own.
// A task may not run because a task it depends on failed. Its error then
// wraps ErrDependency and the error of the task that failed by itself.
// It names both tasks, once, however many tasks lie between them.
// Returning a failure reports it (see Taskwait).
func (t *Task) Wait() error { return t.WaitContext(context.Background()) }

// WaitContext is Wait that gives up when ctx is done, returning ctx's
// error. The task itself goes on.
func (t *Task) WaitContext(ctx context.Context) error {
	if ctx == nil {
		return nilCtx("Task.WaitContext")
	}
	if t.t == nil {
		reportedNotCreated(t)
		return t.err
	}
	err := t.t.Wait(ctx)
	if err == nil { // an Any-task's outputs, valid in the program's memory
		err = anyrun.AnyWaited(ctx, []*core.Task{t.t})
	}
	return err
}

// Done is closed when the task has completed.
func (t *Task) Done() <-chan struct{} {
	if t.t == nil {
		c := make(chan struct{})
		close(c)
		return c
	}
	return t.t.Done()
}

// ID numbers tasks in the order they were created.
// It is 0 for a task that could not be created.
func (t *Task) ID() uint64 {
	if t.t == nil {
		return 0
	}
	return t.t.ID
}

// ErrDependency is wrapped by the error of a task that did not run because
// a task it depends on failed.
var ErrDependency = core.ErrDependency

// ErrInTask is wrapped by the error of Taskwait or Stop called from inside a
// task, which would wait for the task calling it. Inside a task means in the
// function of Async.Go, or in a kernel of a task on the initial device.
// ErrInTask wraps ErrBadArgument.
// The runtime knows a task's goroutine by the task's frame on its stack.
// So a goroutine that a task starts is not inside it. That goroutine must
// not call Taskwait or Stop while the task waits for it.
var ErrInTask = core.ErrInTask

// Async makes constructs tasks: target nowait, with depend clauses.
// Create it with Device.Nowait or Nowait.
type Async struct {
	dev   Device
	deps  depList
	group *Group
	rec   *Recorder // the taskgraph recording or replaying it (Recorder.Nowait)
}

// Nowait returns the device's constructs as tasks: OpenMP's nowait with
// depend clauses. The tasks wait for the tasks deps name; the constructs
// return at once.
func (d Device) Nowait(deps ...Dep) Async { return Async{dev: d, deps: listOf(deps)} }

// A depList is an Async's depend clauses: up to three in the Async itself,
// so that Nowait's variadic slice does not escape to the heap (a task's
// clauses are one to three in most programs: in, in, out), more in a copy.
type depList struct {
	n    int
	inl  [3]Dep
	more []Dep // when n > len(inl)
}

// listOf holds deps, copied.
func listOf(deps []Dep) depList {
	l := depList{n: len(deps)}
	if len(deps) > len(l.inl) {
		l.more = append([]Dep(nil), deps...)
	} else {
		copy(l.inl[:], deps)
	}
	return l
}

// at is clause i.
func (l *depList) at(i int) Dep {
	if l.more != nil {
		return l.more[i]
	}
	return l.inl[i]
}

// Nowait is Default().Nowait(deps...).
func Nowait(deps ...Dep) Async { return Default().Nowait(deps...) }

// In adds the tasks a creates to g.
func (a Async) In(g *Group) Async { a.group = g; return a }

func (a Async) spawn(make func(cd *core.Device) (core.Op, error)) *Task {
	return a.spawnIn(nil, nil, make)
}

// spawnIn is spawn into box (see start), its core task into room (nil:
// rooms of their own).
func (a Async) spawnIn(box *depTask, room *core.TaskRoom, make func(cd *core.Device) (core.Op, error)) *Task {
	t := a.startIn(box, func(rt *core.Runtime, deps []core.Dep) (*core.Task, error) {
		cd, fallback, err := a.dev.resolve()
		if err != nil {
			return nil, err
		}
		op, err := make(cd)
		if err != nil {
			return nil, err
		}
		if room == nil {
			room = new(core.TaskRoom)
		}
		return rt.SpawnIn(room, cd, op, deps, fallback), nil
	})
	return t
}

// depTask is a Task with room for a few depend clauses: one allocation
// for both (start).
type depTask struct {
	Task
	deps [3]core.Dep
}

// launchTask is a depTask with room for a launch's core task: one
// allocation for a launch's records, with room for its lowered arguments
// beside it (a typed kernel's task has one for each; runTask three).
type launchTask struct {
	depTask
	room core.TaskRoom
}

// runTask is an untyped launch's records (Async.Run), with room for three
// lowered arguments.
type runTask struct {
	launchTask
	kargs [3]core.KernelArg
	pargs [3]plugin.Arg
}

func (a Async) start(spawn func(rt *core.Runtime, deps []core.Dep) (*core.Task, error)) *Task {
	return a.startIn(nil, spawn)
}

// startIn is start into box, a new task's own, or a new one if nil.
func (a Async) startIn(box *depTask, spawn func(rt *core.Runtime, deps []core.Dep) (*core.Task, error)) *Task {
	if a.rec != nil { // a recorder's: launches, copies and updates went to it, the rest is refused
		return a.rec.refuse()
	}
	if box == nil {
		box = new(depTask)
	}
	t := &box.Task
	rt, err := runtimeOrErr()
	if err == nil {
		var deps []core.Dep
		if a.deps.n <= len(box.deps) {
			deps = box.deps[:a.deps.n]
		} else {
			deps = make([]core.Dep, a.deps.n)
		}
		for i := range a.deps.n {
			d := a.deps.at(i)
			if d.err != nil {
				err = d.err
				break
			}
			deps[i] = d.dep
		}
		if err == nil {
			t.t, err = spawn(rt, deps)
		}
	}
	t.err = err
	if err != nil && rt != nil {
		noteNotCreated(rt, t)
	}
	if a.group != nil {
		a.group.Add(t)
	}
	return t
}

// Run runs kernel k as a task (target nowait); see Device.Run.
func (a Async) Run(k *Kernel, args ...any) *Task { return a.run(k, launchOpts{}, args) }

func (a Async) run(k *Kernel, o launchOpts, args []any) *Task {
	if a.rec != nil {
		return a.rec.launch(a, k, o, args)
	}
	if a.dev.IsAny() {
		return a.runAny(k, o, args)
	}
	t := new(runTask)
	return a.runIn(&t.launchTask, t.kargs[:], t.pargs[:], k, o, args)
}

// direct reports whether a's launches become tasks here (not a recorder's
// nodes, nor Any-tasks): those run takes into a box of the caller's
// (runIn).
func (a Async) direct() bool { return a.rec == nil && !a.dev.IsAny() }

// runIn is run of a direct Async into box, the new task's records, with
// kargs the room for its lowered arguments.
func (a Async) runIn(box *launchTask, kargs []core.KernelArg, pargs []plugin.Arg, k *Kernel, o launchOpts, args []any) *Task {
	o.kargs, o.pargs = kargs[:0], pargs
	return a.spawnIn(&box.depTask, &box.room, func(cd *core.Device) (core.Op, error) {
		op, _, _, err := a.targetOp(cd, k, o, args)
		return op, err
	})
}

// targetOp lowers the launch of k with args on cd, and returns the
// arguments and geometry it lowered them to.
func (a Async) targetOp(cd *core.Device, k *Kernel, o launchOpts, args []any) (core.Op, []core.KernelArg, plugin.Geometry, error) {
	if k == nil || k.k == nil {
		return core.Op{}, nil, plugin.Geometry{}, core.Errorf("goffload: %s: target: %w: nil kernel", cd.Label(), ErrBadArgument)
	}
	geo, err := a.dev.geometry()
	if err != nil {
		return core.Op{}, nil, geo, core.Errorf("goffload: %s: target %s: %w", cd.Label(), k.k.Name(), err)
	}
	kargs, err := handArgs(cd, k, a.dev.dm, o, args)
	if err != nil {
		return core.Op{}, nil, geo, err
	}
	op := core.TargetOpWith(k.k, kargs, geo)
	op.ArgRoom = o.pargs
	return op, kargs, geo, nil
}

func (a Async) data(op func([]core.MapItem) core.Op, maps []Map) *Task {
	return a.spawn(func(*core.Device) (core.Op, error) {
		its, err := items(maps)
		if err != nil {
			return core.Op{}, err
		}
		return op(its), nil
	})
}

// EnterData maps buffers as a task (target enter data nowait).
func (a Async) EnterData(maps ...Map) *Task { return a.data(core.EnterDataOp, maps) }

// ExitData unmaps buffers as a task (target exit data nowait).
// The copies back are done when the task completes.
func (a Async) ExitData(maps ...Map) *Task { return a.data(core.ExitDataOp, maps) }

// Update copies mapped buffers as a task (target update nowait).
func (a Async) Update(maps ...Map) *Task {
	if a.rec != nil {
		return a.rec.update(a, maps)
	}
	return a.data(func(its []core.MapItem) core.Op {
		for i := range its {
			its[i].Exit = false
		}
		return core.UpdateOp(its)
	}, maps)
}

// Memcpy copies n bytes from src to dst as a task.
// It runs on the queue of the source's device, or of the destination's if
// the source is host memory. The device of a is not used.
func (a Async) Memcpy(dst, src DevicePtr, n int64) *Task {
	if a.rec != nil {
		return a.rec.memcpy(a, dst, src, n)
	}
	ct := new(copyTask)
	return a.startIn(&ct.depTask, func(rt *core.Runtime, deps []core.Dep) (*core.Task, error) {
		if n < 0 {
			return nil, core.Errorf("goffload: omp_target_memcpy: %w: negative size %d", ErrBadArgument, n)
		}
		dl, err := loc(dst, n)
		if err != nil {
			return nil, err
		}
		sl, err := loc(src, n)
		if err != nil {
			return nil, err
		}
		cd, op := core.MemcpyOp(dl, sl, n)
		if cd == nil {
			return rt.SpawnHost("omp_target_memcpy", func() error { return core.Memcpy(dl, sl, n) }, deps), nil
		}
		return rt.SpawnIn(&ct.room, cd, op, deps, false), nil
	})
}

// copyTask is a depTask with room for a copy's core task: one allocation
// for a copy's records (Memcpy).
type copyTask struct {
	depTask
	room core.TaskRoom
}

// Go runs fn on the host as a task in the same dependence graph as the
// constructs. The device of a is not used. A task that depends on a device
// task waits for it on the host. Device tasks that depend on fn's task wait
// for fn.
func (a Async) Go(name string, fn func() error) *Task {
	return a.start(func(rt *core.Runtime, deps []core.Dep) (*core.Task, error) {
		return anyrun.SpawnHostAny(rt, name, fn, deps)
	})
}

// Taskwait waits for every task created so far. It also waits for
// synchronous constructs going on in the background after their context was
// done (see Device.WithContext). It returns the first error in creation
// order among those tasks and the failures not reported yet, or ctx's error
// if ctx is done first. A task that could not be created (its arguments
// refused) is among them until its Wait or its group's Wait returns its
// error.
//
// A task that fails makes fail every task that depends on it and was created
// while the failed task was still in an object's dependence history (its
// last writer, or a reader since). Their errors wrap ErrDependency and the
// failed task's error. A failure is reported when it is returned by
// Taskwait, Group.Wait, or the Wait of the failed task or of a task it made
// fail. A reported failure is forgotten: Taskwait does not return it again.
// Tasks created afterwards on the same objects run normally; tasks created
// before still fail.
//
// Called from inside a task, Taskwait returns an error wrapping ErrInTask.
func Taskwait(ctx context.Context) error {
	if core.InTask() { // first: inside a kernel of a device process too, where no runtime is
		return core.Errorf("goffload: taskwait: %w", ErrInTask)
	}
	if ctx == nil {
		return nilCtx("Taskwait")
	}
	rt, rerr := runtimeOrErr()
	if rerr != nil {
		return rerr // this package's error
	}
	err := rt.Taskwait(ctx)
	if cerr := takeNotCreated(rt); cerr != nil {
		err = errors.Join(cerr, err)
	}
	if err == nil || ctx.Err() == nil {
		// The Any-tasks' buffers back to the program: host copies valid,
		// device copies freed.
		if herr := anyrun.AnyHandback(rt, ctx, true); err == nil {
			err = herr
		} else if herr != nil {
			err = errors.Join(err, herr)
		}
	}
	return err
}

// A Group is a set of tasks waited for together (OpenMP's taskgroup).
// The zero value is an empty group.
type Group struct {
	mu    sync.Mutex
	tasks []*Task
}

// Add adds tasks to g.
func (g *Group) Add(ts ...*Task) {
	g.mu.Lock()
	g.tasks = append(g.tasks, ts...)
	g.mu.Unlock()
}

// Wait waits for every task of g to finish. It returns the first error among
// them in creation order, or ctx's error if ctx is done first. It reports
// their failures (see Taskwait). The tasks it waited for leave the
// group. After a Wait that ctx cut short they stay in it, so the next Wait
// waits for them. Wait on a nil *Group returns an error wrapping
// ErrBadArgument.
func (g *Group) Wait(ctx context.Context) error {
	if g == nil {
		return core.Errorf("goffload: Group.Wait: %w: nil *Group (declare one, var g offload.Group, and use &g)", ErrBadArgument)
	}
	if ctx == nil {
		return nilCtx("Group.Wait")
	}
	g.mu.Lock()
	ts := slices.Clone(g.tasks)
	g.mu.Unlock()
	defer func() {
		waited := make(map[*Task]bool, len(ts))
		for _, t := range ts {
			select {
			case <-t.Done():
				waited[t] = true
			default:
				return // cut short: they all stay
			}
		}
		g.mu.Lock()
		g.tasks = slices.DeleteFunc(g.tasks, func(t *Task) bool { return waited[t] })
		g.mu.Unlock()
	}()
	var created []*core.Task
	var first error
	for _, t := range ts {
		if t.t == nil {
			if first == nil {
				first = t.err
			}
			reportedNotCreated(t)
			continue
		}
		created = append(created, t.t)
	}
	err := core.WaitAll(ctx, created)
	if first != nil && (err == nil || ctx.Err() == nil) {
		return first
	}
	if err == nil { // the Any-tasks' outputs, valid in the program's memory
		err = anyrun.AnyWaited(ctx, created)
	}
	return err
}

// A task that could not be created carries its error: its arguments were
// refused, a device was not there, or an Any-task's section was refused.
// Its Wait returns the error. Taskwait returns it too, once, unless a Wait
// or a Group's Wait reported it first. A program that waits only with
// Taskwait must not read results that a refused task never wrote.
// Only the first such failure since the last report is kept, with a count
// of the others. A program that never waits does not make the record grow.
var notCreated struct {
	mu     sync.Mutex
	rt     *core.Runtime // the runtime the record is of
	first  *Task         // the first task not created and not reported
	others int           // how many more since
}

// noteNotCreated records t, which rt could not create.
func noteNotCreated(rt *core.Runtime, t *Task) {
	nc := &notCreated
	nc.mu.Lock()
	defer nc.mu.Unlock()
	if nc.rt != rt || nc.first == nil {
		nc.rt, nc.first, nc.others = rt, t, 0
		return
	}
	nc.others++
}

// reportedNotCreated records that t's error was reported (its Wait, or a
// Group's Wait, returned it).
func reportedNotCreated(t *Task) {
	nc := &notCreated
	nc.mu.Lock()
	if nc.first == t {
		nc.first, nc.others = nil, 0
	}
	nc.mu.Unlock()
}

// takeNotCreated returns the error of the first task rt could not create
// that was not reported yet (nil if none) and forgets it, for Taskwait.
func takeNotCreated(rt *core.Runtime) error {
	nc := &notCreated
	nc.mu.Lock()
	defer nc.mu.Unlock()
	if nc.rt != rt || nc.first == nil {
		return nil
	}
	err := nc.first.err
	if nc.others > 0 {
		err = fmt.Errorf("%w (and %d more could not be created)", err, nc.others)
	}
	nc.first, nc.others = nil, 0
	return err
}
