package core

import (
	"slices"
	"time"

	"github.com/goffload/offload/internal/config"
	"github.com/goffload/offload/plugin"
)

// recovery is what a task with a recovery (Op.Recover) keeps for it. Its
// settled is nil for the others, and the rest unused.
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
	r.Log.Printf(config.InfoOffload, -1, "task %d (%s) failed: %v: handed to its recovery", t.ID, t.Name, err)
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

// endRecovery forgets what t kept for a recovery, as t completes, and
// returns when the last of its predecessors completed (zero if t has no
// recovery: see Op.Done). Called with tasks.mu held.
func (t *Task) endRecovery() (ready time.Time) {
	if t.rec.settled != nil {
		t.mu.Lock()
		t.rec.devSuccs = nil
		t.mu.Unlock()
		t.rec.doneAt = time.Now()
		for _, p := range t.rec.preds {
			if p.rec.doneAt.After(ready) {
				ready = p.rec.doneAt
			}
		}
	}
	t.rec.fn, t.rec.preds = nil, nil
	return ready
}
