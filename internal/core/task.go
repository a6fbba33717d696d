package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goffload/offload/plugin"
)

// ErrDependency is wrapped by the error of a task that did not run because
// a task it depends on failed.
var ErrDependency = errors.New("a task it depends on failed")

// ErrInTask is wrapped by the error of Taskwait or Stop called from inside
// a task (host work, or a kernel on the initial device), which would wait
// for the task calling it. It wraps ErrBadArgument.
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
	fin  atomic.Bool
	done chan struct{}

	// Set under the runtime's tasks.mu as it completes (holds reads them
	// there), before done is closed; read by anyone after.
	err  error    // its error
	fail *failure // with err: the failure it reports (its own or a predecessor's)

	// Guarded by mu. ev fires when the device work is done; it is nil
	// until enqueued, or if never. enqueued says the device work is
	// enqueued (ev set) or never will be (t completed). enqWait are the
	// tasks waiting for that.
	mu       sync.Mutex
	ev       plugin.Event
	enqueued bool
	enqWait  []*Task

	// Guarded by its device's qmu: the queue it was enqueued on.
	cq *cqueue

	// Handed over by laterLeft's atomic count: a task whose device
	// predecessors were not enqueued yet when it was made waits for
	// laterLeft of them to be (see Spawn); laterCont is what it does then.
	laterLeft atomic.Int32
	laterCont step

	// Guarded by the runtime's tasks.mu, the dependence graph's part
	// (deps.go). addrs are the addresses it depends on. direct are its
	// predecessors by their own edges (register), until it completes.
	// completed is set when it completes, before done is closed.
	addrs     []uintptr
	direct    []*Task
	completed bool
	// addrBuf and directBuf hold addrs and direct for a task of a few
	// depend clauses and predecessors: no allocation of their own. What
	// register writes there is only read afterwards.
	addrBuf   [2]uintptr
	directBuf [2]*Task
	// Guarded by the runtime's tasks.mu, the host waits' part (ready.go).
	// succs are the tasks waiting on the host for t. Each has pending, the
	// number of its predecessors not completed. cont is what a waiting
	// task does once pending reaches 0, and light says it never blocks.
	succs   []*Task
	pending int
	cont    step
	light   bool

	rec recovery // for a task with Op.Recover only

	// spare is the work its enqueueing takes (takeWork): a device task's
	// own, allocated with it (Spawn).
	spare *work
}

// TaskRoom is room for a task on a device and its work: Spawn's caller
// may allocate it with its own record of the task (SpawnIn), one
// allocation for all of them. A room holds one task.
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

// markEnqueued says t's device work is enqueued, or that it never will
// be (t completed), and returns the steps of the tasks that waited for
// that (see Spawn) and can go on now.
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

func (t *Task) event() plugin.Event {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ev
}
