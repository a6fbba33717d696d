// Package devstate keeps what every device kind keeps about a device's life,
// so that kinds need not each write it. It keeps the label its errors start
// with. It keeps that the device was closed (once), and that it was lost (for
// good, with the first cause). It makes the errors that say so, and those
// that say a handle given to it is not its own. It is for kinds in this
// module and outside it, as package plugin is.
//
// A kind's device holds a [State] and checks it where the contract asks:
//
//	type device struct {
//		st devstate.State // label, closed, lost
//		…
//	}
//
//	func (d *device) Alloc(size int64) (plugin.Ptr, error) {
//		if err := d.st.Alive(); err != nil { // closed or lost
//			return 0, err
//		}
//		…
//	}
//
//	func (d *device) Close() error {
//		if !d.st.Close() {
//			return nil // closed before
//		}
//		… // release what the device holds, once
//	}
//
// A State's methods are safe for concurrent use and take no lock. A device's
// hot paths (a queue's enqueue) check it for the price of an atomic load.
// Some kinds have state of their own that must change together with closing
// (their allocations). Such a kind takes its own lock around what it changes
// after Close. It takes it around what it checks Alive with, too.
package devstate

import (
	"fmt"
	"sync/atomic"

	"github.com/goffload/offload/plugin"
)

// State is a device's label, and whether it is closed or lost. The zero State
// is an open device labelled "device". A State must not be copied once used.
// A kind holds one in its device. Embedding it makes its Lost the device's
// (plugin.LostReporter). A kind whose devices cannot be lost avoids that by
// holding it as a named field.
type State struct {
	label  atomic.Pointer[string]
	closed atomic.Bool
	lost   atomic.Pointer[error]
}

// Label returns the device's name in errors ("host device 1"). It is what
// SetLabel set last, or "device" before that.
func (s *State) Label() string {
	if p := s.label.Load(); p != nil {
		return *p
	}
	return "device"
}

// SetLabel names the device in errors. It is called once the device is
// created, and again when Load tells it its number.
func (s *State) SetLabel(label string) { s.label.Store(&label) }

// Close marks the device closed, and reports whether it was open. The caller
// whose Close gets true releases what the device holds. A second Close gets
// false.
func (s *State) Close() bool { return s.closed.CompareAndSwap(false, true) }

// Closed reports whether Close was called.
func (s *State) Closed() bool { return s.closed.Load() }

// Lose marks the device lost with err, unless it is lost already. err should
// wrap plugin.ErrDeviceLost and name the device. Lose returns the error the
// device is lost with: the first cause stays.
func (s *State) Lose(err error) error {
	s.lost.CompareAndSwap(nil, &err)
	return *s.lost.Load()
}

// Lost returns why the device was lost, or nil while it is not
// (plugin.LostReporter's Lost).
func (s *State) Lost() error {
	if p := s.lost.Load(); p != nil {
		return *p
	}
	return nil
}

// Alive returns nil if the device can take work. Once it is closed, it
// returns an error wrapping plugin.ErrBadHandle. Else it returns the error
// the device was lost with.
func (s *State) Alive() error {
	if s.closed.Load() {
		return fmt.Errorf("%s: %w: device is closed", s.Label(), plugin.ErrBadHandle)
	}
	return s.Lost()
}

// Mine returns nil if ok. Otherwise it returns an error wrapping
// plugin.ErrBadHandle. The error says h, given to the device for what
// ("record"), is not its own. ok is the kind's check: a type assertion to its
// handle type, and that the handle belongs to the device.
//
//	ev, ok := e.(*event)
//	if err := q.d.st.Mine("record", e, ok && ev.d == q.d); err != nil {
//		return err
//	}
func (s *State) Mine(what string, h any, ok bool) error {
	if ok {
		return nil
	}
	return fmt.Errorf("%s: %s: %w: %T is not of this device", s.Label(), what, plugin.ErrBadHandle, h)
}

// Waitable returns nil if ok. Otherwise it returns an error wrapping
// plugin.ErrUnsupported that says the device's queues cannot wait on ev. A
// queue's Wait returns it for an event that it cannot wait on itself.
// (plugin.ForeignEventWaiter says which it can.)
func (s *State) Waitable(ev plugin.Event, ok bool) error {
	if ok {
		return nil
	}
	return fmt.Errorf("%s: wait on a %T: %w", s.Label(), ev, plugin.ErrUnsupported)
}
