package core

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"sync"
	"time"
	"unsafe"

	"github.com/goffload/offload/internal/plugin"
)

// DepKind is a depend clause's type.
type DepKind int

// Dependence types of OpenMP's depend clause.
const (
	DepIn DepKind = iota
	DepOut
	DepInOut
)

// Dep is one depend clause: a host address (a buffer's first byte, or any
// address the program names) and its type.
type Dep struct {
	Kind DepKind
	Addr uintptr
	Keep unsafe.Pointer // keeps the object alive while tasks refer to it
}

// ErrDependency is wrapped by the error of a task that did not run because
// a task it depends on failed.
var ErrDependency = errors.New("a task it depends on failed")

// Task is an asynchronous construct or piece of host work.
type Task struct {
	ID   uint64
	Name string
	dev  *Device // nil for host work

	mu sync.Mutex
	ev plugin.Event // fires when the device work is done; nil until enqueued, or if never
	cq *cqueue      // the queue it was enqueued on; guarded by its device's qmu

	done chan struct{}
	err  error         // set before done is closed
	enq  chan struct{} // closed once the device work is enqueued (ev set), if ever

	addrs []uintptr // the addresses it depends on; guarded by the runtime's tasks.mu
}

// Done is closed when the task has completed.
func (t *Task) Done() <-chan struct{} { return t.done }

// Err is the task's error, once Done is closed.
func (t *Task) Err() error { return t.err }

// Wait waits for the task, or for ctx to be done, and returns the task's
// error or ctx's.
func (t *Task) Wait(ctx context.Context) error {
	select {
	case <-t.done:
		return t.err
	default:
	}
	select {
	case <-t.done:
		return t.err
	case <-ctx.Done():
		return fmt.Errorf("goffload: waiting for task %d (%s): %w", t.ID, t.Name, ctx.Err())
	}
}

func (t *Task) event() plugin.Event {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ev
}

// depState is the dependence history of one address: the last task that
// wrote it, and the tasks that read it since.
type depState struct {
	out *Task
	ins []*Task
}

// tasks is the runtime's task bookkeeping.
type tasks struct {
	mu   sync.Mutex
	next uint64
	deps map[uintptr]*depState
	live map[*Task]struct{}
	keep map[uintptr]unsafe.Pointer
	// failed are the tasks that failed since the last Taskwait.
	failed []*Task
}

func finished(t *Task) bool {
	select {
	case <-t.done:
		return true
	default:
		return false
	}
}

// register numbers t and returns its predecessors under OpenMP's rules: in
// after out waits; out and inout wait for the last out and every in since.
func (r *Runtime) register(t *Task, deps []Dep) []*Task {
	ts := &r.tasks
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.deps == nil {
		ts.deps = map[uintptr]*depState{}
		ts.live = map[*Task]struct{}{}
		ts.keep = map[uintptr]unsafe.Pointer{}
	}
	ts.next++
	t.ID = ts.next
	ts.live[t] = struct{}{}
	var preds []*Task
	seen := map[*Task]bool{}
	add := func(p *Task) {
		if p != nil && p != t && !seen[p] && (!finished(p) || p.err != nil) {
			seen[p] = true
			preds = append(preds, p)
		}
	}
	for _, d := range deps {
		t.addrs = append(t.addrs, d.Addr)
		st := ts.deps[d.Addr]
		if st == nil {
			st = &depState{}
			ts.deps[d.Addr] = st
			ts.keep[d.Addr] = d.Keep
		}
		add(st.out)
		if d.Kind == DepIn {
			live := st.ins[:0]
			for _, in := range st.ins {
				if !finished(in) || in.err != nil {
					live = append(live, in)
				}
			}
			st.ins = append(live, t)
			continue
		}
		for _, in := range st.ins {
			add(in)
		}
		st.out, st.ins = t, nil
	}
	return preds
}

// complete ends t with err.
func (r *Runtime) complete(t *Task, err error) {
	t.err = err
	close(t.done)
	ts := &r.tasks
	ts.mu.Lock()
	delete(ts.live, t)
	if err != nil {
		ts.failed = append(ts.failed, t)
	}
	if err == nil { // forget addresses whose history is over
		for _, addr := range t.addrs {
			if st := ts.deps[addr]; st != nil && st.out == t && len(st.ins) == 0 {
				delete(ts.deps, addr)
				delete(ts.keep, addr)
			}
		}
	}
	ts.mu.Unlock()
}

// Spawn runs op on d as a task that starts when the tasks deps name are done.
// Predecessors whose events d's queues can wait on are waited for on the
// device (the host never sits between them); others are waited for on the
// host, first by polling with bounded yielding, then blocking.
func (r *Runtime) Spawn(d *Device, op Op, deps []Dep, fallback bool) *Task {
	t := &Task{Name: op.Name, dev: d, done: make(chan struct{}), enq: make(chan struct{})}
	preds := r.register(t, deps)
	var onHost, onDevice, later []*Task
	for _, p := range preds {
		switch ev := p.event(); {
		case d.IsInitial() || p.dev == nil || p.dev.IsInitial():
			onHost = append(onHost, p)
		case ev != nil && d.canWait(p, ev):
			onDevice = append(onDevice, p)
		case ev == nil && !finished(p):
			later = append(later, p) // not enqueued yet: see when it is
		default:
			onHost = append(onHost, p)
		}
	}
	if len(onHost) == 0 && len(later) == 0 {
		r.enqueue(t, d, op, onDevice, fallback)
		return t
	}
	go func() {
		// A device predecessor that was not enqueued yet (it waits on the
		// host itself) may be waited for on the device once it is.
		for _, p := range later {
			select {
			case <-p.enq:
			case <-p.done:
			}
			if ev := p.event(); ev != nil && d.canWait(p, ev) {
				onDevice = append(onDevice, p)
			} else {
				onHost = append(onHost, p)
			}
		}
		if err := r.waitHost(t, d, onHost); err != nil {
			r.complete(t, err)
			return
		}
		r.enqueue(t, d, op, onDevice, fallback)
	}()
	return t
}

// SpawnHost runs fn on the host as a task in the same dependence graph.
func (r *Runtime) SpawnHost(name string, fn func() error, deps []Dep) *Task {
	t := &Task{Name: name, dev: r.Initial, done: make(chan struct{}), enq: make(chan struct{})}
	preds := r.register(t, deps)
	go func() {
		if err := r.waitHost(t, r.Initial, preds); err != nil {
			r.complete(t, err)
			return
		}
		ev := TargetEvent{Where: Where{Time: time.Now(), Device: r.Initial.Num, Task: t.ID}, Name: name, Nowait: true}
		if tool := r.Initial.tool; tool != nil {
			tool.TargetBegin(ev)
		}
		err := fn()
		if tool := r.Initial.tool; tool != nil {
			ev.Time, ev.Err = time.Now(), err
			tool.TargetEnd(ev)
		}
		r.complete(t, err)
	}()
	return t
}

// canWait reports whether d's queues can wait on p's event themselves.
func (d *Device) canWait(p *Task, ev plugin.Event) bool {
	if p.dev == d {
		return true
	}
	fw, ok := d.Dev.(plugin.ForeignEventWaiter)
	return ok && fw.CanWait(ev)
}

// waitHost waits on the host for preds, and fails if one failed.
func (r *Runtime) waitHost(t *Task, d *Device, preds []*Task) error {
	for _, p := range preds {
		start := time.Now()
		for i := 0; i < 64 && !finished(p); i++ {
			runtime.Gosched()
		}
		<-p.done
		if d.tool != nil {
			d.tool.Wait(WaitEvent{Where: Where{Time: start, Device: d.Num, Task: t.ID}, For: p.ID, ForName: p.Name, Dur: time.Since(start)})
		}
		if p.err != nil {
			return depErr(t, p, p.err)
		}
	}
	return nil
}

func depErr(t, p *Task, cause error) error {
	return fmt.Errorf("goffload: task %d (%s) did not run: %w: task %d (%s): %w", t.ID, t.Name, ErrDependency, p.ID, p.Name, cause)
}

// enqueue puts t's work on a queue of d behind waits for preds, records the
// event dependents wait on, and completes t in the background.
func (r *Runtime) enqueue(t *Task, d *Device, op Op, preds []*Task, fallback bool) {
	if err := op.check(d); err != nil {
		r.complete(t, err)
		return
	}
	if d.IsInitial() { // the host does it, without holding up the caller
		go func() {
			var err error
			if op.Initial != nil {
				err = op.Initial(d, fallback)
			}
			r.complete(t, err)
		}()
		return
	}
	// Follow a predecessor on its own queue if nothing came after it there:
	// the queue's order is the wait.
	var cq *cqueue
	var followed *Task
	for i, p := range preds {
		if p.dev == d && !finished(p) {
			if cq = d.follow(p); cq != nil {
				followed = p
				preds = append(preds[:i:i], preds[i+1:]...)
				break
			}
		}
	}
	if cq == nil {
		var err error
		if cq, err = d.getQueue(); err != nil {
			r.complete(t, err)
			return
		}
	}
	w := d.beginOn(op.Name, cq)
	w.task = t.ID
	if followed != nil && d.tool != nil { // it waits by queue order
		d.tool.Wait(WaitEvent{Where: w.where(), For: followed.ID, ForName: followed.Name, OnDevice: true})
	}
	for _, p := range preds {
		if finished(p) {
			if p.err != nil {
				w.err(depErr(t, p, p.err))
			}
			continue
		}
		ev := p.event()
		if ev == nil { // it completed meanwhile
			<-p.done
			if p.err != nil {
				w.err(depErr(t, p, p.err))
			}
			continue
		}
		if d.tool != nil {
			d.tool.Wait(WaitEvent{Where: w.where(), For: p.ID, ForName: p.Name, OnDevice: true})
		}
		if err := w.q.Wait(ev); err != nil {
			w.err(fmt.Errorf("goffload: %s: %s: waiting for task %d: %w", d.Label(), op.Name, p.ID, err))
		}
	}
	if w.first == nil {
		op.Enqueue(d, w)
	}
	// The event marks the end of the task's work on the queue. Dependents
	// wait on it only if the work was all enqueued; a task that failed to
	// enqueue is waited for on the host, where its error is seen.
	ev, err := d.Dev.NewEvent()
	if err == nil {
		if err = w.q.Record(ev); err != nil {
			ev.Close()
		}
	}
	if err != nil {
		w.err(fmt.Errorf("goffload: %s: %s: %w", d.Label(), op.Name, err))
		ev = nil
	}
	d.qmu.Lock()
	t.cq = cq
	if w.first == nil {
		cq.last = t
	} else {
		cq.last = nil
	}
	d.qmu.Unlock()
	t.mu.Lock()
	if w.first == nil {
		t.ev = ev
	}
	t.mu.Unlock()
	close(t.enq)
	go func() {
		if ev == nil { // the device is failing: nothing to wait for but the queue
			r.complete(t, w.finish())
			return
		}
		err := ev.Synchronize()
		if err != nil {
			w.err(fmt.Errorf("goffload: %s: %s: %w", d.Label(), op.Name, err))
		}
		err = w.done(err == nil)
		// Dependents created from now on see the task finished; those that
		// took the event already may still wait on it, closed.
		t.mu.Lock()
		t.ev = nil
		t.mu.Unlock()
		ev.Close()
		r.complete(t, err)
	}()
}

// Taskwait waits for every task not completed yet and returns the first
// error (by task number) among them and the tasks that failed since the last
// Taskwait, or ctx's error if it is done first.
func (r *Runtime) Taskwait(ctx context.Context) error {
	r.tasks.mu.Lock()
	ts := append(make([]*Task, 0, len(r.tasks.live)+len(r.tasks.failed)), r.tasks.failed...)
	for t := range r.tasks.live {
		ts = append(ts, t)
	}
	r.tasks.mu.Unlock()
	if err := WaitAll(ctx, ts); ctx.Err() != nil {
		return err
	}
	r.tasks.mu.Lock()
	var failed []*Task
	for _, t := range r.tasks.failed { // keep those that failed meanwhile
		if !slices.Contains(ts, t) {
			failed = append(failed, t)
		}
	}
	r.tasks.failed = failed
	r.tasks.mu.Unlock()
	return WaitAll(ctx, ts)
}

// WaitAll waits for every task of ts and returns the first error among
// them by task number, or ctx's error if it is done first.
func WaitAll(ctx context.Context, ts []*Task) error {
	sort.Slice(ts, func(i, j int) bool { return ts[i].ID < ts[j].ID })
	for _, t := range ts {
		select {
		case <-t.done:
		case <-ctx.Done():
			return fmt.Errorf("goffload: waiting for tasks: %w", ctx.Err())
		}
	}
	for _, t := range ts {
		if t.err != nil {
			return t.err
		}
	}
	return nil
}

// Enqueued reports whether t's device work has been enqueued (its event is
// recorded), for tests of the lowering.
func (t *Task) Enqueued() bool { return t.event() != nil }
