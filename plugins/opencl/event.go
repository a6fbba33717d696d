package opencl

import (
	"fmt"
	"sync"

	"github.com/goffload/offload/internal/cldrv"
	"github.com/goffload/offload/plugin"
)

// An event is the cl_event of a marker and what the host knows of it:
// whether its record was issued on its queue (issued), with which error —
// the queue's error state, which the event carries instead of a marker —
// and whether the driver has reported it complete.
type event struct {
	d      *device
	issued chan struct{} // closed when the record was issued, or skipped
	err    error         // written before issued is closed
	// rq is the queue that recorded the event and rpos how many of its
	// pending commands came before the record: those are retired (their
	// times reported) before the event fires. Written before issued is
	// closed.
	rq   *queue
	rpos uint64

	mu       sync.Mutex
	cl       cldrv.Event // 0 until issued, and once released
	recorded bool
	closed   bool
	refs     int  // enqueued records and waits not yet issued, and driver calls under way
	done     bool // the driver reported the marker complete
}

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

func (e *event) disarm() {
	e.mu.Lock()
	e.recorded = false
	e.refs--
	e.mu.Unlock()
}

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

func (e *event) setCL(ev cldrv.Event) {
	e.mu.Lock()
	e.cl = ev
	e.mu.Unlock()
}

func (e *event) fire(err error) {
	e.err = err
	close(e.issued)
}

// waitable returns the cl_event a barrier waits on, 0 if the marker is
// complete. The caller holds a reference.
func (e *event) waitable() cldrv.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done {
		return 0
	}
	return e.cl
}

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

// driverCall runs f on the cl_event unless the marker is known complete;
// f's true result marks it complete. An error of f loses the device.
func (e *event) driverCall(f func(cldrv.Event) (bool, error)) (bool, error) {
	e.mu.Lock()
	if e.done || e.cl == 0 {
		e.mu.Unlock()
		return true, nil
	}
	cl := e.cl
	e.refs++
	e.mu.Unlock()
	complete, err := f(cl)
	if err != nil {
		err = e.d.lose(err)
		complete = true
	}
	e.mu.Lock()
	e.refs--
	e.done = e.done || complete
	e.mu.Unlock()
	e.maybeRelease()
	return complete, err
}

// status is f for driverCall: whether the marker is complete.
func (e *event) status(cl cldrv.Event) (bool, error) {
	st, err := e.d.lib.EventStatus(cl)
	switch {
	case err != nil:
		return false, err
	case st < 0:
		return false, fmt.Errorf("the work before an event failed: %s", cldrv.Status(st).Name())
	}
	return st == cldrv.Complete, nil
}

// report retires the commands of the recording queue before the event.
func (e *event) report() {
	if e.rq != nil {
		e.rq.p.drain(e.rq, e.rpos, false)
	}
}

func (e *event) Synchronize() error {
	if err := e.issuedErr(); err != nil {
		if err != plugin.ErrNotRecorded {
			e.report()
		}
		return err
	}
	if err := e.d.alive(); err != nil {
		return err
	}
	_, err := e.driverCall(func(cl cldrv.Event) (bool, error) {
		if err := e.d.lib.WaitForEvents([]cldrv.Event{cl}); err != nil {
			return false, err
		}
		return e.status(cl)
	})
	e.report()
	return err
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
	if e.err == nil {
		if err := e.d.alive(); err != nil {
			return true, err
		}
	}
	if e.err != nil {
		e.report()
		return true, e.err
	}
	done, err := e.driverCall(e.status)
	if !done {
		return false, nil
	}
	e.report()
	return true, err
}

// Close releases the event; waits already enqueued on it still work.
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

// maybeRelease releases the cl_event once the event is closed, nothing
// refers to it, and its marker (if issued) is complete; the device
// releases the others when it closes.
func (e *event) maybeRelease() {
	e.mu.Lock()
	if !e.closed || e.refs > 0 {
		e.mu.Unlock()
		return
	}
	if e.recorded && !e.done && e.cl != 0 {
		if st, err := e.d.lib.EventStatus(e.cl); err != nil || st != cldrv.Complete {
			e.mu.Unlock()
			return
		}
	}
	cl := e.cl
	e.cl = 0
	e.mu.Unlock()
	if cl != 0 {
		e.d.lib.ReleaseEvent(cl)
	}
	e.d.evmu.Lock()
	if e.d.evLive != nil {
		delete(e.d.evLive, e)
	}
	e.d.evmu.Unlock()
}

// release releases the cl_event, for the device's Close.
func (e *event) release() {
	e.mu.Lock()
	cl := e.cl
	e.cl, e.done = 0, true
	e.mu.Unlock()
	if cl != 0 {
		e.d.lib.ReleaseEvent(cl)
	}
}

// fired reports whether the event has fired: its record was issued with
// an error, or issued and complete (a device that is closed or lost fires
// its events). Once it has, the commands before it are retired.
func (e *event) fired() bool {
	select {
	case <-e.issued:
	default:
		return false
	}
	if e.err == nil && e.d.alive() == nil {
		if done, _ := e.driverCall(e.status); !done {
			return false
		}
	}
	e.report()
	return true
}

// OnFire runs f once the event has fired (plugin.FireNotifier): at once if
// it has, else on the device's poller goroutine.
func (e *event) OnFire(f func()) {
	if e.fired() {
		f()
		return
	}
	e.d.poller.Add(e.fired, f)
}
