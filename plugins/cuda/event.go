package cuda

import (
	"fmt"
	"sync"

	"github.com/goffload/offload/internal/cudadrv"
	"github.com/goffload/offload/plugin"
)

// An event is a CUDA event and what the host knows of it: whether its
// record was issued on its queue's stream (issued), with which error — the
// queue's error state, which the event carries instead of a record — and
// whether the driver has reported it complete. Its CUDA event goes back to
// the device when the event is closed and nothing enqueued refers to it.
type event struct {
	d      *device
	issued chan struct{} // closed when the record was issued, or skipped
	err    error         // written before issued is closed
	// rq is the queue that recorded the event if the device is traced,
	// and rpos how many timed operations it had issued before the
	// record: those are reported before the event fires (trace.go).
	// Written before issued is closed.
	rq   *queue
	rpos uint64

	mu       sync.Mutex
	cu       cudadrv.Event // 0 once released
	recorded bool
	closed   bool
	refs     int  // enqueued records and waits not yet issued, and driver calls under way
	done     bool // the driver reported the record complete
}

// arm marks the event recorded.
func (e *event) arm() error {
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

// disarm undoes arm, for a record that was not enqueued.
func (e *event) disarm() {
	e.mu.Lock()
	e.recorded = false
	e.refs--
	e.mu.Unlock()
}

// ref takes a reference for a wait.
func (e *event) ref() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.recorded {
		return plugin.ErrNotRecorded
	}
	e.refs++
	return nil
}

func (e *event) unref() {
	e.mu.Lock()
	e.refs--
	e.mu.Unlock()
	e.maybeRelease()
}

// fire marks the record issued, with the error it carries.
func (e *event) fire(err error) {
	e.err = err
	close(e.issued)
}

// handle returns the CUDA event; the caller holds a reference.
func (e *event) handle() cudadrv.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cu
}

// waitable returns the CUDA event a stream waits on, or done if the record
// is complete (or the CUDA event released, which it is only then). The
// caller holds a reference.
func (e *event) waitable() (cudadrv.Event, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cu, e.done || e.cu == 0
}

// issuedErr waits for the record to be issued and returns its error;
// ErrNotRecorded if the event was never recorded.
func (e *event) issuedErr() error {
	e.mu.Lock()
	rec := e.recorded
	e.mu.Unlock()
	if !rec {
		return plugin.ErrNotRecorded
	}
	<-e.issued
	return e.err
}

// driverCall runs f on the CUDA event unless the record is known
// complete; f's nil result marks it complete.
func (e *event) driverCall(f func(cudadrv.Event) error) error {
	e.mu.Lock()
	if e.done || e.cu == 0 {
		e.mu.Unlock()
		return nil
	}
	cu := e.cu
	e.refs++
	e.mu.Unlock()
	err := e.d.with(func() error { return f(cu) })
	e.mu.Lock()
	e.refs--
	if err == nil {
		e.done = true
	}
	e.mu.Unlock()
	e.maybeRelease()
	return err
}

func (e *event) Synchronize() error {
	if err := e.issuedErr(); err != nil {
		if err != plugin.ErrNotRecorded {
			e.reportTimes()
		}
		return err
	}
	defer e.reportTimes()
	if err := e.d.alive(); err != nil {
		return err
	}
	if err := e.driverCall(e.d.drv.EventSynchronize); err != nil {
		return fmt.Errorf("%s: %w", e.d.label(), e.d.wrap(err))
	}
	return nil
}

func (e *event) Query() (bool, error) {
	e.mu.Lock()
	rec := e.recorded
	e.mu.Unlock()
	if !rec {
		return false, plugin.ErrNotRecorded
	}
	select {
	case <-e.issued:
	default:
		return false, nil
	}
	if e.err != nil {
		e.reportTimes()
		return true, e.err
	}
	if err := e.d.alive(); err != nil {
		e.reportTimes()
		return true, err
	}
	err := e.driverCall(e.d.drv.EventQuery)
	if cudadrv.Code(err) == cudadrv.ErrNotReady {
		return false, nil
	}
	e.reportTimes()
	if err != nil {
		return true, fmt.Errorf("%s: %w", e.d.label(), e.d.wrap(err))
	}
	return true, nil
}

// Close releases the event; waits already enqueued on it still work, and a
// wait enqueued after it on an event that fired does nothing.
func (e *event) Close() error {
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

// maybeRelease gives the CUDA event back to the device once the event is
// closed, nothing refers to it, and its record (if any) is complete.
func (e *event) maybeRelease() {
	e.mu.Lock()
	if !e.closed || e.refs > 0 || e.cu == 0 {
		e.mu.Unlock()
		return
	}
	if e.recorded && !e.done {
		select {
		case <-e.issued:
		default:
			e.mu.Unlock()
			return
		}
		if e.err == nil {
			// Issued: release it only once the driver says it is complete
			// (the device destroys it at Close otherwise).
			if e.d.alive() != nil || e.d.with(func() error { return e.d.drv.EventQuery(e.cu) }) != nil {
				e.mu.Unlock()
				return
			}
		}
		e.done = true
	}
	cu := e.cu
	e.cu = 0
	e.mu.Unlock()
	e.d.releaseEvent(e, cu)
}

// fired reports whether the event has fired: its record was issued with
// an error, or issued and complete (a device that is closed or lost fires
// its events: their Query says why). Once it has, the timed operations
// before it are reported.
func (e *event) fired() bool {
	select {
	case <-e.issued:
	default:
		return false
	}
	if e.err == nil && e.d.alive() == nil && cudadrv.Code(e.driverCall(e.d.drv.EventQuery)) == cudadrv.ErrNotReady {
		return false
	}
	e.reportTimes()
	return true
}

// OnFire runs f once the event has fired (plugin.FireNotifier): at once if
// it has, else on the device's poller goroutine, which queries the
// device's watched events while there are any — so the core needs no
// goroutine (and no OS thread blocked in cuEventSynchronize) per task.
func (e *event) OnFire(f func()) {
	if e.fired() {
		f()
		return
	}
	e.d.poller.Add(e.fired, f)
}
