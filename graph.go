package offload

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/goffload/offload/internal/anyrun"
	"github.com/goffload/offload/internal/config"
	"github.com/goffload/offload/internal/core"
	"github.com/goffload/offload/internal/mapping"
	"github.com/goffload/offload/plugin"
)

// ErrGraphChanged is wrapped by the error of a Taskgraph's replay whose
// function made other tasks than the ones recorded (another kernel,
// device, buffer, map clause or depend clause, or another number of
// tasks), or whose buffers were unmapped or mapped again since the
// record. It wraps ErrBadArgument. Nothing of such a replay runs; Reset
// records the graph again.
var ErrGraphChanged = core.ErrGraphChanged

// A Taskgraph is a function's tasks, recorded the first time it runs and
// replayed after: OpenMP 6.0's taskgraph construct. The record runs the
// tasks as usual and keeps what they were lowered to — each kernel, its
// device, its buffers' device addresses, the edges its depend clauses make
// — and a replay runs the same graph again on the same buffers as one
// task, with no dependence analysis, present-table plan or lowering per
// task.
//
// Between replays, scalar arguments and the buffers' contents may change:
// each Run calls the function again, and the scalars its constructs pass
// are the replay's. The rest may not: the kernels, their devices, the
// buffers (address and length) and their map clauses, the depend clauses
// and the number of tasks, and the mappings the buffers lie in. A replay
// that breaks a rule fails with ErrGraphChanged, and none of its tasks
// runs; Reset records the graph again (graph_reset). Replay replays the
// last Run's scalars without calling the function.
//
// A recorded task is a kernel launch (Async.Run, a typed kernel's Nowait),
// a copy (Async.Memcpy, CopyNowait) or an update (Async.Update) on a
// device that is not the initial one, whose buffers are mapped before the
// graph is (Data, EnterData) without the always modifier, made with an
// Async of the Recorder, or a launch on Any(): it is placed at the record,
// and replays reissue its device and copies while its buffers' valid
// copies are where the record found them; else Run records again and
// Replay fails with ErrGraphChanged (docs/tasks.md). Struct arguments,
// EnterData, ExitData and Go are refused, with an error naming what was
// refused. A Taskgraph is for one goroutine at a time: a Run or Replay
// while its function runs, from it or from another goroutine, is an error.
type Taskgraph struct {
	fn   func(r *Recorder) error
	inFn atomic.Bool // fn is running: a Run or Replay from it would wait for itself
	mu   sync.Mutex
	g    *core.Graph   // nil until recorded
	rt   *core.Runtime // the runtime g was recorded under
	// nodes are the recorded constructs, which a replay's are checked
	// against; rec is the recorder each Run hands fn.
	nodes []recNode
	rec   Recorder
	args  []plugin.Arg // the last Run's arguments, which Replay replays
	// records counts the records made (tests: a Run that re-recorded).
	records int
}

// NewTaskgraph returns the graph of the tasks fn makes, to record at its
// first Run (taskgraph graph_id). fn makes tasks with Asyncs of r.
func NewTaskgraph(fn func(r *Recorder) error) *Taskgraph { return &Taskgraph{fn: fn} }

// A Recorder is what a Taskgraph's function makes its tasks with.
type Recorder struct {
	tg     *Taskgraph
	active bool // inside fn
	replay bool
	i      int   // the next construct
	err    error // the first construct that broke a rule
	task   *Task // what each construct returns: the Run's own
	// At a record: the graph and the tasks made. At a replay: the
	// arguments the nodes are replayed with.
	g     *core.Graph
	tasks []*core.Task
	args  []plugin.Arg
	// rooms are where a replay's typed launches put their arguments, one
	// per kernel, reused construct after construct (recRoom): a replay
	// checks them and keeps only scalars.
	rooms []recRoomOf
}

// recRoomOf is a kernel's room in a Recorder.
type recRoomOf struct {
	k    *Kernel
	room any
}

// replaying returns a's Recorder if a's constructs are a replay's, inside
// the graph's function; else nil.
func (a Async) replaying() *Recorder {
	if r := a.rec; r != nil && r.active && r.replay {
		return r
	}
	return nil
}

// recRoom returns r's room for k's arguments, a T, made at k's first
// construct of the Run. A replay's construct needs its arguments only until
// it returns, so the next construct of k takes the same room.
func recRoom[T any](r *Recorder, k *Kernel) *T {
	for i := range r.rooms {
		if r.rooms[i].k == k {
			if t, ok := r.rooms[i].room.(*T); ok {
				return t
			}
		}
	}
	t := new(T)
	r.rooms = append(r.rooms, recRoomOf{k, t})
	return t
}

// Nowait returns d's constructs as tasks of the graph, with depend clauses
// deps: Device.Nowait inside a Taskgraph's function.
func (r *Recorder) Nowait(d Device, deps ...Dep) Async {
	return Async{dev: d, deps: listOf(deps), rec: r}
}

// recNode is a recorded construct: a launch of k, an update or a copy.
type recNode struct {
	k      *Kernel // nil for an update or a copy
	update bool
	num    int
	dm     defaultmap
	geo    plugin.Geometry
	deps   []core.Dep
	keys   []argKey // a launch's arguments
	with   []argKey // its With clauses
	// A copy's.
	dst, src DevicePtr
	n        int64
	gi       int // a launch's node in the core graph (an Any-task's copies come before it)
}

// argKey is what a replay's argument must match: its type, and for a
// buffer its memory, length and map type (or device pointer).
type argKey struct {
	typ    reflect.Type
	scalar bool
	ptr    unsafe.Pointer
	n      int
	mt     mapping.MapType
	dp     DevicePtr
}

var devicePtrType = reflect.TypeFor[DevicePtr]()

// keyOf is a's key.
func keyOf(a any, scalar bool) argKey {
	switch a := a.(type) {
	case Map:
		if !a.slice.IsValid() {
			return argKey{}
		}
		return argKey{typ: a.slice.Type(), ptr: a.slice.UnsafePointer(), n: a.slice.Len(), mt: a.item.Type}
	case DevicePtr:
		return argKey{typ: devicePtrType, dp: a}
	}
	v := reflect.ValueOf(a)
	if scalar || !v.IsValid() || v.Kind() != reflect.Slice {
		return argKey{typ: reflect.TypeOf(a), scalar: true}
	}
	return argKey{typ: v.Type(), ptr: v.UnsafePointer(), n: v.Len()}
}

// keyOfRef is keyOf(a, false), or the key of the slice a points to (ref).
func keyOfRef(a any, ref bool) argKey {
	if !ref {
		return keyOf(a, false)
	}
	v := reflect.ValueOf(a).Elem()
	return argKey{typ: v.Type(), ptr: v.UnsafePointer(), n: v.Len()}
}

// Reset makes the next Run record the graph again (graph_reset).
func (tg *Taskgraph) Reset() {
	tg.mu.Lock()
	tg.release()
	tg.g, tg.nodes = nil, nil
	tg.mu.Unlock()
}

// release lets the recorded graph's parts on devices go once its last
// replay is done: it is recorded again, or dropped.
func (tg *Taskgraph) release() {
	if tg.g != nil {
		tg.g.Release()
	}
}

// Recorded reports whether the graph is recorded: the next Run replays it.
func (tg *Taskgraph) Recorded() bool {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return tg.g != nil && tg.rt == current.Load()
}

// Run runs the graph's tasks as a task: at the first Run (or the first
// after Reset, or after the runtime was started again) it calls the
// function and records the tasks it makes, which run as usual, and the
// task completes when they all have; at the others it calls the function
// again, checks its constructs against the recorded ones, and replays the
// graph with their scalars. The task comes after the tasks that the
// graph's depend clauses name, and after the graph's last Run; tasks made
// later that name them come after it. Its error is the first a recorded
// task had (the record's wraps ErrDependency), or why the graph could not
// be recorded or replayed. Inside the function, each construct returns
// the Run's task, which is not to be waited for there.
func (tg *Taskgraph) Run() *Task {
	if tg.inFn.Load() {
		return Async{}.failed(errRunInFn)
	}
	tg.mu.Lock()
	defer tg.mu.Unlock()
	rt, err := runtimeOrErr()
	if err != nil {
		return Async{}.failed(err)
	}
	tg.inFn.Store(true)
	defer tg.inFn.Store(false)
	// A graph of Any-tasks whose buffers' valid copies are not where its
	// record found them is recorded again (graph_reset): its plan's
	// copies would be wrong.
	if tg.g != nil && tg.rt == rt && !anyrun.AnyStale(tg.g) {
		return tg.replay()
	}
	return tg.record(rt)
}

// errRunInFn is the error of a Run or Replay of a graph from its own
// function.
var errRunInFn = core.Errorf("goffload: taskgraph: %w: Run or Replay called from the graph's own function", ErrBadArgument)

// Replay runs the graph again as its last Run did, without calling the
// function: the same scalars, on the same buffers, whose contents may have
// changed; the mappings are checked as at each replay. It is the replay
// of CUDA Graphs' launch: no host work per task. A graph not recorded
// (under this runtime) is an error; Run records it.
func (tg *Taskgraph) Replay() *Task {
	if tg.inFn.Load() {
		return Async{}.failed(errRunInFn)
	}
	tg.mu.Lock()
	defer tg.mu.Unlock()
	rt, err := runtimeOrErr()
	if err == nil && (tg.g == nil || tg.rt != rt) {
		err = core.Errorf("goffload: taskgraph: %w: the graph is not recorded: Run records it", ErrBadArgument)
	}
	if err != nil {
		return Async{}.failed(err)
	}
	ct, err := tg.g.Replay(tg.args)
	if err != nil {
		t := &Task{err: err}
		noteNotCreated(rt, t)
		return t
	}
	return &Task{t: ct}
}

// errInGraph is the error of waiting, inside a graph's function, for the
// task a construct returned.
var errInGraph = core.Errorf("goffload: taskgraph: %w: a construct's task inside the graph's function is the whole graph's: wait for Run's", ErrBadArgument)

func (tg *Taskgraph) record(rt *core.Runtime) *Task {
	tg.release()
	tg.g, tg.nodes = nil, nil
	r := &tg.rec
	*r = Recorder{tg: tg, active: true, task: &Task{err: errInGraph}, g: rt.NewGraph()}
	err := tg.fn(r)
	r.active = false
	if err == nil {
		err = r.err
	}
	if err == nil {
		err = r.g.Seal()
	}
	t := r.task
	t.err = nil
	joinErr := err
	if err != nil && r.g.Any() != nil && errors.Is(err, core.ErrUnwaitableEdge) {
		// The placement of its Any-tasks put an edge between devices
		// that cannot wait on each other: the runtime's choice, not the
		// program's. The tasks ran as unrecorded ones; the Run is theirs,
		// and the next Run records again.
		joinErr = nil
		rt.Log.Printf(config.InfoPlacement, -1, "taskgraph not recorded: %v; its tasks ran unrecorded, and the next Run records again", err)
	}
	t.t = r.g.Join(r.tasks, joinErr)
	anyrun.AnyJoined(r.g, t.t)
	tg.records++
	if err == nil {
		tg.g, tg.rt, tg.args = r.g, rt, r.g.Args()
	} else {
		tg.nodes = nil
	}
	r.g, r.tasks = nil, nil
	return t
}

func (tg *Taskgraph) replay() *Task {
	r := &tg.rec
	*r = Recorder{tg: tg, active: true, replay: true, task: &Task{err: errInGraph}, args: tg.g.Args(), rooms: r.rooms}
	err := tg.fn(r)
	r.active = false
	if err == nil {
		err = r.err
	}
	if err == nil && r.i != len(tg.nodes) {
		err = core.Errorf("goffload: taskgraph: %w: the function made %d tasks, %d were recorded", ErrGraphChanged, r.i, len(tg.nodes))
	}
	t := r.task
	if err != nil {
		t.err = err
		noteNotCreated(tg.rt, t)
		return t
	}
	ct, err := tg.g.Replay(r.args)
	if err != nil {
		t.err = err
		noteNotCreated(tg.rt, t)
		return t
	}
	t.err = nil
	t.t = ct
	tg.args, r.args = r.args, nil // read by Replay, never written again
	return t
}

// refuse is a construct the recorder does not record.
func (r *Recorder) refuse() *Task {
	return r.fail(core.Errorf("goffload: taskgraph: %w: a graph records kernel launches (Run, a typed kernel's Nowait) and copies (Memcpy, CopyNowait) and updates (Update), not EnterData, ExitData or Go", ErrBadArgument))
}

// fail notes err, the first construct that broke a rule, and returns the
// Run's task (a task that failed, after fn returned).
func (r *Recorder) fail(err error) *Task {
	if !r.active {
		t := &Task{err: core.Errorf("goffload: taskgraph: %w: a Recorder's constructs are made inside the graph's function (%v)", ErrBadArgument, err)}
		if rt := current.Load(); rt != nil {
			noteNotCreated(rt, t)
		}
		return t
	}
	if r.err == nil {
		r.err = err
	}
	return r.task
}

// changed is the error of a replay's construct i that differs from the
// recorded one in what.
func changed(i int, what string, v ...any) error {
	return core.Errorf("goffload: taskgraph: task %d: %w: "+what, append([]any{i, ErrGraphChanged}, v...)...)
}

// coreDeps are a's depend clauses for the core.
func coreDeps(a Async) ([]core.Dep, error) {
	deps := make([]core.Dep, a.deps.n)
	for i := range a.deps.n {
		d := a.deps.at(i)
		if d.err != nil {
			return nil, d.err
		}
		deps[i] = d.dep
	}
	return deps, nil
}

// sameDeps reports whether a's depend clauses are n's.
func (n *recNode) sameDeps(a Async) error {
	if a.deps.n != len(n.deps) {
		return fmt.Errorf("%d depend clauses, %d recorded", a.deps.n, len(n.deps))
	}
	for i := range a.deps.n {
		d := a.deps.at(i)
		if d.err != nil {
			return d.err
		}
		r := n.deps[i]
		if d.dep.Kind != r.Kind || d.dep.Addr != r.Addr || d.dep.Size != r.Size {
			return fmt.Errorf("depend clause %d names %d bytes at %#x, %d at %#x were recorded", i, d.dep.Size, d.dep.Addr, r.Size, r.Addr)
		}
	}
	return nil
}

// device checks that a's device can be recorded and returns it.
func (r *Recorder) device(a Async, what string) (*core.Device, error) {
	if a.dev.IsAny() {
		return nil, core.Errorf("goffload: taskgraph: %s on Any(): %w: Any()'s placements are not recorded yet: name a device", what, ErrBadArgument)
	}
	if a.group != nil {
		return nil, core.Errorf("goffload: taskgraph: %s: %w: a recorded task joins no Group (In): wait for Run's task", what, ErrBadArgument)
	}
	cd, fallback, err := a.dev.resolve()
	if err != nil {
		return nil, err
	}
	if fallback || cd.IsInitial() {
		return nil, core.Errorf("goffload: taskgraph: %s on %s: %w: a recorded task runs on a device, not the initial one (its queues are replayed)", what, cd.Label(), ErrBadArgument)
	}
	return cd, nil
}

// launch records or replays the launch of k with args.
func (r *Recorder) launch(a Async, k *Kernel, o launchOpts, args []any) *Task {
	if !r.active {
		return r.fail(fmt.Errorf("a launch"))
	}
	if r.replay {
		return r.replayLaunch(a, k, o, args)
	}
	if r.err != nil { // the record failed: nothing after runs
		return r.task
	}
	if k == nil || k.k == nil {
		return r.fail(core.Errorf("goffload: taskgraph: target: %w: nil kernel", ErrBadArgument))
	}
	if a.dev.IsAny() {
		return r.launchAny(a, k, o, args)
	}
	cd, err := r.device(a, "target "+k.k.Name())
	if err != nil {
		return r.fail(err)
	}
	ps := k.k.Params()
	for _, p := range ps {
		if p.Field >= 0 {
			return r.fail(core.Errorf("goffload: %s: taskgraph: target %s: %w: struct arguments are not recorded yet", cd.Label(), k.k.Name(), ErrBadArgument))
		}
	}
	deps, err := coreDeps(a)
	if err != nil {
		return r.fail(err)
	}
	var kargs []core.KernelArg
	var geo plugin.Geometry
	a.rec = nil
	t := a.spawn(func(cd *core.Device) (core.Op, error) {
		op, ka, g, err := a.targetOp(cd, k, o, args)
		kargs, geo = ka, g
		return op, err
	})
	if t.t == nil {
		return r.fail(t.err)
	}
	r.tasks = append(r.tasks, t.t)
	if err := r.g.AddLaunch(cd, k.k, kargs, geo, deps); err != nil {
		return r.fail(err)
	}
	r.node(k, a, o, args, geo, deps)
	return r.task
}

// node records the node of a launch of k with args, the graph's last.
func (r *Recorder) node(k *Kernel, a Async, o launchOpts, args []any, geo plugin.Geometry, deps []core.Dep) {
	ps := k.k.Params()
	n := recNode{k: k, num: a.dev.num, dm: a.dev.dm, geo: geo, deps: deps, keys: make([]argKey, len(args)), gi: r.g.Len() - 1}
	for i, x := range args {
		n.keys[i] = keyOf(x, ps[i].Kind == plugin.Scalar)
	}
	for _, m := range o.with {
		n.with = append(n.with, keyOf(m, false))
	}
	r.tg.nodes = append(r.tg.nodes, n)
}

// launchAny records the launch of k on Any(): it is placed as an
// unrecorded one is, and the graph keeps its device, copies and
// allocations (core.Runtime.AnyTargetIn), which replays reissue.
func (r *Recorder) launchAny(a Async, k *Kernel, o launchOpts, args []any) *Task {
	rt := current.Load()
	if rt == nil || len(rt.Devices) == 0 {
		return r.fail(core.Errorf("goffload: taskgraph: target %s on Any(): %w: there is no device to place it on (a recorded task runs on a device)", k.k.Name(), ErrBadArgument))
	}
	if a.group != nil {
		return r.fail(core.Errorf("goffload: taskgraph: target %s: %w: a recorded task joins no Group (In): wait for Run's task", k.k.Name(), ErrBadArgument))
	}
	for _, p := range k.k.Params() {
		if p.Field >= 0 {
			return r.fail(core.Errorf("goffload: taskgraph: target %s on Any(): %w: struct arguments are not recorded yet", k.k.Name(), ErrBadArgument))
		}
	}
	deps, err := coreDeps(a)
	if err != nil {
		return r.fail(err)
	}
	kargs, err := kernelArgs(rt.Initial, k, a.dev.dm, o, args)
	if err != nil {
		return r.fail(core.Errorf("goffload: Any(): %w", err))
	}
	geo, err := a.dev.geometry()
	if err != nil {
		return r.fail(core.Errorf("goffload: Any(): target %s%s: %w", k.k.Name(), k.k.Describe(), err))
	}
	n := r.g.Len()
	t, err := anyrun.AnyTargetIn(rt, r.g, anyrun.AnyLaunch{Kernel: k.k, Args: kargs, Geo: geo, Deps: deps, Once: k.once,
		Plain: len(kargs) == len(args) && len(o.with) == 0})
	if err != nil {
		return r.fail(err)
	}
	r.tasks = append(r.tasks, t)
	if r.g.Len() == n { // its launch could not be recorded: Seal says why
		return r.task
	}
	r.node(k, a, o, args, geo, deps)
	return r.task
}

// next returns the recorded node that the replay's next construct must
// match, and its index. A nil node comes with the task to return: the
// replay failed already, or it makes more constructs than were recorded.
func (r *Recorder) next() (*recNode, int, *Task) {
	i := r.i
	r.i++
	if r.err != nil {
		return nil, i, r.task
	}
	if i >= len(r.tg.nodes) {
		return nil, i, r.fail(changed(i, "more tasks than the %d recorded", len(r.tg.nodes)))
	}
	return &r.tg.nodes[i], i, nil
}

// replayLaunch checks a replay's launch against the recorded one and sets
// its scalars.
func (r *Recorder) replayLaunch(a Async, k *Kernel, o launchOpts, args []any) *Task {
	n, i, t := r.next()
	if n == nil {
		return t
	}
	if k == nil || n.k != k {
		return r.fail(changed(i, "another kernel than %s", n.k.k.Name()))
	}
	if a.dev.num != n.num || a.dev.dm != n.dm || a.dev.geo != n.geo || a.dev.clauseErr != nil || a.group != nil {
		return r.fail(changed(i, "target %s on %v, recorded on device %d (or its clauses differ)", k.k.Name(), a.dev, n.num))
	}
	if err := n.sameDeps(a); err != nil {
		return r.fail(changed(i, "target %s: %v", k.k.Name(), err))
	}
	if len(args) != len(n.keys) || len(o.with) != len(n.with) {
		return r.fail(changed(i, "target %s: %d arguments and %d clauses, %d and %d recorded", k.k.Name(), len(args), len(o.with), len(n.keys), len(n.with)))
	}
	for j, m := range o.with {
		if keyOf(m, false) != n.with[j] {
			return r.fail(changed(i, "target %s: With clause %d differs from the recorded one", k.k.Name(), j))
		}
	}
	from, _ := r.tg.g.ArgsOf(n.gi)
	ps := k.k.Params()
	for j, x := range args {
		key := &n.keys[j]
		ref := o.refs&(1<<j) != 0 // a typed kernel's: x points to the slice
		if key.scalar {
			if ref {
				x = reflect.ValueOf(x).Elem().Interface()
			}
			v := x
			if reflect.TypeOf(x) != ps[j].Type {
				var err error
				if v, err = scalarArg(x, ps[j].Type); err != nil {
					return r.fail(changed(i, "target %s: argument %d: %v", k.k.Name(), j, err))
				}
			}
			r.args[from+j].Scalar = v
			continue
		}
		got := keyOfRef(x, ref)
		if got != *key {
			return r.fail(changed(i, "target %s: argument %d: a %v of %d elements at %p (map type %#x), recorded a %v of %d at %p (%#x)",
				k.k.Name(), j, got.typ, got.n, got.ptr, got.mt, key.typ, key.n, key.ptr, key.mt))
		}
	}
	return r.task
}

// memcpy records or replays a copy.
func (r *Recorder) memcpy(a Async, dst, src DevicePtr, n int64) *Task {
	if !r.active {
		return r.fail(fmt.Errorf("a copy"))
	}
	if r.replay {
		rn, i, t := r.next()
		if rn == nil {
			return t
		}
		if rn.k != nil || rn.update || rn.dst != dst || rn.src != src || rn.n != n {
			return r.fail(changed(i, "a copy of %d bytes from %v to %v differs from the recorded task", n, src, dst))
		}
		if err := rn.sameDeps(a); err != nil {
			return r.fail(changed(i, "omp_target_memcpy: %v", err))
		}
		return r.task
	}
	if r.err != nil { // the record failed: nothing after runs
		return r.task
	}
	if a.group != nil {
		return r.fail(core.Errorf("goffload: taskgraph: omp_target_memcpy: %w: a recorded task joins no Group (In): wait for Run's task", ErrBadArgument))
	}
	deps, err := coreDeps(a)
	if err != nil {
		return r.fail(err)
	}
	var dl, sl core.Loc
	if n >= 0 {
		if dl, err = loc(dst, n); err == nil {
			sl, err = loc(src, n)
		}
	}
	a.rec = nil
	t := a.Memcpy(dst, src, n)
	if t.t == nil {
		return r.fail(t.err)
	}
	r.tasks = append(r.tasks, t.t)
	if err != nil {
		return r.fail(err)
	}
	if err := r.g.AddCopy(dl, sl, n, deps); err != nil {
		return r.fail(err)
	}
	r.tg.nodes = append(r.tg.nodes, recNode{deps: deps, dst: dst, src: src, n: n})
	return r.task
}

// update records or replays target update of maps.
func (r *Recorder) update(a Async, maps []Map) *Task {
	const op = "target update"
	if !r.active {
		return r.fail(fmt.Errorf("an update"))
	}
	if r.replay {
		rn, i, t := r.next()
		if rn == nil {
			return t
		}
		if !rn.update || a.dev.num != rn.num || a.group != nil || len(maps) != len(rn.keys) {
			return r.fail(changed(i, "%s of %d buffers on %v differs from the recorded task", op, len(maps), a.dev))
		}
		for j, m := range maps {
			if keyOf(m, false) != rn.keys[j] {
				return r.fail(changed(i, "%s: clause %d differs from the recorded one", op, j))
			}
		}
		if err := rn.sameDeps(a); err != nil {
			return r.fail(changed(i, "%s: %v", op, err))
		}
		return r.task
	}
	if r.err != nil { // the record failed: nothing after runs
		return r.task
	}
	cd, err := r.device(a, op)
	if err != nil {
		return r.fail(err)
	}
	deps, err := coreDeps(a)
	if err != nil {
		return r.fail(err)
	}
	its, err := items(maps)
	if err != nil {
		return r.fail(err)
	}
	for i := range its {
		its[i].Exit = false
	}
	a.rec = nil
	t := a.Update(maps...)
	if t.t == nil {
		return r.fail(t.err)
	}
	r.tasks = append(r.tasks, t.t)
	if err := r.g.AddUpdate(cd, its, deps); err != nil {
		return r.fail(err)
	}
	n := recNode{update: true, num: a.dev.num, deps: deps, keys: make([]argKey, len(maps))}
	for j, m := range maps {
		n.keys[j] = keyOf(m, false)
	}
	r.tg.nodes = append(r.tg.nodes, n)
	return r.task
}
