package core

import (
	"time"

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
		t.rec.fn, t.rec.preds, t.rec.settled = op.Recover, preds, make(chan struct{})
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
	cont := func() step {
		for _, p := range later {
			if enqueuedWait(d.spawnView(p)) == deviceWait {
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
	t := &Task{Name: name, dev: r.Initial}
	preds := r.register(t, deps)
	body := func() step {
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
	}
	if s := r.afterHost(t, r.Initial, preds, body); s != nil {
		go drive(s)
	}
	return t
}
