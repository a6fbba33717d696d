package core

import (
	"fmt"
	"testing"
)

// TestTaskWaitDecisions: how a task on a device waits for a predecessor,
// for each thing a look at the predecessor can show.
func TestTaskWaitDecisions(t *testing.T) {
	for _, c := range []struct {
		name                   string
		v                      predView
		spawn, enqueued, enque wait
	}{
		{"host work", predView{host: true}, hostWait, hostWait, laterWait},
		{"host work, finished", predView{host: true, finished: true}, hostWait, hostWait, hostWait},
		{"an event the device waits on", predView{event: true, canWait: true}, deviceWait, deviceWait, deviceWait},
		{"an event of another kind", predView{event: true}, hostWait, hostWait, deviceWait},
		{"not enqueued yet, or finishing", predView{}, laterWait, hostWait, laterWait},
		{"completed", predView{finished: true}, hostWait, hostWait, hostWait},
	} {
		if got := spawnWait(c.v); got != c.spawn {
			t.Errorf("%s: spawnWait = %d, want %d", c.name, got, c.spawn)
		}
		if got := enqueuedWait(c.v); got != c.enqueued {
			t.Errorf("%s: enqueuedWait = %d, want %d", c.name, got, c.enqueued)
		}
		if c.v.host {
			continue // Spawn waits for it on the host: enqueue never sees it
		}
		if got := enqueueWait(c.v); got != c.enque {
			t.Errorf("%s: enqueueWait = %d, want %d", c.name, got, c.enque)
		}
	}
}

// TestTaskWaitDecisionsSafe: over every view, no decision waits on the
// device for a predecessor without an event, Spawn waits on the device
// only where the device can, nothing finished is waited for later, and
// a task follows only an unfinished predecessor on its own device that
// has no recovery.
func TestTaskWaitDecisionsSafe(t *testing.T) {
	for bits := range 1 << 6 {
		v := predView{
			host: bits&1 != 0, event: bits&2 != 0, canWait: bits&4 != 0,
			finished: bits&8 != 0, sameDevice: bits&16 != 0, recovers: bits&32 != 0,
		}
		name := fmt.Sprintf("%+v", v)
		for _, d := range []struct {
			fn string
			w  wait
		}{{"spawnWait", spawnWait(v)}, {"enqueuedWait", enqueuedWait(v)}, {"enqueueWait", enqueueWait(v)}} {
			if d.w == deviceWait && !v.event {
				t.Errorf("%s: %s waits on the device without an event", name, d.fn)
			}
			if d.w == laterWait && (v.finished || v.event) {
				t.Errorf("%s: %s waits later for a predecessor it can wait for now", name, d.fn)
			}
		}
		if spawnWait(v) == deviceWait && (v.host || !v.canWait) {
			t.Errorf("%s: spawnWait waits on a device that cannot wait", name)
		}
		if enqueuedWait(v) == deviceWait && !v.canWait { // never host work: it is laterWait first
			t.Errorf("%s: enqueuedWait waits on a device that cannot wait", name)
		}
		if v.host && spawnWait(v) != hostWait {
			t.Errorf("%s: Spawn does not wait for host work on the host", name)
		}
		if mayFollow(v) != (v.sameDevice && !v.finished && !v.recovers) {
			t.Errorf("%s: mayFollow = %v", name, mayFollow(v))
		}
	}
}

// TestTaskSpawnView: what Spawn and enqueue see of a predecessor. Host
// work is waited for on the host; an event is waited for on a device that
// can wait on it; a task not enqueued yet is decided later; only a task on
// the same device, unfinished and without a recovery, is followed.
func TestTaskSpawnView(t *testing.T) {
	r := taskRuntime()
	fa, fb := newFakeDevice(0), newFakeDevice(1)
	a, b := &Device{Num: 0, Dev: fa}, &Device{Num: 1, Dev: fb}
	task := func(d *Device) *Task { return &Task{dev: d, done: make(chan struct{})} }
	if v := a.spawnView(task(r.Initial)); !v.host || spawnWait(v) != hostWait {
		t.Errorf("host work: %+v, want on the host", v)
	}
	if v := r.Initial.spawnView(task(a)); !v.host || spawnWait(v) != hostWait {
		t.Errorf("a device task, for host work: %+v, want on the host", v)
	}
	p := task(a)
	if v := b.spawnView(p); v.host || spawnWait(v) != laterWait {
		t.Errorf("a device task not enqueued yet: %+v, want later", v)
	}
	ev, err := fa.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Close()
	p.ev = ev
	if v := a.spawnView(p); spawnWait(v) != deviceWait {
		t.Errorf("an event on its own device: %+v, want on the device", v)
	}
	if v := b.spawnView(p); spawnWait(v) != hostWait {
		t.Errorf("an event another device cannot wait on: %+v, want on the host", v)
	}
	fb.ForeignWait = true
	if v := b.spawnView(p); spawnWait(v) != deviceWait {
		t.Errorf("an event another device can wait on: %+v, want on the device", v)
	}
	if v := b.followView(p); mayFollow(v) {
		t.Errorf("a task on another device: %+v, followed", v)
	}
	if v := a.followView(p); !mayFollow(v) {
		t.Errorf("a task on the same device, not finished: %+v, not followed", v)
	}
	p.rec = &recovery{settled: make(chan struct{})}
	if v := a.followView(p); mayFollow(v) {
		t.Errorf("a task with a recovery: %+v, followed", v)
	}
	p.ev = nil
	p.finish()
	if v := b.spawnView(p); !v.finished || spawnWait(v) != hostWait || enqueueWait(v) != hostWait {
		t.Errorf("a completed task: %+v, want on the host", v)
	}
	if v := a.followView(p); mayFollow(v) {
		t.Errorf("a completed task: %+v, followed", v)
	}
}
