package core

import (
	"context"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"time"

	"github.com/goffload/offload/internal/config"
	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/internal/workpool"
	"github.com/goffload/offload/tool"
)

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
		r.Log.Printf(config.InfoOffload, -1, "task %d (%s), abandoned by Stop, ended: %v", t.ID, t.Name, err)
		return nil, nil
	}
	t.settle(err)
	if err != nil && t.rec != nil && t.rec.fn != nil {
		rec, preds := t.rec.fn, t.rec.preds
		t.rec.fn, t.rec.preds = nil, nil
		ts.mu.Unlock()
		r.recoverTask(t, rec, preds, err)
		return nil, nil
	}
	ready := t.endRecovery()
	t.err = err
	if err != nil {
		t.fail = dep
		if dep == nil {
			t.fail = &failure{task: t}
		}
	}
	t.completed = true
	succs := t.succs
	t.succs = nil
	ts.live.remove(t)
	f := t.fail
	keep := f != nil && !f.reported
	if keep && dep == nil {
		ts.failed[f] = struct{}{}
	}
	ts.graph.complete(t, keep)
	var spawn []step
	if len(succs) > 0 {
		light, heavy, spawn = handOn(succs)
	}
	clear(t.succBuf[:]) // a completed task held by the program keeps none of them
	ts.mu.Unlock()
	t.finish() // after the history: a waiter sees it settled
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

// waitDone waits until every task of ts is done. A task never completes before
// a task it depends on. That holds also when it fails early: its device was
// lost, or its enqueue failed. Its dependents rely on that order. So do the
// tasks created once its failure is reported, which depend on nothing.
func waitDone(ts []*Task) {
	for _, p := range ts {
		if !p.fin.Load() {
			<-p.Done()
		}
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
	return Errorf("goffload: %stask %d (%s) did not run: %w: task %d (%s) failed: %w",
		where, t.ID, t.Name, ErrDependency, f.task.ID, f.task.Name, Quote(f.task.err))
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

// A step is what a goroutine does for a task that is ready to go on: run
// host work, enqueue device work. It returns the step of a task that its
// own task's completion made ready, if any. So a chain of dependent tasks
// runs on one goroutine, one after the other, with no goroutine woken per
// task. A park and a wake-up cost 5–50 µs on a small machine.
//
// A step is an interface, not a func, so that a record that holds its
// state (a work waiting for its task's predecessors) is a step without a
// closure allocated for it; stepFunc makes a func one.
type step interface{ next() step }

// stepFunc is a func as a step.
type stepFunc func() step

func (f stepFunc) next() step { return f() }

// drive runs s and the steps it hands on, one after the other.
func drive(s step) {
	for s != nil {
		s = s.next()
	}
}

// chain returns a step that runs a, then what a hands on, then b.
func chain(a, b step) step {
	switch {
	case a == nil:
		return b
	case b == nil:
		return a
	}
	return stepFunc(func() step { return chain(a.next(), b) })
}

// afterHost arranges for cont to run once every task of preds has
// completed, with no goroutine waiting for them (see waitFor). A tool hears
// of one host wait per predecessor, from now until t is ready.
func (r *Runtime) afterHost(t *Task, d *Device, preds []*Task, cont step) step {
	if d.tool != nil && len(preds) > 0 {
		cont = r.reportWaits(t, d, preds, time.Now(), cont)
	}
	return r.waitFor(t, preds, false, cont)
}

// waitFor makes t a successor of each task of preds not completed yet: the
// completion of the last of them hands cont on (completeNext). It returns
// cont itself if nothing is left to wait for, for the caller to run. A
// light cont never blocks and hands on only light steps: it runs where the
// predecessor completed, even on a device's completer; another runs where
// a host task completed it, or on a goroutine of its own.
func (r *Runtime) waitFor(t *Task, preds []*Task, light bool, cont step) step {
	if len(preds) == 0 {
		return cont
	}
	ts := &r.tasks
	ts.mu.Lock()
	n := int32(0)
	for _, p := range preds {
		if !p.completed {
			if p.succs == nil {
				p.succs = p.succBuf[:0]
			}
			p.succs = append(p.succs, t)
			n++
		}
	}
	if n == 0 {
		ts.mu.Unlock()
		return cont
	}
	t.pending, t.cont, t.light = n, cont, light
	ts.mu.Unlock()
	return nil
}

// reportWaits wraps cont so that it first tells d's tool of t's host waits
// for preds, which began at start.
func (r *Runtime) reportWaits(t *Task, d *Device, preds []*Task, start time.Time, cont step) step {
	return stepFunc(func() step {
		dur := time.Since(start)
		for _, p := range preds {
			d.tool.Wait(tool.WaitEvent{Where: tool.Where{Time: start, Device: d.Num, Task: t.ID}, For: p.ID, ForName: p.Name, Dur: dur})
		}
		return cont.next()
	})
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

// Waiting for tasks: Taskwait and WaitAll, and InTask, which refuses a
// wait from inside a task (it would wait for itself).

// runAsTask runs a task's body on the host. Its frame on the stack is how
// InTask knows that a goroutine runs a task (Go has no goroutine ids).
//
//go:noinline
func runAsTask(fn func() error) error { return fn() }

var runAsTaskName = runtime.FuncForPC(reflect.ValueOf(runAsTask).Pointer()).Name()

// A kernel's body, and the chunks of its loops, run below these functions:
// the entries table's kernel runners, a device process's reader that calls
// the body itself with LaunchHere, and the worker pool. Inside a kernel is
// inside a task too. The names come from the functions themselves.
var taskFrames = append([]string{runAsTaskName, workpool.WorkerFrame()}, entries.BodyFrames()...)

// InTask reports whether the calling goroutine runs a task's body: host
// work (Go), or a kernel of a task on the initial device. Goroutines that a
// task starts are not inside it.
func InTask() bool {
	pcs := make([]uintptr, 32)
	for {
		n := runtime.Callers(2, pcs)
		frames := runtime.CallersFrames(pcs[:n])
		for {
			f, more := frames.Next()
			if slices.Contains(taskFrames, f.Function) {
				return true
			}
			if !more {
				break
			}
		}
		if n < len(pcs) {
			return false
		}
		pcs = make([]uintptr, 2*len(pcs))
	}
}

// Taskwait waits for every task not completed yet, and for the synchronous
// constructs that went on in the background after their context was done.
// It returns the first error (by task number) among those tasks and the
// failures not reported yet, or ctx's error if it is done first.
// A failure is reported when Taskwait, Task.Wait or WaitAll returns it, or
// an error of a task it made fail. Once reported it is forgotten: Taskwait
// does not return it again, and tasks created afterwards do not depend on
// the failed task. Called from inside a task, Taskwait returns an error
// wrapping ErrInTask.
func (r *Runtime) Taskwait(ctx context.Context) error {
	if InTask() {
		return Errorf("goffload: taskwait: %w", ErrInTask)
	}
	ts := &r.tasks
	ts.mu.Lock()
	wait := make([]*Task, 0, ts.live.len()+len(ts.failed))
	for t := range ts.live.all {
		wait = append(wait, t)
	}
	for f := range ts.failed {
		wait = append(wait, f.task)
	}
	ts.mu.Unlock()
	var bg []chan struct{}
	for _, d := range r.Devices {
		bg = append(bg, d.background()...)
	}
	if r.Initial != nil {
		bg = append(bg, r.Initial.background()...)
	}
	for _, c := range bg {
		select {
		case <-c:
		case <-ctx.Done():
			return Errorf("goffload: taskwait: %w", ctx.Err())
		}
	}
	return WaitAll(ctx, wait)
}

// WaitAll waits for every task of ts and returns the first error among
// them by task number, or ctx's error if it is done first. It reports the
// failures it saw (see Taskwait).
func WaitAll(ctx context.Context, ts []*Task) error {
	sort.Slice(ts, func(i, j int) bool { return ts[i].ID < ts[j].ID })
	for _, t := range ts {
		if t.fin.Load() {
			continue
		}
		select {
		case <-t.Done():
		case <-ctx.Done():
			return Errorf("goffload: waiting for tasks: %w", ctx.Err())
		}
	}
	var first error
	for _, t := range ts {
		if t.err != nil {
			if first == nil {
				first = t.err
			}
			t.report()
		}
	}
	return first
}

// Enqueued reports whether t's device work has been enqueued (its event is
// recorded), for tests of the lowering.
func (t *Task) Enqueued() bool { return t.event() != nil }
