package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
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
	done   chan struct{}
	onDone func(err error, ready time.Time) // Op.Done

	// Set before done is closed, read after.
	err  error    // its error
	fail *failure // with err: the failure it reports (its own or a predecessor's)

	// Guarded by mu: ev fires when the device work is done (nil until
	// enqueued, or if never); enqueued says the device work is enqueued
	// (ev set) or never will be (t completed); enqWait are the tasks
	// waiting for that.
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
	// (deps.go): addrs are the addresses it depends on; direct are its
	// predecessors by their own edges (register), until it completes;
	// completed is set when it completes (before done is closed).
	addrs     []uintptr
	direct    []*Task
	completed bool
	// Guarded by the runtime's tasks.mu, the host waits' part (ready.go):
	// succs are the tasks waiting on the host for t, each with pending,
	// the number of its predecessors not completed; cont is what a
	// waiting task does once pending reaches 0, and light says it never
	// blocks.
	succs   []*Task
	pending int
	cont    step
	light   bool

	rec recovery // for a task with Op.Recover only
}

// recovery is what a task with a recovery (Op.Recover) keeps for it. Its
// settled is nil for the others, and the rest unused.
type recovery struct {
	// Guarded by the runtime's tasks.mu: fn is Op.Recover, taken (set to
	// nil) by the completion it replaces; preds are the task's
	// predecessors, kept for it only.
	fn    func(err error, used bool) error
	preds []*Task
	// Set by Spawn under the runtime's tasks.mu, before the task is
	// enqueued: settled is closed (under the task's mu, at its first
	// completion, before any recovery) with rawErr set, to say how its
	// work itself ended.
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

// failure is one task's failure, shared by the dependents it made fail: a
// failure is reported once, and the dependence history forgets it then.
type failure struct {
	task *Task // the task that failed by itself
	// Guarded by the runtime's tasks.mu.
	reported bool
	addrs    map[uintptr]struct{} // addresses whose history holds a task failed by it
}

// Done is closed when the task has completed.
func (t *Task) Done() <-chan struct{} { return t.done }

// Err is the task's error, once Done is closed.
func (t *Task) Err() error { return t.err }

// Wait waits for the task, or for ctx to be done, and returns the task's
// error or ctx's. Returning the task's failure reports it (see Taskwait).
func (t *Task) Wait(ctx context.Context) error {
	select {
	case <-t.done:
	default:
		select {
		case <-t.done:
		case <-ctx.Done():
			return fmt.Errorf("goffload: waiting for task %d (%s): %w", t.ID, t.Name, ctx.Err())
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

// complete ends t with err; dep is the failure of the predecessor that made
// it fail, if that is why it failed. Of the tasks that t's completion makes
// ready, light ones go on here and the others on goroutines of their own.
func (r *Runtime) complete(t *Task, err error, dep *failure) { drive(r.completeLight(t, err, dep)) }

// completeLight ends t, starts the heavy continuation that its completion
// made ready on a goroutine of its own, and returns the light ones.
func (r *Runtime) completeLight(t *Task, err error, dep *failure) step {
	light, heavy := r.completeNext(t, err, dep)
	if heavy != nil {
		go drive(heavy)
	}
	return light
}

// completeThen is complete that returns what t's completion made ready as
// one step, for the caller to run on its own goroutine instead of waking
// another (see step).
func (r *Runtime) completeThen(t *Task, err error, dep *failure) step {
	return chain(r.completeNext(t, err, dep))
}

// completeNext ends t and returns the continuations of the tasks that its
// completion made ready: the light ones chained (see waitFor), and one
// other; the rest start goroutines of their own.
func (r *Runtime) completeNext(t *Task, err error, dep *failure) (light, heavy step) {
	ts := &r.tasks
	ts.mu.Lock()
	if t.completed { // abandoned by Stop (abandon): its work's end changes nothing
		ts.mu.Unlock()
		r.Log.Printf(InfoOffload, -1, "task %d (%s), abandoned by Stop, ended: %v", t.ID, t.Name, err)
		return nil, nil
	}
	t.settle(err)
	if err != nil && t.rec.fn != nil {
		rec, preds := t.rec.fn, t.rec.preds
		t.rec.fn, t.rec.preds = nil, nil
		ts.mu.Unlock()
		r.recoverTask(t, rec, preds, err)
		return nil, nil
	}
	if t.rec.settled != nil {
		t.mu.Lock()
		t.rec.devSuccs = nil
		t.mu.Unlock()
	}
	var ready time.Time
	if t.rec.settled != nil {
		t.rec.doneAt = time.Now()
		for _, p := range t.rec.preds {
			if p.rec.doneAt.After(ready) {
				ready = p.rec.doneAt
			}
		}
	}
	t.rec.fn, t.rec.preds = nil, nil
	t.err = err
	if err != nil {
		t.fail = dep
		if dep == nil {
			t.fail = &failure{task: t}
		}
	}
	t.completed = true
	t.direct = nil
	succs := t.succs
	t.succs = nil
	delete(ts.live, t)
	f := t.fail
	keep := f != nil && !f.reported
	if keep && dep == nil {
		ts.failed[f] = struct{}{}
	}
	for _, addr := range t.addrs {
		st := ts.deps[addr]
		if st == nil {
			continue
		}
		st.refs--
		if keep {
			if f.addrs == nil {
				f.addrs = map[uintptr]struct{}{}
			}
			f.addrs[addr] = struct{}{}
		}
		ts.settle(addr, st)
	}
	var spawn []step
	if len(succs) > 0 {
		light, heavy, spawn = handOn(succs)
	}
	ts.mu.Unlock()
	close(t.done) // after the history: a waiter sees it settled
	if t.onDone != nil {
		t.onDone(err, ready)
	}
	if t.dev != nil && !t.dev.IsInitial() { // host work: no task waits for its enqueueing (see Spawn)
		if s := t.markEnqueued(); s != nil { // it never was, and never will be
			heavy, spawn = first(heavy, s, spawn)
		}
	}
	for _, c := range spawn {
		go drive(c)
	}
	return light, heavy
}

// recoverTask hands t, which failed with err, to rec (its Op.Recover) on a goroutine of its own once preds are done,
// and completes it with what rec returns. Until then t stays live: its
// dependents wait for it, on the host (its event, on the lost device,
// never fires: it is dropped so that new dependents do not wait on it).
//
// used, given to rec, says whether a task enqueued behind t's event on a
// device ran (its own work ended well): then what t did reached it, the
// host not knowing (t's device stopped before it said so, say).
func (r *Runtime) recoverTask(t *Task, rec func(error, bool) error, preds []*Task, err error) {
	t.mu.Lock()
	t.ev = nil // after this, no task is enqueued behind it (claim)
	succs := t.rec.devSuccs
	t.rec.devSuccs = nil
	t.mu.Unlock()
	r.Log.Printf(InfoOffload, -1, "task %d (%s) failed: %v: handed to its recovery", t.ID, t.Name, err)
	go func() {
		waitDone(preds)
		used := false
		for _, s := range succs {
			if s.rec.settled == nil {
				continue
			}
			<-s.rec.settled // its device ends it: t's event fired there, or failed with t's device
			used = used || s.rec.rawErr == nil
		}
		r.complete(t, rec(err, used), nil)
	}()
}

// eventFor returns p's event for t to wait on on a device, recording t
// as p's device successor (see devSuccs); nil if p has none (it
// completed, is about to, or is being recovered: the host waits).
func (p *Task) eventFor(t *Task) plugin.Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ev != nil && p.rec.settled != nil {
		p.rec.devSuccs = append(p.rec.devSuccs, t)
	}
	return p.ev
}

// dropDevSucc takes t off p's device successors.
func (p *Task) dropDevSucc(t *Task) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.rec.devSuccs = slices.DeleteFunc(p.rec.devSuccs, func(s *Task) bool { return s == t })
}

// settle records how t's own work ended, once, for a recovery that waits
// for it (see devSuccs): before t completes, which may wait for its
// predecessors.
func (t *Task) settle(err error) {
	if t.rec.settled == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.rec.isSettled {
		t.rec.rawErr, t.rec.isSettled = err, true
		close(t.rec.settled)
	}
}

// handOn counts a completion in each of succs and returns the
// continuations of those it made ready: the light ones chained, one other,
// and the rest. Called with the runtime's tasks.mu held. Not inlined, so
// that the completion of a task without successors keeps a small frame
// (a host task runs on a goroutine of its own, whose stack starts small).
//
//go:noinline
func handOn(succs []*Task) (light, heavy step, rest []step) {
	for _, sc := range succs {
		if sc.pending--; sc.pending > 0 {
			continue
		}
		c := sc.cont
		sc.cont = nil
		if sc.light {
			light = chain(light, c)
		} else {
			heavy, rest = first(heavy, c, rest)
		}
	}
	return light, heavy, rest
}

// first returns s as heavy if heavy is nil, else heavy and rest with s.
func first(heavy, s step, rest []step) (step, []step) {
	if heavy == nil {
		return s, rest
	}
	return heavy, append(rest, s)
}

// DepEntries is the number of addresses the dependence history holds, for
// tests of its bound.
func (r *Runtime) DepEntries() (addrs, failed int) {
	r.tasks.mu.Lock()
	defer r.tasks.mu.Unlock()
	return len(r.tasks.deps), len(r.tasks.failed)
}

// Spawn runs op on d as a task that starts when the tasks deps name are done.
// Predecessors whose events d's queues can wait on are waited for on the
// device (the host never sits between them); others are waited for on the
// host, first by polling with bounded yielding, then blocking. It never
// blocks on other tasks' work: what would is done on a goroutine.
func (r *Runtime) Spawn(d *Device, op Op, deps []Dep, fallback bool) *Task {
	t := &Task{Name: op.Name, dev: d, done: make(chan struct{}), onDone: op.Done}
	preds := r.register(t, deps)
	if op.Recover != nil {
		r.tasks.mu.Lock()
		t.rec.fn, t.rec.preds, t.rec.settled = op.Recover, preds, make(chan struct{})
		r.tasks.mu.Unlock()
	}
	var onHost, onDevice, later []*Task
	for _, p := range preds {
		if d.IsInitial() || p.dev == nil || p.dev.IsInitial() {
			onHost = append(onHost, p)
			continue
		}
		switch ev := p.event(); {
		case ev != nil && d.canWait(p, ev):
			onDevice = append(onDevice, p)
		case ev == nil && !finished(p):
			// Not enqueued yet (see when it is), or finishing (its event
			// retired): waitEnqueued tells them apart.
			later = append(later, p)
		default:
			onHost = append(onHost, p)
		}
	}
	if len(later) == 0 && len(onHost) == 0 { // the device waits for them all
		if next := r.enqueue(t, d, op, onDevice, fallback); next != nil {
			go drive(next) // the initial device's work
		}
		return t
	}
	if len(later) == 0 {
		runHere(r.afterHost(t, d, onHost, r.readyStep(t, d, op, preds, onHost, onDevice, fallback)))
		return t
	}
	// A device predecessor that was not enqueued yet (it waits on the host
	// itself) may be waited for on the device once it is.
	cont := func() step {
		for _, p := range later {
			if ev := p.event(); ev != nil && d.canWait(p, ev) {
				onDevice = append(onDevice, p)
			} else {
				onHost = append(onHost, p)
			}
		}
		return r.afterHost(t, d, onHost, r.readyStep(t, d, op, preds, onHost, onDevice, fallback))
	}
	if s := t.waitEnqueued(later, cont); s != nil {
		// They are all enqueued by now, or finishing (enqueued, their
		// events retired): classifying them and waiting does not block.
		runHere(s())
	}
	return t
}

// runHere runs s, a step that does not block (enqueueing), on the caller,
// and starts what it hands on on a goroutine of its own: the caller is the
// program, which must not run other tasks' work.
func runHere(s step) {
	if s == nil {
		return
	}
	if next := s(); next != nil {
		go drive(next)
	}
}

// readyStep is the step of ready.
func (r *Runtime) readyStep(t *Task, d *Device, op Op, preds, onHost, onDevice []*Task, fallback bool) step {
	return func() step { return r.ready(t, d, op, preds, onHost, onDevice, fallback) }
}

// ready enqueues t's work behind waits for onDevice, once onHost, the
// predecessors waited for on the host, are all done; preds are all of
// them. If one of onHost failed, t fails too, once preds are done.
func (r *Runtime) ready(t *Task, d *Device, op Op, preds, onHost, onDevice []*Task, fallback bool) step {
	if f := failedPred(onHost); f != nil { // they are all done
		if !allFinished(preds) { // a task never completes before one it depends on
			t.settle(depErr(t, f))
			go func() { waitDone(preds); r.complete(t, depErr(t, f), f) }()
			return nil
		}
		return r.completeThen(t, depErr(t, f), f)
	}
	return r.enqueue(t, d, op, onDevice, fallback)
}

// SpawnHost runs fn on the host as a task in the same dependence graph.
// It runs on a goroutine of its own if it is ready at once, and otherwise
// on the goroutine that completes its last predecessor (see step).
func (r *Runtime) SpawnHost(name string, fn func() error, deps []Dep) *Task {
	t := &Task{Name: name, dev: r.Initial, done: make(chan struct{})}
	preds := r.register(t, deps)
	body := func() step {
		if f := failedPred(preds); f != nil { // they are all done
			return r.completeThen(t, depErr(t, f), f)
		}
		ev := TargetEvent{Where: Where{Time: time.Now(), Device: r.Initial.Num, Task: t.ID}, Name: name, Nowait: true}
		if tool := r.Initial.tool; tool != nil {
			tool.TargetBegin(ev)
		}
		err := runAsTask(fn)
		if tool := r.Initial.tool; tool != nil {
			ev.Time, ev.Err = time.Now(), err
			tool.TargetEnd(ev)
		}
		return r.completeThen(t, err, nil)
	}
	if s := r.afterHost(t, r.Initial, preds, body); s != nil {
		go drive(s)
	}
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

// failedPred returns the failure of the first of preds that failed, once
// they are all done.
func failedPred(preds []*Task) *failure {
	waitDone(preds)
	for _, p := range preds {
		if p.err != nil {
			return p.fail
		}
	}
	return nil
}

// waitDone waits until every task of ts is done. A task never completes
// before a task it depends on, also when it fails early (its device was
// lost, its enqueue failed): its dependents, and the tasks created once its
// failure is reported (which depend on nothing), rely on that order.
func waitDone(ts []*Task) {
	for _, p := range ts {
		<-p.done
	}
}

// completeAfter ends t with err once preds are done, on a goroutine if it
// has to wait: the caller may be the one creating t.
func (r *Runtime) completeAfter(t *Task, err error, preds []*Task) {
	// t's work did not run: a recovery waiting for t's outcome (t being
	// its device successor) must not wait for t's predecessors, one of
	// which may be the recovering task.
	t.settle(err)
	if !allFinished(preds) {
		go func() {
			waitDone(preds)
			r.complete(t, err, nil)
		}()
		return
	}
	r.complete(t, err, nil)
}

// depErr is the error of t, which did not run because of f: it names t and
// the task that failed by itself, with that task's own error, whatever the
// number of tasks between them.
func depErr(t *Task, f *failure) error {
	where := ""
	if t.dev != nil {
		where = t.dev.Label() + ": "
	}
	return fmt.Errorf("goffload: %stask %d (%s) did not run: %w: task %d (%s) failed: %w",
		where, t.ID, t.Name, ErrDependency, f.task.ID, f.task.Name, f.task.err)
}

// enqueue puts t's work on a queue of d behind waits for preds, records the
// event dependents wait on, and completes t in the background. It returns
// the steps of the tasks that waited for t to be enqueued; on the initial
// device, the work itself as a step, for the caller to run where it does
// not hold anyone up.
func (r *Runtime) enqueue(t *Task, d *Device, op Op, preds []*Task, fallback bool) step {
	if err := op.check(d); err != nil {
		r.completeAfter(t, err, preds)
		return nil
	}
	if d.IsInitial() {
		return func() step {
			var err error
			if op.Initial != nil {
				err = runAsTask(func() error { return op.Initial(d, t.ID, fallback, nil) })
			}
			return r.completeThen(t, err, nil)
		}
	}
	// A predecessor whose event is gone and which has not completed is
	// finishing, or its work failed and is being done again (a recovery),
	// which may take as long as a re-run: t is enqueued once it completes,
	// off the caller, which may be the program creating t (or a placement
	// holding its lock). The others' events are taken first, so that one
	// failing after this is waited for on the device, where the wait
	// fails (see devSuccs).
	var buf [4]plugin.Event
	evs := buf[:0]
	for i, p := range preds {
		ev := p.eventFor(t)
		if ev == nil && !finished(p) {
			// t is no device successor of the others until it is
			// enqueued: their recoveries would wait for t, which waits
			// for p, which may wait for one of them.
			for _, q := range preds[:i] {
				q.dropDevSucc(t)
			}
			go func() {
				waitDone([]*Task{p})
				drive(r.enqueue(t, d, op, preds, fallback))
			}()
			return nil
		}
		evs = append(evs, ev)
	}
	all := preds // every predecessor the device waits for: their failure is t's
	// Follow a predecessor on its own queue if nothing came after it there:
	// the queue's order is the wait.
	var cq *cqueue
	var followed *Task
	for i, p := range preds {
		// Not one with a recovery: its work may fail and be done again
		// elsewhere, and what follows it on its queue would run on
		// without it. Its event's wait fails then (see devSuccs).
		if p.dev == d && !finished(p) && p.rec.settled == nil {
			if cq = d.follow(p); cq != nil {
				followed = p
				preds = append(preds[:i:i], preds[i+1:]...)
				evs = append(evs[:i:i], evs[i+1:]...)
				break
			}
		}
	}
	if cq == nil {
		var err error
		if cq, err = d.getQueue(op.Name); err != nil {
			r.completeAfter(t, err, all)
			return nil
		}
	}
	w := d.beginOn(op.Name, cq, t.ID, true)
	if followed != nil && d.tool != nil { // it waits by queue order
		d.tool.Wait(WaitEvent{Where: w.where(), For: followed.ID, ForName: followed.Name, OnDevice: true})
	}
	for i, p := range preds {
		ev := evs[i]
		if ev == nil { // it completed: the host looks at how
			start := time.Now()
			f := failedPred([]*Task{p})
			if d.tool != nil {
				d.tool.Wait(WaitEvent{Where: Where{Time: start, Device: d.Num, Queue: cq.id, Task: t.ID}, For: p.ID, ForName: p.Name, Dur: time.Since(start)})
			}
			if f != nil {
				w.depErr(t, f)
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
	// wait on it only if the work was all enqueued and ends on the queue; a
	// task that failed to enqueue, or that has work after the queue's
	// (staged copies), is waited for on the host.
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
	publish := w.first == nil && len(w.after) == 0
	d.qmu.Lock()
	t.cq = cq
	if publish {
		cq.last = t
	} else {
		cq.last = nil
	}
	d.qmu.Unlock()
	if publish {
		t.mu.Lock()
		t.ev = ev
		t.mu.Unlock()
	}
	wake := t.markEnqueued() // the tasks that waited for t to be enqueued
	if ev == nil {           // the device is failing: nothing to wait for but the queue
		go func() {
			err := w.finish()
			t.settle(err)
			r.finishTask(t, err, w.dep, all)
		}()
		return wake
	}
	// What completes t once ev fired; it blocks only where it must wait for
	// t's predecessors (failedPred), or has work after the queue's.
	complete := func(background bool) {
		err := ev.Synchronize()
		if err != nil {
			w.err(fmt.Errorf("goffload: %s: %s: %w", d.Label(), op.Name, err))
		} else {
			w.runAfter()
		}
		err = w.done(err == nil)
		t.settle(err)
		// Dependents created from now on see the task finishing (enqueued,
		// with no event) and wait for it on the host; those that took the
		// event already may still wait on it, closed (it fired: no wait).
		t.retire(ev)
		if !background && w.dep == nil && !allFinished(all) {
			// Not on the device's completer: it must not block. The
			// completion of its last predecessor finishes it.
			drive(r.waitFor(t, all, true, func() step { return r.finishNext(t, err, w.dep, all) }))
			return
		}
		r.finishTask(t, err, w.dep, all)
	}
	if fn, ok := ev.(plugin.FireNotifier); ok && len(w.after) == 0 {
		// No goroutine per task: the event's firing hands the completion
		// to the device's completer.
		fn.OnFire(func() { d.completer.add(complete) })
		return wake
	}
	go complete(true)
	return wake
}

// allFinished reports whether every task of ts has finished.
func allFinished(ts []*Task) bool {
	for _, p := range ts {
		if !finished(p) {
			return false
		}
	}
	return true
}

// completer runs the completions of a device's tasks, in the order their
// events fired, on a goroutine of its own while it has work: an event that
// fires hands its task's completion over without a goroutine waiting on
// each event. A completion must not block on another's.
type completer struct {
	mu      sync.Mutex
	fns     []func(background bool) // each called with false
	running bool
}

func (c *completer) add(f func(background bool)) {
	c.mu.Lock()
	c.fns = append(c.fns, f)
	start := !c.running
	c.running = true
	c.mu.Unlock()
	if start {
		go c.run()
	}
}

func (c *completer) run() {
	for {
		c.mu.Lock()
		if len(c.fns) == 0 {
			c.fns, c.running = nil, false // the backing array goes too
			c.mu.Unlock()
			return
		}
		f := c.fns[0]
		c.fns[0] = nil
		c.fns = c.fns[1:]
		c.mu.Unlock()
		f(false)
	}
}

// finishTask completes t: a predecessor's failure takes the place of t's
// own result (t's work was skipped or ran on data that is not there).
func (r *Runtime) finishTask(t *Task, err error, dep *failure, preds []*Task) {
	drive(r.finishNext(t, err, dep, preds))
}

// finishNext is finishTask, for a light step once preds are done: it
// returns the light continuations that t's completion made ready and
// starts the others on goroutines of their own.
func (r *Runtime) finishNext(t *Task, err error, dep *failure, preds []*Task) step {
	if dep == nil {
		if f := failedPred(preds); f != nil {
			err, dep = depErr(t, f), f
		}
	}
	return r.completeLight(t, err, dep)
}
