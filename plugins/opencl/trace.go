package opencl

import (
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/goffload/offload/internal/cldrv"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/optrace"
)

// Timing the operations of tagged queues (plugin.Tracer): a tagged queue's
// launches, copies and waits on a traced device are enqueued with an event.
// Their CL_PROFILING_COMMAND_START and _END times are read once the command
// is complete. They are placed on the host's clock by a reference, refreshed
// every second. The reference is a marker on a queue of the device's own,
// finished, whose end the host saw just after. So times are late, if
// anything, by that latency. They are bounded by when the host issued the
// command and when it saw it complete.
//
// They are reported in each queue's order when the commands are retired. That
// is by the queue's Synchronize or Query, or before an event recorded after
// them fires (Synchronize, Query, OnFire). An emulated kernel is timed on the
// host's clock.

const refreshClock = time.Second

// tracing is a device's timing of its queues' operations.
type tracing struct {
	optrace.Tracer

	mu sync.Mutex
	// The reference: the host's time ref (with its monotonic reading) was the
	// device's profiling clock refDev. at is when it was taken.
	ref    time.Time
	refDev int64
	at     time.Time
	cq     cldrv.Queue // the reference's queue, made at the first
	closed bool
}

// qtiming is a queue's tag and the order of its reports.
type qtiming struct {
	order optrace.Order // under the queue's pendingList.mu
}

// Trace makes the device report its tagged queues' operations to f
// (plugin.Tracer). nil stops the reports.
func (d *device) Trace(f func(plugin.OpTime)) { d.tr.Trace(f) }

// timed returns the pending command of operation o, timed if o is.
func (q *queue) timed(o *op, kind plugin.OpKind, kernel string, bytes int64) *pending {
	t, ok := optrace.Op(o.tag, kind, kernel, bytes)
	pe := &pending{timed: ok && q.d.tr.On(), op: t}
	if pe.timed {
		pe.issued = time.Now()
	}
	return pe
}

// hostTimed adds an operation timed on the host's clock.
func (q *queue) hostTimed(o *op, kind plugin.OpKind, kernel string, start, end time.Time, err error) {
	pe := q.timed(o, kind, kernel, 0)
	if !pe.timed {
		return
	}
	pe.op.Start, pe.op.End, pe.op.Err, pe.host = start, end, err != nil, true
	q.p.push(q, *pe)
}

// toHost places a time of the device's profiling clock on the host's. The
// time has the reference's monotonic reading, as the host's other times
// (time.Now) have theirs. A time on the wall clock alone would be compared
// with them, and subtracted from them, on another clock. The system's
// adjustments move that clock apart from the monotonic one as the process
// ages.
func (t *tracing) toHost(d *device, ns uint64) time.Time {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.closed && (t.at.IsZero() || time.Since(t.at) > refreshClock) {
		t.refresh(d)
	}
	return t.ref.Add(time.Duration(int64(ns) - t.refDev))
}

// refresh takes a new reference; under t.mu.
func (t *tracing) refresh(d *device) {
	if t.cq == 0 {
		cq, err := d.lib.CreateQueue(d.ctx, d.cd.id, true, d.props)
		if err != nil {
			return
		}
		t.cq = cq
	}
	ev, err := d.lib.Marker(t.cq, nil)
	if err != nil {
		return
	}
	defer d.lib.ReleaseEvent(ev)
	if d.lib.Finish(t.cq) != nil {
		return
	}
	now := time.Now()
	end, err := d.lib.ProfilingInfo(ev, cldrv.ProfilingEnd)
	if err != nil {
		return
	}
	t.ref, t.refDev, t.at = now, int64(end), now
}

func (t *tracing) close(d *device) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	if t.cq != 0 {
		cq := t.cq
		t.cq = 0
		return d.lib.ReleaseQueue(cq)
	}
	return nil
}

// A pending command is one the driver works on that holds Go memory (pinned)
// or is timed.
type pending struct {
	ev     cldrv.Event
	pin    *runtime.Pinner
	timed  bool
	host   bool      // op's times are the host's (no ev)
	issued time.Time // when a timed command was issued: it started after
	op     plugin.OpTime
}

// pendingList is a queue's pending commands, in order.
type pendingList struct {
	mu   sync.Mutex
	list []pending
	head int
	next uint64 // commands ever pushed
	done uint64 // commands ever retired
}

// mark is the position after the commands pushed so far.
func (p *pendingList) mark() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.next
}

// push appends a command. When many are pending, it retires those at the head
// that are complete.
func (p *pendingList) push(q *queue, e pending) {
	p.mu.Lock()
	p.list = append(p.list, e)
	p.next++
	long := len(p.list)-p.head > 256
	p.mu.Unlock()
	if long {
		p.drain(q, ^uint64(0), false)
	}
}

// lastDone reports whether the last command pushed is complete. Then every
// one is, as the queue is in order. If it is not, lastDone flushes the queue.
func (p *pendingList) lastDone(q *queue) (bool, error) {
	p.mu.Lock() // held while the event is asked: drain releases it
	defer p.mu.Unlock()
	var ev cldrv.Event
	if p.head < len(p.list) {
		ev = p.list[len(p.list)-1].ev
	}
	if ev != 0 {
		st, err := q.d.lib.EventStatus(ev)
		switch {
		case err != nil:
			return true, err
		case st < 0:
			return true, fmt.Errorf("a command failed: %s", cldrv.Status(st).Name())
		case st > 0:
			q.d.lib.Flush(q.cq)
			return false, nil
		}
	}
	return true, nil
}

// drain retires the commands before position upto that are complete, in
// order, reporting the timed ones. all means every one, which the caller
// knows to be complete.
func (p *pendingList) drain(q *queue, upto uint64, all bool) {
	d := q.d
	p.mu.Lock()
	defer p.mu.Unlock()
	sink := d.tr.Sink()
	for p.head < len(p.list) && p.done < upto {
		e := &p.list[p.head]
		if e.ev != 0 && !all {
			st, err := d.lib.EventStatus(e.ev)
			if err == nil && st > 0 {
				break
			}
			if err != nil || st < 0 {
				d.lose(err)
			}
		}
		if e.timed && sink != nil {
			o := e.op
			if !e.host {
				s, err1 := d.lib.ProfilingInfo(e.ev, cldrv.ProfilingStart)
				en, err2 := d.lib.ProfilingInfo(e.ev, cldrv.ProfilingEnd)
				now := time.Now() // the command is complete: it ended before
				if err1 == nil && err2 == nil {
					// The reference places the device's times late by the
					// host's latency in seeing it done. A loaded machine
					// makes that milliseconds. What the host knows bounds
					// them.
					o.Start = clampTime(d.tr.toHost(d, s), e.issued, now)
					o.End = clampTime(d.tr.toHost(d, en), o.Start, now)
				} else {
					o.Start, o.End, o.Err = now, now, true
				}
			}
			q.t.order.Place(&o)
			sink(o)
		}
		p.retire(d, e)
	}
	p.compact()
}

// clampTime is t, or lo if t is before it, or hi if t is after it.
func clampTime(t, lo, hi time.Time) time.Time {
	if t.Before(lo) {
		t = lo
	}
	if t.After(hi) {
		t = hi
	}
	return t
}

// retire unpins and releases e; under p.mu.
func (p *pendingList) retire(d *device, e *pending) {
	if e.pin != nil {
		e.pin.Unpin()
	}
	if e.ev != 0 {
		d.lib.ReleaseEvent(e.ev)
	}
	*e = pending{}
	p.head++
	p.done++
}

func (p *pendingList) compact() {
	if p.head == len(p.list) {
		p.list, p.head = p.list[:0], 0
	} else if p.head > 64 && p.head*2 > len(p.list) {
		n := copy(p.list, p.list[p.head:])
		clear(p.list[n:])
		p.list, p.head = p.list[:n], 0
	}
}

// drop retires every command without reporting it (the device is lost).
func (p *pendingList) drop(d *device) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.head < len(p.list) {
		p.retire(d, &p.list[p.head])
	}
	p.compact()
}
