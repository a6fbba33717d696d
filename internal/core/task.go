package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goffload/offload/internal/config"
	"github.com/goffload/offload/plugin"
)

// ErrDependency is wrapped by the error of a task that did not run because
// a task it depends on failed.
var ErrDependency = errors.New("a task it depends on failed")

// ErrInTask is wrapped by the error of Taskwait or Stop called from inside a
// task. Such a task is host work, or a kernel on the initial device. The call
// would wait for the task calling it. It wraps ErrBadArgument.
var ErrInTask = fmt.Errorf("%w: called from inside a task, which would wait for itself", ErrBadArgument)

// Task is an asynchronous construct or piece of host work. Its fields are
// grouped by who may touch them: set when it is made; its own mu; its
// device's qmu; the runtime's tasks.mu; recovery has its own rules.
type Task struct {
	// Set when the task is made (ID and rt by register), then only read.
	ID     uint64
	Name   string
	dev    *Device // nil for host work
	rt     *Runtime
	onDone func(err error, ready time.Time) // Op.Done

	// fin is set as the task completes, after err and fail (finished).
	// done is made by the first that waits for it (Done), under mu, and
	// closed as fin is set: a task nobody waits on allocates none.
	fin       atomic.Bool
	laterLeft atomic.Int32 // see laterCont below; beside fin: one word for both
	done      chan struct{}

	// Set under the runtime's tasks.mu as it completes (holds reads them
	// there), before done is closed; read by anyone after.
	err  error    // its error
	fail *failure // with err: the failure it reports (its own or a predecessor's)

	// Guarded by mu. ev fires when the device work is done; it is nil
	// until enqueued, or if never. enqueued (below, beside completed)
	// says the device work is enqueued (ev set) or never will be (t
	// completed). enqWait are the tasks waiting for that.
	mu      sync.Mutex
	ev      plugin.Event
	enqWait []*Task

	// Guarded by its device's qmu: the queue it was enqueued on.
	cq *cqueue

	// Handed over by laterLeft's atomic count: a task whose device
	// predecessors were not enqueued yet when it was made waits for
	// laterLeft of them to be (see Spawn); laterCont is what it does then.
	laterCont step

	// Guarded by the runtime's tasks.mu, the dependence graph's part
	// (deps.go). addrs are the addresses it depends on. direct are its
	// predecessors by their own edges (register), until it completes.
	// completed is set when it completes, before done is closed.
	addrs  []uintptr
	direct []*Task
	// addrBuf and directBuf hold addrs and direct for a task of a few
	// depend clauses and predecessors: no allocation of their own. What
	// register writes there is only read afterwards.
	addrBuf   [3]uintptr
	directBuf [3]*Task
	completed bool
	// light and pending are the host waits' part (below); enqueued is
	// guarded by mu (see ev). Beside completed: one word for the four.
	light    bool
	enqueued bool
	pending  int32
	// Guarded by the runtime's tasks.mu, the host waits' part (complete.go).
	// succs are the tasks waiting on the host for t. Each has pending, the
	// number of its predecessors not completed. cont is what a waiting
	// task does once pending reaches 0, and light says it never blocks.
	succs []*Task
	cont  step
	// succBuf holds succs for a task of a few host-waiting successors.
	succBuf [2]*Task
	// Guarded by the runtime's tasks.mu: the live list's links (liveTasks),
	// nil once the task completed.
	livePrev, liveNext *Task

	rec *recovery // for a task with Op.Recover only; nil for the others

	// spare is the work its enqueueing takes (takeWork): a device task's
	// own, allocated with it (Spawn).
	spare *work
}

// TaskRoom is room for a task on a device and its work. Spawn's caller may
// allocate it with its own record of the task (SpawnIn): one allocation for
// all of them. A room holds one task.
type TaskRoom struct {
	t Task
	w work
}

// takeWork returns t's spare work, once, or nil.
func (t *Task) takeWork() *work {
	w := t.spare
	t.spare = nil
	return w
}

// failure is one task's failure, shared by the dependents it made fail: a
// failure is reported once, and the dependence history forgets it then.
type failure struct {
	task *Task // the task that failed by itself
	// Guarded by the runtime's tasks.mu.
	reported bool
	addrs    map[uintptr]struct{} // addresses whose history holds a task failed by it
}

// Done is closed when the task has completed.
func (t *Task) Done() <-chan struct{} {
	if t.fin.Load() {
		return closedDone
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.fin.Load() {
		return closedDone
	}
	if t.done == nil {
		t.done = make(chan struct{})
	}
	return t.done
}

// closedDone is the Done of every task that completed before anyone
// asked for it.
var closedDone = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// finish marks t completed: finished from now on, its Done closed.
func (t *Task) finish() {
	t.mu.Lock()
	t.fin.Store(true)
	c := t.done
	t.mu.Unlock()
	if c != nil {
		close(c)
	}
}

// Err is the task's error, once Done is closed.
func (t *Task) Err() error { return t.err }

// Runtime is the runtime t runs on.
func (t *Task) Runtime() *Runtime { return t.rt }

// Wait waits for the task, or for ctx to be done, and returns the task's
// error or ctx's. Returning the task's failure reports it (see Taskwait).
func (t *Task) Wait(ctx context.Context) error {
	if !t.fin.Load() {
		select {
		case <-t.Done():
		case <-ctx.Done():
			return Errorf("goffload: waiting for task %d (%s): %w", t.ID, t.Name, ctx.Err())
		}
	}
	t.report()
	return t.err
}

// report marks the task's failure, if any, reported.
func (t *Task) report() {
	if t.fail != nil && t.rt != nil {
		ts := &t.rt.tasks
		ts.mu.Lock()
		ts.reportLocked(t.fail)
		ts.mu.Unlock()
	}
}

// markEnqueued says t's device work is enqueued, or that it never will be (t
// completed). It returns the steps of the tasks that waited for that (see
// Spawn) and can go on now.
func (t *Task) markEnqueued() step {
	t.mu.Lock()
	if t.enqueued {
		t.mu.Unlock()
		return nil
	}
	t.enqueued = true
	ws := t.enqWait
	t.enqWait = nil
	t.mu.Unlock()
	var s step
	for _, w := range ws {
		if w.laterLeft.Add(-1) == 0 {
			c := w.laterCont
			w.laterCont = nil
			s = chain(s, c)
		}
	}
	return s
}

// waitEnqueued arranges for cont to run once every task of ps is
// enqueued or completed: by the last of them to be, from markEnqueued. It
// returns cont itself if they all are already, for the caller to run.
func (t *Task) waitEnqueued(ps []*Task, cont step) step {
	t.laterCont = cont
	t.laterLeft.Store(int32(len(ps)))
	n := int32(0)
	for _, p := range ps {
		p.mu.Lock()
		if p.enqueued {
			n++
		} else {
			p.enqWait = append(p.enqWait, t)
		}
		p.mu.Unlock()
	}
	if n > 0 && t.laterLeft.Add(-n) == 0 {
		t.laterCont = nil
		return cont
	}
	return nil
}

// retire forgets t's event ev, once t is finished, and closes it.
func (t *Task) retire(ev plugin.Event) {
	t.mu.Lock()
	t.ev = nil
	t.mu.Unlock()
	ev.Close()
}

// retireIf is retire, if ev is not nil.
func (t *Task) retireIf(ev plugin.Event) {
	if ev != nil {
		t.retire(ev)
	}
}

func (t *Task) event() plugin.Event {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ev
}

// recovery is what a task with a recovery (Op.Recover) keeps for it, in
// a record of its own: the others' Task has no room for it.
type recovery struct {
	// Guarded by the runtime's tasks.mu: fn is Op.Recover, taken (set to
	// nil) by the completion it replaces; preds are the task's
	// predecessors, kept for it only.
	fn    func(err error, used bool) error
	preds []*Task
	// Set by Spawn under the runtime's tasks.mu, before the task is
	// enqueued. settled is closed, with rawErr set, to say how the task's
	// work itself ended. It is closed under the task's mu, at its first
	// completion, before any recovery.
	settled chan struct{}
	// Guarded by the task's mu: rawErr and isSettled (see settled); and
	// devSuccs, the tasks enqueued behind its event on a device, which
	// may have used what it did without the host's knowing.
	rawErr    error
	isSettled bool
	devSuccs  []*Task
	// Guarded by the runtime's tasks.mu: when the task completed, its
	// dependents' readiness (Op.Done).
	doneAt time.Time
}

// eventFor returns p's event for t to wait on on a device. It records t as p's
// device successor (see devSuccs). It returns nil if p has none: p completed,
// is about to, or is being recovered. The host waits then.
func (p *Task) eventFor(t *Task) plugin.Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ev != nil && p.rec != nil {
		p.rec.devSuccs = append(p.rec.devSuccs, t)
	}
	return p.ev
}

// dropDevSucc takes t off p's device successors.
func (p *Task) dropDevSucc(t *Task) {
	if p.rec == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rec.devSuccs = slices.DeleteFunc(p.rec.devSuccs, func(s *Task) bool { return s == t })
}

// settle records how t's own work ended, once, for a recovery that waits
// for it (see devSuccs): before t completes, which may wait for its
// predecessors.
func (t *Task) settle(err error) {
	if t.rec == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.rec.isSettled {
		t.rec.rawErr, t.rec.isSettled = err, true
		close(t.rec.settled)
	}
}

// recoverTask hands t, which failed with err, to rec (its Op.Recover) once
// preds are done. rec runs on a goroutine of its own. recoverTask completes t
// with what rec returns. Until then t stays live: its dependents wait for it,
// on the host. Its event, on the lost device, never fires. So it is dropped,
// and new dependents do not wait on it.
//
// used, given to rec, says whether a task enqueued behind t's event on a
// device ran, its own work ending well. Then what t did reached it, though the
// host may not know. Say t's device stopped before it said so.
func (r *Runtime) recoverTask(t *Task, rec func(error, bool) error, preds []*Task, err error) {
	t.mu.Lock()
	t.ev = nil // after this, no task is enqueued behind it (claim)
	succs := t.rec.devSuccs
	t.rec.devSuccs = nil
	t.mu.Unlock()
	r.Log.Printf(config.InfoOffload, -1, "task %d (%s) failed: %v: handed to its recovery", t.ID, t.Name, err)
	go func() {
		waitDone(preds)
		used := false
		for _, s := range succs {
			if s.rec == nil {
				continue
			}
			<-s.rec.settled // its device ends it: t's event fired there, or failed with t's device
			used = used || s.rec.rawErr == nil
		}
		r.complete(t, rec(err, used), nil)
	}()
}

// endRecovery forgets what t kept for a recovery, as t completes, and
// returns when the last of its predecessors completed (zero if t has no
// recovery: see Op.Done). Called with tasks.mu held.
func (t *Task) endRecovery() (ready time.Time) {
	if t.rec == nil {
		return ready
	}
	t.mu.Lock()
	t.rec.devSuccs = nil
	t.mu.Unlock()
	t.rec.doneAt = time.Now()
	for _, p := range t.rec.preds {
		if p.rec != nil && p.rec.doneAt.After(ready) {
			ready = p.rec.doneAt
		}
	}
	t.rec.fn, t.rec.preds = nil, nil
	return ready
}

// limitTasks gives each device that can take it its kind's bound.
func (r *Runtime) limitTasks() {
	for _, d := range r.Devices {
		if d.Unavailable != nil || d.Dev == nil {
			continue
		}
		if n := r.Cfg.DeviceTasks.For(d.Info.Kind); n > 0 {
			if tl, ok := d.Dev.(plugin.TaskLimiter); ok {
				tl.LimitTasks(n)
			} else {
				r.Log.Printf(config.InfoOffload, d.Num, "GOFFLOAD_DEVICE_TASKS: a %s device cannot bound its tasks; it runs them as they come", d.Info.Kind)
			}
		}
	}
}
