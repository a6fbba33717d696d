// The fake driver's streams and events.

package cudafake

import (
	"sync"
	"time"

	"github.com/goffload/offload/internal/cudadrv"
)

// StreamCreate is the fake cuStreamCreate.
func (d *Driver) StreamCreate(flags uint32) (cudadrv.Stream, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, err := d.cur("cuStreamCreate")
	if err != nil {
		return 0, err
	}
	s := &stream{ctx: c}
	s.cond = sync.NewCond(&s.mu)
	h := cudadrv.Stream(d.handle())
	d.streams[h] = s
	return h, nil
}

// enqueue adds op to the stream; its goroutine runs the operations in
// order.
func (s *stream) enqueue(d *Driver, op func()) {
	s.mu.Lock()
	s.ops = append(s.ops, op)
	s.busy++
	if !s.run {
		s.run = true
		go s.loop(d.cfg.OpDelay)
	}
	s.mu.Unlock()
}

func (s *stream) loop(delay time.Duration) {
	for {
		s.mu.Lock()
		if len(s.ops) == 0 {
			s.run = false
			s.mu.Unlock()
			return
		}
		op := s.ops[0]
		s.ops = s.ops[1:]
		s.mu.Unlock()
		if delay > 0 {
			time.Sleep(delay)
		}
		op()
		s.mu.Lock()
		s.busy--
		s.cond.Broadcast()
		s.mu.Unlock()
	}
}

// drain waits until every operation enqueued so far is done.
func (s *stream) drain() {
	s.mu.Lock()
	for s.busy > 0 {
		s.cond.Wait()
	}
	s.mu.Unlock()
}

func (d *Driver) stream(fn string, h cudadrv.Stream) (*stream, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.ready(fn); err != nil {
		return nil, err
	}
	s := d.streams[h]
	if s == nil {
		return nil, fail(fn, cudadrv.ErrInvalidHandle)
	}
	return s, nil
}

// StreamSynchronize is the fake cuStreamSynchronize.
func (d *Driver) StreamSynchronize(h cudadrv.Stream) error {
	s, err := d.stream("cuStreamSynchronize", h)
	if err != nil {
		return err
	}
	s.drain()
	return d.sticky("cuStreamSynchronize", s.ctx)
}

// StreamQuery is the fake cuStreamQuery.
func (d *Driver) StreamQuery(h cudadrv.Stream) error {
	s, err := d.stream("cuStreamQuery", h)
	if err != nil {
		return err
	}
	s.mu.Lock()
	busy := s.busy > 0
	s.mu.Unlock()
	if err := d.sticky("cuStreamQuery", s.ctx); err != nil {
		return err
	}
	if busy {
		return fail("cuStreamQuery", cudadrv.ErrNotReady)
	}
	return nil
}

// StreamWaitEvent is the fake cuStreamWaitEvent.
func (d *Driver) StreamWaitEvent(sh cudadrv.Stream, eh cudadrv.Event, flags uint32) error {
	const fn = "cuStreamWaitEvent"
	d.mu.Lock()
	if err := d.ready(fn); err != nil {
		d.mu.Unlock()
		return err
	}
	s, e := d.streams[sh], d.events[eh]
	if s == nil || e == nil {
		d.mu.Unlock()
		return fail(fn, cudadrv.ErrInvalidHandle)
	}
	if s.ctx.sticky != 0 {
		d.mu.Unlock()
		return fail(fn, s.ctx.sticky)
	}
	gen := e.recorded // the record of the time of the call
	d.mu.Unlock()
	s.enqueue(d, func() {
		d.mu.Lock()
		for e.done < gen && !e.dead {
			d.changed.Wait()
		}
		d.mu.Unlock()
	})
	return nil
}

// StreamDestroy is the fake cuStreamDestroy.
func (d *Driver) StreamDestroy(h cudadrv.Stream) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.ready("cuStreamDestroy_v2"); err != nil {
		return err
	}
	s := d.streams[h]
	if s == nil {
		return fail("cuStreamDestroy_v2", cudadrv.ErrInvalidHandle)
	}
	delete(d.streams, h) // its pending work still runs, as the driver's does
	return nil
}

// EventCreate is the fake cuEventCreate.
func (d *Driver) EventCreate(flags uint32) (cudadrv.Event, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, err := d.cur("cuEventCreate")
	if err != nil {
		return 0, err
	}
	h := cudadrv.Event(d.handle())
	d.events[h] = &event{ctx: c, timing: flags&cudadrv.EventDisableTiming == 0}
	return h, nil
}

// EventRecord is the fake cuEventRecord.
func (d *Driver) EventRecord(eh cudadrv.Event, sh cudadrv.Stream) error {
	const fn = "cuEventRecord"
	d.mu.Lock()
	if err := d.ready(fn); err != nil {
		d.mu.Unlock()
		return err
	}
	e, s := d.events[eh], d.streams[sh]
	if e == nil || s == nil {
		d.mu.Unlock()
		return fail(fn, cudadrv.ErrInvalidHandle)
	}
	if e.ctx != s.ctx {
		d.mu.Unlock()
		return fail(fn, cudadrv.ErrInvalidContext)
	}
	if s.ctx.sticky != 0 {
		d.mu.Unlock()
		return fail(fn, s.ctx.sticky)
	}
	e.recorded++
	gen := e.recorded
	d.mu.Unlock()
	s.enqueue(d, func() {
		d.mu.Lock()
		if e.done < gen {
			e.done, e.at = gen, time.Now()
		}
		d.changed.Broadcast()
		d.mu.Unlock()
	})
	return nil
}

// EventSynchronize is the fake cuEventSynchronize.
func (d *Driver) EventSynchronize(h cudadrv.Event) error {
	const fn = "cuEventSynchronize"
	d.mu.Lock()
	defer d.mu.Unlock()
	e, err := d.eventLocked(fn, h)
	if err != nil {
		return err
	}
	gen := e.recorded
	for e.done < gen && !e.dead {
		d.changed.Wait()
	}
	if e.ctx.sticky != 0 {
		return fail(fn, e.ctx.sticky)
	}
	return nil
}

// EventQuery is the fake cuEventQuery.
func (d *Driver) EventQuery(h cudadrv.Event) error {
	const fn = "cuEventQuery"
	d.mu.Lock()
	defer d.mu.Unlock()
	e, err := d.eventLocked(fn, h)
	if err != nil {
		return err
	}
	if e.ctx.sticky != 0 {
		return fail(fn, e.ctx.sticky)
	}
	if e.done < e.recorded {
		return fail(fn, cudadrv.ErrNotReady)
	}
	return nil
}

// EventElapsedTime is the fake cuEventElapsedTime: the time between the
// moments the streams ran the two events' last records, rounded to 0.5 µs
// (the real driver's resolution).
func (d *Driver) EventElapsedTime(start, end cudadrv.Event) (float32, error) {
	const fn = "cuEventElapsedTime"
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.ready(fn); err != nil {
		return 0, err
	}
	s, e := d.events[start], d.events[end]
	if s == nil || e == nil || !s.timing || !e.timing || s.recorded == 0 || e.recorded == 0 {
		return 0, fail(fn, cudadrv.ErrInvalidHandle)
	}
	for _, c := range []*context{s.ctx, e.ctx} {
		if c.sticky != 0 {
			return 0, fail(fn, c.sticky)
		}
	}
	if s.done < s.recorded || e.done < e.recorded {
		return 0, fail(fn, cudadrv.ErrNotReady)
	}
	const res = 500 * time.Nanosecond
	return float32(e.at.Sub(s.at).Round(res).Seconds() * 1e3), nil
}

// EventDestroy is the fake cuEventDestroy.
func (d *Driver) EventDestroy(h cudadrv.Event) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.eventLocked("cuEventDestroy_v2", h); err != nil {
		return err
	}
	delete(d.events, h) // a pending record still completes for waits already issued
	return nil
}

// eventLocked is the event of handle h for driver function fn, or fn's
// error (the driver not ready, or no such event); d.mu is held, as the
// event functions hold it throughout (stream is its twin for streams,
// which takes the lock itself).
func (d *Driver) eventLocked(fn string, h cudadrv.Event) (*event, error) {
	if err := d.ready(fn); err != nil {
		return nil, err
	}
	e := d.events[h]
	if e == nil {
		return nil, fail(fn, cudadrv.ErrInvalidHandle)
	}
	return e, nil
}
