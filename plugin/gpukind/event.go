package gpukind

import (
	"fmt"
	"sync"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/devstate"
	"github.com/goffload/offload/plugin/firepoll"
)

// EventDriver is what a device's events ask of the kind's driver about their
// handles. The handles are of type H (a CUDA event, a cl_event). The kind
// promises that its methods return errors already in the plugin contract's
// terms, with the device's label. The events return them as they are.
type EventDriver[H comparable] interface {
	// Done reports whether the work before h is complete. After an error the
	// event counts as fired, with that error.
	Done(h H) (bool, error)
	// Wait blocks until the work before h is complete. It reports that as
	// Done does.
	Wait(h H) (bool, error)
	// Release takes h back: nothing refers to it any more. The kind may
	// keep it for a later NewHandle.
	Release(h H)
}

// A HandleMaker is an EventDriver whose handles are made with the event (a
// CUDA event). Other handles are made when the record is issued
// (Event.SetHandle), as an OpenCL marker's cl_event is.
type HandleMaker[H comparable] interface {
	// NewHandle returns a handle for a new event.
	NewHandle() (H, error)
}

// A Reporter reports the timed operations that a queue issued before position
// upto. It reports them once an event recorded there has fired. A kind whose
// queues time nothing passes nil.
type Reporter interface {
	Report(upto uint64)
}

// Events is a device's events. It holds the driver they ask, the poller that
// fires OnFire's functions, and the events whose handles are not released
// yet. A device holds one, made ready by Init. Its methods are safe for
// concurrent use.
type Events[H comparable] struct {
	drv    EventDriver[H]
	st     *devstate.State
	domain any
	poller firepoll.Poller

	mu   sync.Mutex
	live map[*Event[H]]struct{} // nil once closed
}

// Init makes s ready: the events of the device whose state is st. Events of
// sets with equal domains can be waited on by each other's queues. A domain
// is a CUDA driver's, or an OpenCL platform's.
func (s *Events[H]) Init(drv EventDriver[H], st *devstate.State, domain any) {
	s.drv, s.st, s.domain = drv, st, domain
	s.live = map[*Event[H]]struct{}{}
}

// NewEvent returns a new event of the device (plugin.Device's NewEvent). If
// the driver is a HandleMaker, the event gets a handle from NewHandle.
func (s *Events[H]) NewEvent() (plugin.Event, error) {
	if err := s.st.Alive(); err != nil {
		return nil, err
	}
	var h H
	if hm, ok := s.drv.(HandleMaker[H]); ok {
		var err error
		if h, err = hm.NewHandle(); err != nil {
			return nil, fmt.Errorf("%s: cannot create an event: %w", s.st.Label(), err)
		}
	}
	e := &Event[H]{set: s, h: h, issued: make(chan struct{})}
	s.mu.Lock()
	if s.live == nil { // closed meanwhile
		s.mu.Unlock()
		if h != *new(H) {
			s.drv.Release(h)
		}
		return nil, s.st.Alive()
	}
	s.live[e] = struct{}{}
	s.mu.Unlock()
	return e, nil
}

// Mine reports whether ev is an event of s.
func (s *Events[H]) Mine(ev plugin.Event) (*Event[H], bool) {
	e, ok := ev.(*Event[H])
	return e, ok && e.set == s
}

// CanWait reports whether a queue of s's device can wait on ev. It can for an
// event of a set of the same domain.
func (s *Events[H]) CanWait(ev plugin.Event) bool {
	e, ok := ev.(*Event[H])
	return ok && e.set.domain == s.domain
}

// Close takes the handles of the events not released yet, for the device's
// Close to destroy. Those events count as done, and release nothing later.
func (s *Events[H]) Close() []H {
	var zero H
	s.mu.Lock()
	live := s.live
	s.live = nil
	s.mu.Unlock()
	var hs []H
	for e := range live {
		e.mu.Lock()
		if e.h != zero {
			hs = append(hs, e.h)
		}
		e.h, e.done, e.released = zero, true, true
		e.mu.Unlock()
	}
	return hs
}

// release gives back e's handle h, which nothing refers to any more.
func (s *Events[H]) release(e *Event[H], h H) {
	var zero H
	s.mu.Lock()
	open := s.live != nil
	delete(s.live, e)
	s.mu.Unlock()
	if open && h != zero {
		s.drv.Release(h)
	}
}

// An Event is a device's event (plugin.Event, plugin.FireNotifier). It is a
// driver handle and what the host knows of it. The recording queue's
// goroutine issues its record (Fire). If the queue's error state has an
// error, it fires with that error instead of a record.
//
// The event counts the records and waits enqueued on it and not issued yet
// (Arm, Ref). Its handle goes back to the driver once three things hold. It
// is closed, nothing refers to it, and its record is complete.
type Event[H comparable] struct {
	set    *Events[H]
	issued chan struct{} // closed when the record was issued, or skipped
	err    error         // written before issued is closed
	// rep and rpos say which of a queue's timed operations come before the
	// record. They are written before issued is closed.
	rep  Reporter
	rpos uint64

	mu       sync.Mutex
	h        H // zero until the kind sets it, and once released
	recorded bool
	closed   bool
	released bool
	refs     int  // enqueued records and waits not yet issued, and driver calls under way
	done     bool // the driver reported the record complete
}

// Arm marks the event recorded, for a record about to be enqueued. The record
// holds a reference until Fire.
func (e *Event[H]) Arm() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.closed:
		return fmt.Errorf("%w: event is closed", plugin.ErrBadHandle)
	case e.recorded:
		return fmt.Errorf("%w: event is recorded already (events fire once; create another)", plugin.ErrBadHandle)
	}
	e.recorded = true
	e.refs++
	return nil
}

// Disarm undoes Arm, for a record that was not enqueued.
func (e *Event[H]) Disarm() {
	e.mu.Lock()
	e.recorded = false
	e.refs--
	e.mu.Unlock()
}

// Ref takes a reference for a wait about to be enqueued. It returns
// ErrNotRecorded if the event was never recorded.
func (e *Event[H]) Ref() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.recorded {
		return plugin.ErrNotRecorded
	}
	e.refs++
	return nil
}

// Unref drops a reference that Arm or Ref took, once its record or wait is
// issued.
func (e *Event[H]) Unref() {
	e.mu.Lock()
	e.refs--
	e.mu.Unlock()
	e.maybeRelease()
}

// SetHandle sets the event's handle, for a kind that makes it when the record
// is issued. It is called before Fire.
func (e *Event[H]) SetHandle(h H) {
	e.mu.Lock()
	e.h = h
	e.mu.Unlock()
}

// Handle returns the event's handle; the caller holds a reference.
func (e *Event[H]) Handle() H {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.h
}

// Fire marks the record issued, with the error it carries. If rep is not nil,
// it reports the recording queue's timed operations before upto once the
// event has fired. The recording queue's goroutine calls Fire once, then
// Unref.
func (e *Event[H]) Fire(err error, rep Reporter, upto uint64) {
	e.err, e.rep, e.rpos = err, rep, upto
	close(e.issued)
}

// Issued returns a channel closed once the record is issued; Err is its
// error then.
func (e *Event[H]) Issued() <-chan struct{} { return e.issued }

// Err returns the error the record was issued with; after Issued.
func (e *Event[H]) Err() error { return e.err }

// Waitable returns the handle a queue waits on. It also says whether the
// record is known complete; then there is nothing to wait for. The caller
// holds a reference, and the record is issued.
func (e *Event[H]) Waitable() (H, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.h, e.done || e.released
}

func (e *Event[H]) recordedNow() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.recorded
}

// report reports the timed operations before the record; the event has
// fired.
func (e *Event[H]) report() {
	if e.rep != nil {
		e.rep.Report(e.rpos)
	}
}

// driverCall runs f on the handle unless the record is known complete. f's
// true result marks it complete.
func (e *Event[H]) driverCall(f func(H) (bool, error)) (bool, error) {
	var zero H
	e.mu.Lock()
	if e.done || e.h == zero {
		e.mu.Unlock()
		return true, nil
	}
	h := e.h
	e.refs++
	e.mu.Unlock()
	complete, err := f(h)
	e.mu.Lock()
	e.refs--
	e.done = e.done || complete
	e.mu.Unlock()
	e.maybeRelease()
	return complete, err
}

// Synchronize waits until the event has fired and returns its error.
func (e *Event[H]) Synchronize() error {
	if !e.recordedNow() {
		return plugin.ErrNotRecorded
	}
	<-e.issued
	defer e.report()
	if e.err != nil {
		return e.err
	}
	if err := e.set.st.Alive(); err != nil {
		return err
	}
	_, err := e.driverCall(e.set.drv.Wait)
	return err
}

// Query reports whether the event has fired, and its error once it has.
func (e *Event[H]) Query() (bool, error) {
	if !e.recordedNow() {
		return false, plugin.ErrNotRecorded
	}
	select {
	case <-e.issued:
	default:
		return false, nil
	}
	err := e.err
	if err == nil {
		err = e.set.st.Alive()
	}
	if err == nil {
		var done bool
		if done, err = e.driverCall(e.set.drv.Done); !done && err == nil {
			return false, nil
		}
	}
	e.report()
	return true, err
}

// Close releases the event. Waits already enqueued on it still work. A wait
// enqueued after it on an event that fired does nothing.
func (e *Event[H]) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return fmt.Errorf("%w: event closed twice", plugin.ErrBadHandle)
	}
	e.closed = true
	e.mu.Unlock()
	e.maybeRelease()
	return nil
}

// maybeRelease gives the handle back once the event is closed and nothing
// refers to it. Its record must be complete too, if issued without an error.
// A handle whose record is not complete goes back at the device's Close.
func (e *Event[H]) maybeRelease() {
	var zero H
	e.mu.Lock()
	if !e.closed || e.refs > 0 || e.released {
		e.mu.Unlock()
		return
	}
	if e.recorded && !e.done && e.h != zero {
		select {
		case <-e.issued:
		default:
			e.mu.Unlock()
			return
		}
		if e.err == nil {
			if done, err := e.set.drv.Done(e.h); err != nil || !done {
				e.mu.Unlock()
				return
			}
		}
		e.done = true
	}
	h := e.h
	e.h, e.released = zero, true
	e.mu.Unlock()
	e.set.release(e, h)
}

// fired reports whether the event has fired. It has if its record was issued
// with an error, or issued and complete. A device that is closed or lost
// fires its events, and their Query says why. Once the event has fired, the
// timed operations before it are reported.
func (e *Event[H]) fired() bool {
	select {
	case <-e.issued:
	default:
		return false
	}
	if e.err == nil && e.set.st.Alive() == nil {
		if done, err := e.driverCall(e.set.drv.Done); !done && err == nil {
			return false
		}
	}
	e.report()
	return true
}

// OnFire runs f once the event has fired (plugin.FireNotifier). If it has, f
// runs at once. Else it runs on the device's poller goroutine. That goroutine
// asks the driver about the device's watched events while there are any. So
// the core needs no goroutine per task, and no OS thread blocked in the
// driver.
func (e *Event[H]) OnFire(f func()) {
	if e.fired() {
		f()
		return
	}
	e.set.poller.Add(e.fired, f)
}
