package core

import "time"

// A step is what a goroutine does for a task that is ready to go on: run
// host work, enqueue device work. It returns the step of a task that its
// own task's completion made ready, if any, so that a chain of dependent
// tasks runs on one goroutine, one after the other, with no goroutine woken
// per task (a park and a wake-up cost 5–50 µs on a small machine).
type step func() step

// drive runs s and the steps it hands on, one after the other.
func drive(s step) {
	for s != nil {
		s = s()
	}
}

// afterHost arranges for cont to run once every task of preds has
// completed, with no goroutine waiting for them: t becomes a successor of
// each pred not completed yet, and the completion of the last of them
// hands cont on (completeNext). It returns cont itself if nothing is left
// to wait for, for the caller to run. A tool hears of one host wait per
// predecessor, from now until t is ready.
func (r *Runtime) afterHost(t *Task, d *Device, preds []*Task, cont step) step {
	if d.tool != nil && len(preds) > 0 {
		cont = r.reportWaits(t, d, preds, time.Now(), cont)
	}
	ts := &r.tasks
	ts.mu.Lock()
	n := 0
	for _, p := range preds {
		if !p.completed {
			p.succs = append(p.succs, t)
			n++
		}
	}
	if n == 0 {
		ts.mu.Unlock()
		return cont
	}
	t.pending, t.cont = n, cont
	ts.mu.Unlock()
	return nil
}

// reportWaits wraps cont so that it first tells d's tool of t's host waits
// for preds, which began at start.
func (r *Runtime) reportWaits(t *Task, d *Device, preds []*Task, start time.Time, cont step) step {
	return func() step {
		dur := time.Since(start)
		for _, p := range preds {
			d.tool.Wait(WaitEvent{Where: Where{Time: start, Device: d.Num, Task: t.ID}, For: p.ID, ForName: p.Name, Dur: dur})
		}
		return cont()
	}
}
