package core

import (
	"slices"
	"sync"
	"time"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/tool"
)

// Spawn runs op on d as a task that starts when the tasks deps name are done.
// Predecessors whose events d's queues can wait on are waited for on the
// device; the host never sits between them. Others are waited for on the
// host, first by polling with bounded yielding, then blocking. Spawn never
// blocks on other tasks' work: what would is done on a goroutine. How it
// waits for each predecessor is spawnWait's decision.
func (r *Runtime) Spawn(d *Device, op Op, deps []Dep, fallback bool) *Task {
	return r.SpawnIn(new(TaskRoom), d, op, deps, fallback)
}

// SpawnIn is Spawn that makes the task in room, a new one.
func (r *Runtime) SpawnIn(room *TaskRoom, d *Device, op Op, deps []Dep, fallback bool) *Task {
	room.t = Task{Name: op.Name, dev: d, onDone: op.Done}
	t := &room.t
	t.spare = &room.w
	preds := r.register(t, deps)
	if op.Recover != nil {
		r.tasks.mu.Lock()
		t.rec = &recovery{fn: op.Recover, preds: preds, settled: make(chan struct{})}
		r.tasks.mu.Unlock()
	}
	if allDeviceWaits(d, preds) { // the device waits for them all
		if next := r.enqueue(t, d, op, preds, fallback); next != nil {
			go drive(next) // the initial device's work
		}
		return t
	}
	r.spawnWaiting(t, d, op, preds, fallback)
	return t
}

// allDeviceWaits reports whether d waits for each of preds itself.
func allDeviceWaits(d *Device, preds []*Task) bool {
	for _, p := range preds {
		if spawnWait(d.spawnView(p)) != deviceWait {
			return false
		}
	}
	return true
}

// spawnWaiting is Spawn for a task t, made on d to run op, some of whose
// predecessors preds are waited for on the host, or are not enqueued yet.
func (r *Runtime) spawnWaiting(t *Task, d *Device, op Op, preds []*Task, fallback bool) {
	var onHost, onDevice, later []*Task
	for _, p := range preds {
		switch spawnWait(d.spawnView(p)) {
		case deviceWait:
			onDevice = append(onDevice, p)
		case laterWait:
			later = append(later, p)
		default:
			onHost = append(onHost, p)
		}
	}
	if len(later) == 0 && len(onHost) == 0 { // they were enqueued meanwhile
		if next := r.enqueue(t, d, op, onDevice, fallback); next != nil {
			go drive(next)
		}
		return
	}
	if len(later) == 0 {
		runHere(r.afterHost(t, d, onHost, r.readyStep(t, d, op, preds, onHost, onDevice, fallback)))
		return
	}
	// A device predecessor that was not enqueued yet (it waits on the host
	// itself) may be waited for on the device once it is.
	cont := stepFunc(func() step {
		for _, p := range later {
			if enqueuedWait(d.spawnView(p)) == deviceWait {
				onDevice = append(onDevice, p)
			} else {
				onHost = append(onHost, p)
			}
		}
		return r.afterHost(t, d, onHost, r.readyStep(t, d, op, preds, onHost, onDevice, fallback))
	})
	if s := t.waitEnqueued(later, cont); s != nil {
		// They are all enqueued by now, or finishing (enqueued, their
		// events retired): classifying them and waiting does not block.
		runHere(s.next())
	}
}

// runHere runs s, a step that does not block (enqueueing), on the caller. It
// starts what s hands on on a goroutine of its own. The caller is the program,
// which must not run other tasks' work.
func runHere(s step) {
	if s == nil {
		return
	}
	if next := s.next(); next != nil {
		go drive(next)
	}
}

// readyStep is the step of ready.
func (r *Runtime) readyStep(t *Task, d *Device, op Op, preds, onHost, onDevice []*Task, fallback bool) step {
	return stepFunc(func() step { return r.ready(t, d, op, preds, onHost, onDevice, fallback) })
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
	t := &Task{Name: name, dev: r.Initial}
	preds := r.register(t, deps)
	body := stepFunc(func() step {
		if f := failedPred(preds); f != nil { // they are all done
			return r.completeThen(t, depErr(t, f), f)
		}
		ev := tool.TargetEvent{Where: tool.Where{Time: time.Now(), Device: r.Initial.Num, Task: t.ID}, Name: name, Nowait: true}
		if tool := r.Initial.tool; tool != nil {
			tool.TargetBegin(ev)
		}
		err := runAsTask(fn)
		if tool := r.Initial.tool; tool != nil {
			ev.Time, ev.Err = time.Now(), err
			tool.TargetEnd(ev)
		}
		return r.completeThen(t, err, nil)
	})
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

// enqueue puts t's work on a queue of d behind waits for preds. It records the
// event dependents wait on, and completes t in the background. It returns the
// steps of the tasks that waited for t to be enqueued. On the initial device
// it also returns the work itself as a step. The caller runs it where it does
// not hold anyone up. enqueueWait decides how it waits for each of preds.
// mayFollow decides which it follows on its queue.
func (r *Runtime) enqueue(t *Task, d *Device, op Op, preds []*Task, fallback bool) step {
	if err := op.check(d); err != nil {
		r.completeAfter(t, err, preds)
		return nil
	}
	if d.IsInitial() {
		op := op // a copy of its own: the common path's stays on the stack
		return stepFunc(func() step {
			var err error
			if op.hasInitial() {
				err = runAsTask(func() error { return op.initial(d, t.ID, fallback, nil) })
			}
			return r.completeThen(t, err, nil)
		})
	}
	// A predecessor whose event is gone and which has not completed is
	// finishing. Or its work failed and is being done again (a recovery),
	// which may take as long as a re-run. Then t is enqueued once it
	// completes, off the caller. The caller may be the program creating t,
	// or a placement holding its lock. The others' events are taken first.
	// So one failing after this is waited for on the device, where the
	// wait fails (see devSuccs).
	var buf [4]plugin.Event
	evs := buf[:0]
	for i, p := range preds {
		ev := p.eventFor(t)
		if enqueueWait(seen(p, ev)) == laterWait {
			// t is no device successor of the others until it is
			// enqueued: their recoveries would wait for t, which waits
			// for p, which may wait for one of them.
			for _, q := range preds[:i] {
				q.dropDevSucc(t)
			}
			op := op
			go func() {
				waitDone([]*Task{p})
				drive(r.enqueue(t, d, op, preds, fallback))
			}()
			return nil
		}
		evs = append(evs, ev)
	}
	all := preds // every predecessor the device waits for: their failure is t's
	var restBuf [4]*Task
	cq, followed, rest, evs := d.followOne(preds, evs, restBuf[:0])
	if cq == nil {
		var err error
		if cq, err = d.getQueue(op.Name); err != nil {
			r.completeAfter(t, err, all)
			return nil
		}
	}
	w := d.beginOn(op.Name, cq, t.ID, true, t.takeWork())
	w.args = op.ArgRoom
	if followed != nil && d.tool != nil { // it waits by queue order
		d.tool.Wait(tool.WaitEvent{Where: w.where(), For: followed.ID, ForName: followed.Name, OnDevice: true})
	}
	waitPreds(t, d, op.Name, w, rest, evs)
	if w.first == nil {
		op.enqueue(d, w)
	}
	ev := t.publish(d, op.Name, w)
	wake := t.markEnqueued() // the tasks that waited for t to be enqueued
	if ev == nil {           // the device is failing: nothing to wait for but the queue
		go func() {
			err := w.finish()
			t.settle(err)
			r.finishTask(t, err, w.dep, all)
		}()
		return wake
	}
	w.completing = completing{r: r, t: t, ev: ev, all: all}
	if fc, ok := ev.(fireCaller); ok && len(w.after) == 0 {
		fc.OnFireCall(fired, w) // as below, without a closure
		return wake
	}
	if fn, ok := ev.(plugin.FireNotifier); ok && len(w.after) == 0 {
		// No goroutine per task: the event's firing hands the completion
		// to the device's completer.
		fn.OnFire(func() { d.completer.add(w) })
		return wake
	}
	go w.complete(true)
	return wake
}

// followOne follows one of preds, whose events are evs, on its own queue
// if nothing came after it there: the queue's order is the wait. It
// returns the queue, nil if it follows none, and the others with their
// events: those in rest (appended to; preds is left as it is) and evs
// (the caller's, changed in place).
func (d *Device) followOne(preds []*Task, evs []plugin.Event, rest []*Task) (*cqueue, *Task, []*Task, []plugin.Event) {
	for i, p := range preds {
		if !mayFollow(d.followView(p)) {
			continue
		}
		if cq := d.follow(p); cq != nil {
			rest = append(append(rest, preds[:i]...), preds[i+1:]...)
			return cq, p, rest, slices.Delete(evs, i, i+1)
		}
	}
	return nil, nil, preds, evs
}

// waitPreds enqueues on w, t's work on d, the waits for preds, whose events
// are evs. It waits on the device where p has an event. Else p completed, and
// it waits on the host, which looks at how p ended (see enqueueWait).
func waitPreds(t *Task, d *Device, op string, w *work, preds []*Task, evs []plugin.Event) {
	for i, p := range preds {
		ev := evs[i]
		if ev == nil { // it completed: the host looks at how
			start := time.Now()
			f := failedPred([]*Task{p})
			if d.tool != nil {
				d.tool.Wait(tool.WaitEvent{Where: tool.Where{Time: start, Device: d.Num, Queue: w.cq.id, Task: t.ID}, For: p.ID, ForName: p.Name, Dur: time.Since(start)})
			}
			if f != nil {
				w.depErr(t, f)
			}
			continue
		}
		if d.tool != nil {
			d.tool.Wait(tool.WaitEvent{Where: w.where(), For: p.ID, ForName: p.Name, OnDevice: true})
		}
		if err := w.cq.Queue.Wait(ev); err != nil {
			w.err(Errorf("goffload: %s: %s: waiting for task %d: %w", d.Label(), op, p.ID, err))
		}
	}
}

// publish records the event that marks the end of t's work on w's queue, and
// returns it. It returns nil if the device failed to make or record it.
// Dependents wait on it only if the work was all enqueued and ends on the
// queue. Some tasks are waited for on the host: one that failed to enqueue, or
// that has work after the queue's (staged copies).
func (t *Task) publish(d *Device, op string, w *work) plugin.Event {
	ev, err := d.Dev.NewEvent()
	if err == nil {
		if err = w.cq.Queue.Record(ev); err != nil {
			ev.Close()
		}
	}
	if err != nil {
		w.err(Errorf("goffload: %s: %s: %w", d.Label(), op, err))
		ev = nil
	}
	publish := w.first == nil && len(w.after) == 0
	d.qmu.Lock()
	t.cq = w.cq
	if publish {
		w.cq.last = t
	} else {
		w.cq.last = nil
	}
	d.qmu.Unlock()
	if publish {
		t.mu.Lock()
		t.ev = ev
		t.mu.Unlock()
	}
	return ev
}

// fireCaller is a plugin.FireNotifier that also runs f(x) when the event
// fires (opqueue.Event.OnFireCall): a completion handed over that way
// allocates no closure.
type fireCaller interface {
	OnFireCall(f func(x any), x any)
}

// fired hands the completion of x, a *work whose event fired, to its
// device's completer.
func fired(x any) {
	w := x.(*work)
	w.d.completer.add(w)
}

// completing is what a task's completion needs of it, in its work: the
// runtime, the task, the event that ends its work and its predecessors.
type completing struct {
	r   *Runtime
	t   *Task
	ev  plugin.Event
	all []*Task
}

// complete completes w's task once its event fired; it blocks only where
// it must wait for the task's predecessors (failedPred), or has work after
// the queue's. background says it is not on the device's completer.
func (w *work) complete(background bool) {
	r, t, d, ev, all := w.completing.r, w.completing.t, w.d, w.completing.ev, w.completing.all
	w.completing = completing{}
	err := ev.Synchronize()
	if err != nil {
		w.err(Errorf("goffload: %s: %s: %w", d.Label(), w.op, err))
	} else {
		w.runAfter()
	}
	err = w.done(err == nil)
	t.settle(err)
	// Work that ended well keeps its event until t completes: a dependent
	// made while t finishes waits on it, fired, on its device (no wait),
	// and is enqueued at once, not by t's completion. Dependents made
	// later see t completed. Those of work that failed (its device may be
	// lost, its task recovered elsewhere) wait for t on the host from now
	// on. Those that took the event may still wait on it, closed (it
	// fired: no wait).
	if err != nil {
		t.retire(ev)
		ev = nil
	}
	if !background && w.dep == nil && !allFinished(all) {
		// Not on the device's completer: it must not block. The
		// completion of its last predecessor finishes it: w is that
		// step (next), its state kept in w.completing, its error in
		// w.first (done returned it), with no closure allocated.
		w.completing = completing{r: r, t: t, ev: ev, all: all}
		drive(r.waitFor(t, all, true, w))
		return
	}
	next := r.finishNext(t, err, w.dep, all)
	t.retireIf(ev)
	drive(next)
}

// next finishes w's task once the predecessors it waited for after its
// work ended have completed (complete): the step waitFor hands on.
func (w *work) next() step {
	r, t, ev, all := w.completing.r, w.completing.t, w.completing.ev, w.completing.all
	w.completing = completing{}
	next := r.finishNext(t, w.first, nil, all)
	t.retireIf(ev)
	return next
}

// completer runs the completions of a device's tasks, in the order their
// events fired, on a goroutine of its own while it has work. An event that
// fires hands its task's completion over, with no goroutine waiting on
// each event. A completion must not block on another's.
type completer struct {
	mu      sync.Mutex
	fns     []*work // each completed with background false, from fns[head]
	head    int
	running bool
	// start is c.run, made once: a go statement of a method value would
	// allocate its closure each time.
	start func()
}

// keptCompletions is the most completions an idle completer keeps room
// for.
const keptCompletions = 256

func (c *completer) add(w *work) {
	c.mu.Lock()
	if len(c.fns) == cap(c.fns) && c.head >= len(c.fns)/2 && c.head > 0 {
		// Full, and half of it done: the rest moves to the front, so a
		// completer that never idles keeps to its backlog's room.
		n := copy(c.fns, c.fns[c.head:])
		clear(c.fns[n:])
		c.fns, c.head = c.fns[:n], 0
	}
	c.fns = append(c.fns, w)
	start := !c.running
	c.running = true
	if start && c.start == nil {
		c.start = c.run
	}
	c.mu.Unlock()
	if start {
		go c.start()
	}
}

func (c *completer) run() {
	for {
		c.mu.Lock()
		if c.head == len(c.fns) {
			c.fns, c.head, c.running = c.fns[:0], 0, false // its room is kept
			if cap(c.fns) > keptCompletions {
				c.fns = nil
			}
			c.mu.Unlock()
			return
		}
		w := c.fns[c.head]
		c.fns[c.head] = nil
		c.head++
		c.mu.Unlock()
		w.complete(false)
	}
}

// How a task on a device waits for each of its predecessors is decided
// here, from what a look at the predecessor shows (a predView), by pure
// functions; Spawn and enqueue carry the decisions out.

// A wait is how a task waits for one of its predecessors.
type wait uint8

const (
	// hostWait: the host waits for the predecessor to complete, or looks
	// at how it ended if it has.
	hostWait wait = iota
	// deviceWait: the task's queue waits on the predecessor's event.
	deviceWait
	// laterWait: the predecessor has no event and has not completed. It
	// is not enqueued yet, finishing (its event retired) or recovering:
	// Spawn decides again once it is enqueued, enqueue once it completes.
	laterWait
)

// predView is what a look at one predecessor of a task on a device shows.
// Only what a decision needs is looked at: whether the device can wait on
// the event only with one, whether it finished only without.
type predView struct {
	host     bool // the task or the predecessor runs on the initial device
	event    bool // it has an event: it is enqueued and not finishing
	canWait  bool // the device's queues can wait on its event
	finished bool // it has completed
	// For following it on its queue (followView).
	sameDevice bool // it is on the task's device
	recovers   bool // it has a recovery (Op.Recover)
}

// spawnWait is how Spawn waits for a predecessor it sees as v.
func spawnWait(v predView) wait {
	switch {
	case v.host:
		return hostWait
	case v.event && v.canWait:
		return deviceWait
	case !v.event && !v.finished:
		// Not enqueued yet (see when it is), or finishing (its event
		// retired): waitEnqueued tells them apart.
		return laterWait
	}
	return hostWait
}

// enqueuedWait is how Spawn waits for a predecessor it saw as laterWait,
// seen as v once it is enqueued or finishing.
func enqueuedWait(v predView) wait {
	if v.event && v.canWait {
		return deviceWait
	}
	return hostWait
}

// enqueueWait is how enqueue waits for a predecessor that Spawn left to the
// device, seen as v. An event is waited for on the device. A predecessor
// without one is waited for once it completes.
func enqueueWait(v predView) wait {
	switch {
	case v.event:
		return deviceWait
	case !v.finished:
		return laterWait
	}
	return hostWait // it completed: the host looks at how
}

// mayFollow reports whether a task may follow a predecessor seen as v on
// the predecessor's own queue, if nothing came after it there: the queue's
// order is the wait. Not one with a recovery: its work may fail and be
// done again elsewhere, and what follows it on its queue would run on
// without it. Its event's wait fails then (see devSuccs).
func mayFollow(v predView) bool { return v.sameDevice && !v.finished && !v.recovers }

// seen is what a look at p's event ev shows: whether p has one, and if
// not, whether p has finished.
func seen(p *Task, ev plugin.Event) predView {
	if ev != nil {
		return predView{event: true}
	}
	return predView{finished: finished(p)}
}

// spawnView is what Spawn sees of p, a predecessor of a task on d.
func (d *Device) spawnView(p *Task) predView {
	if d.IsInitial() || p.dev == nil || p.dev.IsInitial() {
		return predView{host: true}
	}
	ev := p.event()
	v := seen(p, ev)
	if v.event {
		v.canWait = d.canWait(p, ev)
	}
	return v
}

// followView is what enqueue sees of p for following it on its queue.
func (d *Device) followView(p *Task) predView {
	if p.dev != d {
		return predView{}
	}
	return predView{sameDevice: true, finished: finished(p), recovers: p.rec != nil}
}
