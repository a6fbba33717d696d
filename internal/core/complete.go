package core

import "github.com/goffload/offload/internal/config"

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
	if err != nil && t.rec.fn != nil {
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
	delete(ts.live, t)
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

// waitDone waits until every task of ts is done. A task never completes
// before a task it depends on, also when it fails early (its device was
// lost, its enqueue failed): its dependents, and the tasks created once its
// failure is reported (which depend on nothing), rely on that order.
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
