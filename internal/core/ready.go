package core

import (
	"time"

	"github.com/goffload/offload/tool"
)

// A step is what a goroutine does for a task that is ready to go on: run
// host work, enqueue device work. It returns the step of a task that its
// own task's completion made ready, if any. So a chain of dependent tasks
// runs on one goroutine, one after the other, with no goroutine woken per
// task. A park and a wake-up cost 5–50 µs on a small machine.
type step func() step

// drive runs s and the steps it hands on, one after the other.
func drive(s step) {
	for s != nil {
		s = s()
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
	return func() step { return chain(a(), b) }
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
	t.pending, t.cont, t.light = n, cont, light
	ts.mu.Unlock()
	return nil
}

// reportWaits wraps cont so that it first tells d's tool of t's host waits
// for preds, which began at start.
func (r *Runtime) reportWaits(t *Task, d *Device, preds []*Task, start time.Time, cont step) step {
	return func() step {
		dur := time.Since(start)
		for _, p := range preds {
			d.tool.Wait(tool.WaitEvent{Where: tool.Where{Time: start, Device: d.Num, Task: t.ID}, For: p.ID, ForName: p.Name, Dur: dur})
		}
		return cont()
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
