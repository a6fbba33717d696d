package core

import "github.com/goffload/offload/plugin"

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

// enqueueWait is how enqueue waits for a predecessor that Spawn left to
// the device, seen as v: an event is waited for on the device, and a
// predecessor without one once it completes.
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
	return predView{sameDevice: true, finished: finished(p), recovers: p.rec.settled != nil}
}
