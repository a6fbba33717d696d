package cuda

import (
	"sync/atomic"
	"time"

	"github.com/goffload/offload/internal/cudadrv"
)

// The device's side of the timing of queue operations (trace.go): its
// clock references and its pool of timing events.

// clockRef is a reference event and when it completed on the host's clock.
type clockRef struct {
	ev   cudadrv.Event
	base time.Time // just before its record was issued
	// When it completed, in nanoseconds after base. lo is the latest the
	// timings read prove: the estimate, which only grows. hi is when it was
	// seen done.
	lo   atomic.Int64
	hi   int64
	refs int // timings that use it, and 1 while it is tracing.ref; under tracing.mu
}

// prove raises r's lower bound to v nanoseconds after base (at most hi).
func (r *clockRef) prove(v time.Duration) {
	for n := min(int64(v), r.hi); ; {
		cur := r.lo.Load()
		if n <= cur || r.lo.CompareAndSwap(cur, n) {
			return
		}
	}
}

// ms is a duration in milliseconds.
func ms(v float32) time.Duration { return time.Duration(float64(v) * 1e6) }

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// clock returns the clock reference for an operation issued now, with a
// reference for the caller. It takes a new one if the last is too old. It
// returns nil if none can be had. With the device's context current.
func (tr *tracing) clock(d *device) *clockRef {
	tr.mu.Lock()
	if r := tr.ref; r != nil && (tr.refreshing || time.Since(r.base) < refreshClock) {
		r.refs++ // fresh, or another goroutine is taking the next one
		tr.mu.Unlock()
		return r
	}
	tr.mu.Unlock()
	tr.refMu.Lock()
	defer tr.refMu.Unlock()
	tr.mu.Lock()
	if r := tr.ref; r != nil && time.Since(r.base) < refreshClock { // taken while we waited
		r.refs++
		tr.mu.Unlock()
		return r
	}
	closed, s := tr.closed, tr.stream
	tr.refreshing = !closed
	tr.mu.Unlock()
	if closed {
		return nil
	}
	r := tr.newRef(d, s)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.refreshing = false
	if r == nil {
		return nil
	}
	if old := tr.ref; old != nil {
		tr.unref(old)
	}
	tr.ref = r
	return r
}

// newRef records a reference event on the device's stream s, creating it if
// 0, and waits for it. Under tr.refMu, on a goroutine locked to its thread.
func (tr *tracing) newRef(d *device, s cudadrv.Stream) *clockRef {
	if s == 0 {
		if err := d.with(func() (err error) {
			s, err = d.drv.StreamCreate(cudadrv.StreamNonBlocking)
			return err
		}); err != nil {
			return nil
		}
		tr.mu.Lock()
		tr.stream = s
		tr.mu.Unlock()
	}
	ev := tr.get(d)
	if ev == 0 {
		return nil
	}
	base := time.Now()
	if d.drv.EventRecord(ev, s) != nil || d.drv.EventSynchronize(ev) != nil {
		tr.put(d, ev)
		return nil
	}
	return &clockRef{ev: ev, base: base, hi: int64(time.Since(base)), refs: 2} // tr.ref's and the caller's
}

// unref drops a reference to r; under tr.mu.
func (tr *tracing) unref(r *clockRef) {
	if r.refs--; r.refs == 0 && !tr.closed {
		tr.free = append(tr.free, r.ev) // trimmed by release
	}
}

// get returns a timing event from the pool, or a new one. It returns 0 if
// none can be had.
func (tr *tracing) get(d *device) cudadrv.Event {
	tr.mu.Lock()
	if tr.closed {
		tr.mu.Unlock()
		return 0
	}
	if n := len(tr.free); n > 0 {
		ev := tr.free[n-1]
		tr.free = tr.free[:n-1]
		tr.mu.Unlock()
		return ev
	}
	tr.mu.Unlock()
	var ev cudadrv.Event
	if err := d.with(func() (err error) { // in the device's context, whatever the thread's is
		ev, err = d.drv.EventCreate(0) // timed: no EventDisableTiming
		return err
	}); err != nil {
		return 0
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.closed {
		_ = d.drv.EventDestroy(ev)
		return 0
	}
	if tr.live == nil {
		tr.live = map[cudadrv.Event]struct{}{}
	}
	tr.live[ev] = struct{}{}
	return ev
}

// put gives a timing event back to the pool.
func (tr *tracing) put(d *device, ev cudadrv.Event) { tr.release(d, []opTiming{{start: ev}}) }

// release gives the events and references of reported (or dropped) timings
// back.
func (tr *tracing) release(d *device, ts []opTiming) {
	tr.mu.Lock()
	if tr.closed {
		tr.mu.Unlock()
		return
	}
	for _, t := range ts {
		for _, ev := range [2]cudadrv.Event{t.start, t.end} {
			if ev != 0 {
				tr.free = append(tr.free, ev)
			}
		}
		if t.ref != nil {
			tr.unref(t.ref)
		}
	}
	tr.mu.Unlock()
	tr.trim(d)
}

// trim destroys the idle timing events past maxIdleTimers.
func (tr *tracing) trim(d *device) {
	tr.mu.Lock()
	var extra []cudadrv.Event
	if n := len(tr.free); n > maxIdleTimers {
		extra = append(extra, tr.free[maxIdleTimers:]...)
		clear(tr.free[maxIdleTimers:])
		tr.free = tr.free[:maxIdleTimers]
		for _, ev := range extra {
			delete(tr.live, ev)
		}
	}
	tr.mu.Unlock()
	if len(extra) > 0 && d.alive() == nil {
		d.with(func() error {
			for _, ev := range extra {
				_ = d.drv.EventDestroy(ev)
			}
			return nil
		})
	}
}

// close ends the timing at the device's Close. It returns every timing event
// (idle, in the queues' FIFOs, or a reference) and the reference stream, for
// the caller to destroy. Reports after it drop their timings.
func (tr *tracing) close() ([]cudadrv.Event, cudadrv.Stream) {
	tr.Trace(nil)
	tr.refMu.Lock()
	defer tr.refMu.Unlock()
	tr.life.Lock()
	defer tr.life.Unlock()
	tr.mu.Lock()
	defer tr.mu.Unlock()
	tr.closed = true
	evs := make([]cudadrv.Event, 0, len(tr.live))
	for ev := range tr.live {
		evs = append(evs, ev)
	}
	s := tr.stream
	tr.live, tr.free, tr.ref, tr.stream = nil, nil, nil, 0
	return evs, s
}
