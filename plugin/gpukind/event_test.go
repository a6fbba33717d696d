package gpukind

import (
	"errors"
	"sync"
	"testing"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/devstate"
)

// handle is a fake driver's event handle: a number from 1.
type handle int

// fakeDriver is an EventDriver and HandleMaker over handles whose
// completion the test sets; it records what it released.
type fakeDriver struct {
	mu       sync.Mutex
	next     handle
	complete map[handle]bool
	failed   map[handle]error
	released []handle
	asked    int // Done calls
}

func newFakeDriver() *fakeDriver {
	return &fakeDriver{complete: map[handle]bool{}, failed: map[handle]error{}}
}

func (f *fakeDriver) NewHandle() (handle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.next++
	return f.next, nil
}

func (f *fakeDriver) Done(h handle) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked++
	if err := f.failed[h]; err != nil {
		return true, err
	}
	return f.complete[h], nil
}

func (f *fakeDriver) Wait(h handle) (bool, error) {
	f.mu.Lock()
	f.complete[h] = true // the fake's work ends when waited for
	f.mu.Unlock()
	return f.Done(h)
}

func (f *fakeDriver) Release(h handle) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released = append(f.released, h)
}

func (f *fakeDriver) finish(h handle) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.complete[h] = true
}

func (f *fakeDriver) releasedOf() []handle {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]handle(nil), f.released...)
}

// newEvents returns a device's events on a fake driver.
func newEvents(t *testing.T) (*Events[handle], *fakeDriver, *devstate.State) {
	t.Helper()
	st := &devstate.State{}
	st.SetLabel("fake device 0")
	drv := newFakeDriver()
	var evs Events[handle]
	evs.Init(drv, st, "fake")
	return &evs, drv, st
}

func newEvent(t *testing.T, evs *Events[handle]) *Event[handle] {
	t.Helper()
	pe, err := evs.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	return pe.(*Event[handle])
}

// TestEventLife: an event is unrecorded until armed, recorded once, fires
// when its record is issued and the driver says it is complete, and gives
// its handle back once closed; Close twice and a second record are
// ErrBadHandle.
func TestEventLife(t *testing.T) {
	evs, drv, _ := newEvents(t)
	e := newEvent(t, evs)
	if _, err := e.Query(); !errors.Is(err, plugin.ErrNotRecorded) {
		t.Fatalf("Query of an unrecorded event = %v, want ErrNotRecorded", err)
	}
	if err := e.Synchronize(); !errors.Is(err, plugin.ErrNotRecorded) {
		t.Fatalf("Synchronize of an unrecorded event = %v, want ErrNotRecorded", err)
	}
	if err := e.Ref(); !errors.Is(err, plugin.ErrNotRecorded) {
		t.Fatalf("Ref of an unrecorded event = %v, want ErrNotRecorded", err)
	}
	if err := e.Arm(); err != nil {
		t.Fatal(err)
	}
	if err := e.Arm(); !errors.Is(err, plugin.ErrBadHandle) {
		t.Fatalf("a second Arm = %v, want ErrBadHandle", err)
	}
	if done, err := e.Query(); done || err != nil {
		t.Fatalf("Query before the record is issued = %v, %v", done, err)
	}
	e.Fire(nil, nil, 0)
	e.Unref()
	if done, err := e.Query(); done || err != nil {
		t.Fatalf("Query of an issued record the driver has not done = %v, %v", done, err)
	}
	drv.finish(e.Handle())
	if done, err := e.Query(); !done || err != nil {
		t.Fatalf("Query of a complete record = %v, %v", done, err)
	}
	if got := drv.releasedOf(); len(got) != 0 {
		t.Fatalf("released %v before Close", got)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); !errors.Is(err, plugin.ErrBadHandle) {
		t.Fatalf("a second Close = %v, want ErrBadHandle", err)
	}
	if got := drv.releasedOf(); len(got) != 1 || got[0] != 1 {
		t.Fatalf("released %v, want [1]", got)
	}
	if err := e.Arm(); !errors.Is(err, plugin.ErrBadHandle) {
		t.Fatalf("Arm of a closed event = %v, want ErrBadHandle", err)
	}
	if hs := evs.Close(); len(hs) != 0 {
		t.Fatalf("Events.Close after every release = %v", hs)
	}
}

// TestEventReleaseWaits: a closed event keeps its handle while a wait
// refers to it and while its record is not complete; the device's Close
// takes a handle never released.
func TestEventReleaseWaits(t *testing.T) {
	evs, drv, _ := newEvents(t)
	e := newEvent(t, evs)
	if err := e.Arm(); err != nil {
		t.Fatal(err)
	}
	if err := e.Ref(); err != nil { // a wait enqueued after the record
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	e.Fire(nil, nil, 0)
	e.Unref() // the record issued
	if got := drv.releasedOf(); len(got) != 0 {
		t.Fatalf("released %v while a wait refers to the event", got)
	}
	h, done := e.Waitable()
	if h != 1 || done {
		t.Fatalf("Waitable = %v, %v; want 1, false", h, done)
	}
	e.Unref() // the wait issued: the record is not complete
	if got := drv.releasedOf(); len(got) != 0 {
		t.Fatalf("released %v before the record is complete", got)
	}
	other := newEvent(t, evs)
	if hs := evs.Close(); len(hs) != 2 {
		t.Fatalf("Events.Close = %v, want both handles", hs)
	}
	other.Close() // released by the device's Close already
	if got := drv.releasedOf(); len(got) != 0 {
		t.Fatalf("released %v after the device took them", got)
	}
	if _, done := e.Waitable(); !done {
		t.Fatal("an event whose handle the device took is not done")
	}
}

// TestEventFiresWithError: a record skipped with the queue's error fires
// with it, without asking the driver, and releases its handle at Close.
func TestEventFiresWithError(t *testing.T) {
	evs, drv, _ := newEvents(t)
	e := newEvent(t, evs)
	if err := e.Arm(); err != nil {
		t.Fatal(err)
	}
	qerr := errors.New("fake device 0: submit of 8 bytes: out of memory")
	rep := &reporter{}
	e.Fire(qerr, rep, 7)
	e.Unref()
	if err := e.Synchronize(); err != qerr {
		t.Fatalf("Synchronize = %v, want the queue's error", err)
	}
	if done, err := e.Query(); !done || err != qerr {
		t.Fatalf("Query = %v, %v; want true and the queue's error", done, err)
	}
	if drv.asked != 0 {
		t.Fatalf("the driver was asked %d times about a record that was not issued", drv.asked)
	}
	if len(rep.upto) != 2 || rep.upto[0] != 7 {
		t.Fatalf("reports %v, want two up to 7", rep.upto)
	}
	e.Close()
	if got := drv.releasedOf(); len(got) != 1 {
		t.Fatalf("released %v, want the handle", got)
	}
}

type reporter struct{ upto []uint64 }

func (r *reporter) Report(upto uint64) { r.upto = append(r.upto, upto) }

// TestEventOnFire: OnFire runs its function at once on a fired event, and
// on the poller once the driver says the record is complete.
func TestEventOnFire(t *testing.T) {
	evs, drv, _ := newEvents(t)
	e := newEvent(t, evs)
	e.Arm()
	e.Fire(nil, nil, 0)
	e.Unref()
	fired := make(chan struct{})
	e.OnFire(func() { close(fired) })
	select {
	case <-fired:
		t.Fatal("OnFire ran before the record was complete")
	default:
	}
	drv.finish(e.Handle())
	<-fired
	ran := false
	e.OnFire(func() { ran = true })
	if !ran {
		t.Fatal("OnFire of a fired event did not run at once")
	}
}

// TestEventDeviceLost: a lost device fires its events with its error, and
// makes no new ones.
func TestEventDeviceLost(t *testing.T) {
	evs, _, st := newEvents(t)
	e := newEvent(t, evs)
	e.Arm()
	e.Fire(nil, nil, 0)
	e.Unref()
	lost := st.Lose(errors.New("fake device 0: lost"))
	if done, err := e.Query(); !done || err != lost {
		t.Fatalf("Query on a lost device = %v, %v; want true, %v", done, err, lost)
	}
	if err := e.Synchronize(); err != lost {
		t.Fatalf("Synchronize on a lost device = %v", err)
	}
	if _, err := evs.NewEvent(); err != lost {
		t.Fatalf("NewEvent on a lost device = %v", err)
	}
}

// TestEventsDomain: a queue can wait on events of its domain only, and a
// device owns only its own.
func TestEventsDomain(t *testing.T) {
	a, _, _ := newEvents(t)
	b, _, _ := newEvents(t) // the same domain, "fake"
	var c Events[handle]
	c.Init(newFakeDriver(), &devstate.State{}, "other")
	ea, eb, ec := newEvent(t, a), newEvent(t, b), newEvent(t, &c)
	if !a.CanWait(eb) || a.CanWait(ec) {
		t.Error("CanWait: want events of the same domain only")
	}
	if _, ok := a.Mine(ea); !ok {
		t.Error("Mine of the device's own event = false")
	}
	if _, ok := a.Mine(eb); ok {
		t.Error("Mine of another device's event = true")
	}
}
