package plugintest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/goffload/offload/plugin"
)

func (e *env) testQueueOrder(t *testing.T) {
	d := e.devs[0]
	q := newQueue(t, d)
	x := alloc(t, d, 8)

	// Submit, launch, retrieve: the retrieve sees the kernel's result.
	put(t, q, x, asBytes([]int64{100}))
	launch(t, q, kAddInt64, slice(x, 1), scalar(int64(23)))
	if got := fromBytes[int64](get(t, q, x, 8)); got[0] != 123 {
		t.Errorf("submit 100, add 23, retrieve: got %d, want 123", got[0])
	}

	// Many operations, each depending on the one before.
	const n = 64
	subs := make([][]int64, n)
	snaps := make([][]byte, n)
	for i := range n {
		subs[i] = []int64{int64(i * 10)}
		snaps[i] = make([]byte, 8)
		put(t, q, x, asBytes(subs[i]))
		launch(t, q, kAddInt64, slice(x, 1), scalar(int64(i)))
		launch(t, q, kAddInt64, slice(x, 1), scalar(int64(i)))
		if err := q.Retrieve(snaps[i], x); err != nil {
			t.Fatal(err)
		}
	}
	mustSync(t, q)
	for i := range n {
		if got := fromBytes[int64](snaps[i])[0]; got != int64(i*12) {
			t.Errorf("step %d: retrieved %d, want %d", i, got, i*12)
		}
	}
}

func (e *env) testQueueQuery(t *testing.T) {
	d := e.devs[0]
	q := newQueue(t, d)
	if done, err := q.Query(); !done || err != nil {
		t.Errorf("Query on an empty queue = %v, %v; want true, nil", done, err)
	}
	launch(t, q, kSleep, scalar(int64(200)))
	if done, err := q.Query(); done || err != nil {
		t.Errorf("Query while a 200ms kernel runs = %v, %v; want false, nil", done, err)
	}
	mustSync(t, q)
	if done, err := q.Query(); !done || err != nil {
		t.Errorf("Query after Synchronize = %v, %v; want true, nil", done, err)
	}
}

func (e *env) testEvents(t *testing.T) {
	d := e.devs[0]
	q, q2 := newQueue(t, d), newQueue(t, d)

	// An event never recorded.
	ev := newEvent(t, d)
	if err := esync(t, ev); !errors.Is(err, plugin.ErrNotRecorded) {
		t.Errorf("Synchronize on an unrecorded event = %v, want ErrNotRecorded", err)
	}
	if fired, err := ev.Query(); fired || !errors.Is(err, plugin.ErrNotRecorded) {
		t.Errorf("Query on an unrecorded event = %v, %v; want false, ErrNotRecorded", fired, err)
	}

	// Recorded after work: it fires when the work is done.
	x := alloc(t, d, 8)
	put(t, q, x, asBytes([]int64{0}))
	launch(t, q, kSleep, scalar(int64(100)))
	launch(t, q, kFillInt64, slice(x, 1), scalar(int64(42)))
	start := time.Now()
	if err := q.Record(ev); err != nil {
		t.Fatalf("Record: %v", err)
	}
	if fired, err := ev.Query(); fired || err != nil {
		t.Errorf("Query on an event behind a 100ms kernel = %v, %v; want false, nil", fired, err)
	}
	if err := esync(t, ev); err != nil {
		t.Errorf("Event.Synchronize: %v", err)
	}
	if el := time.Since(start); el < 50*time.Millisecond {
		t.Errorf("Event.Synchronize returned after %v, before the 100ms kernel before it could finish", el)
	}
	if fired, err := ev.Query(); !fired || err != nil {
		t.Errorf("Query after Event.Synchronize = %v, %v; want true, nil", fired, err)
	}
	// The work before the event is done: another queue sees its result.
	if got := fromBytes[int64](get(t, q2, x, 8)); got[0] != 42 {
		t.Errorf("after the event fired, the buffer holds %d, want 42", got[0])
	}
	mustSync(t, q)

	// An event recorded on an idle queue fires.
	ev2 := newEvent(t, d)
	if err := q.Record(ev2); err != nil {
		t.Fatalf("Record on an idle queue: %v", err)
	}
	if err := esync(t, ev2); err != nil {
		t.Errorf("Synchronize on an event recorded on an idle queue: %v", err)
	}

	// Recording an event twice is refused; the first recording stands.
	ev3 := newEvent(t, d)
	launch(t, q, kSleep, scalar(int64(20)))
	if err := q.Record(ev3); err != nil {
		t.Fatalf("Record: %v", err)
	}
	if err := q.Record(ev3); err == nil {
		t.Errorf("recording an event twice returned nil, want an error")
	}
	if err := esync(t, ev3); err != nil {
		t.Errorf("Synchronize on the event recorded once: %v", err)
	}
	mustSync(t, q)
}

// waitCase runs the wait test. On qa: a 50ms sleep, then x = val, then record
// ev. On qb: wait for ev and read x, which must be val. closeEv closes ev
// once the wait is enqueued (waits already enqueued still work).
func waitCase(t *testing.T, da plugin.Device, qa, qb plugin.Queue, val int64, closeEv bool) {
	t.Helper()
	x := alloc(t, da, 8)
	put(t, qa, x, asBytes([]int64{-1}))
	mustSync(t, qa)
	ev := newEvent(t, da)
	launch(t, qa, kSleep, scalar(int64(50)))
	launch(t, qa, kFillInt64, slice(x, 1), scalar(val))
	if err := qa.Record(ev); err != nil {
		t.Fatalf("Record: %v", err)
	}
	if err := qb.Wait(ev); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	if closeEv {
		if err := ev.Close(); err != nil {
			t.Errorf("Event.Close: %v", err)
		}
	}
	got := make([]byte, 8)
	if err := qb.Retrieve(got, x); err != nil {
		t.Fatalf("Retrieve: %v", err)
	}
	mustSync(t, qb)
	if v := fromBytes[int64](got)[0]; v != val {
		t.Errorf("the queue that waited read %d, want %d: Wait did not hold it back", v, val)
	}
	mustSync(t, qa)
}

func (e *env) testEventWait(t *testing.T) {
	d := e.devs[0]
	qa, qb := newQueue(t, d), newQueue(t, d)
	waitCase(t, d, qa, qb, 4242, false)
	waitCase(t, d, qa, qb, 4343, true)
}

// failedEvent records an event on qa after a panicking kernel.
func failedEvent(t *testing.T, da plugin.Device, qa plugin.Queue, code int64) plugin.Event {
	t.Helper()
	ev := newEvent(t, da)
	launch(t, qa, kSleep, scalar(int64(20)))
	launch(t, qa, kPanic, scalar(code))
	if err := qa.Record(ev); err != nil {
		t.Fatalf("Record after a failing kernel: %v", err)
	}
	return ev
}

// waiterFails checks that qb, on device db, fails when it waits for ev, which
// carries an ErrKernelFailed. The operations after the wait are skipped. qb
// works again after Synchronize.
func waiterFails(t *testing.T, db plugin.Device, qb plugin.Queue, ev plugin.Event) {
	t.Helper()
	y := alloc(t, db, 8)
	put(t, qb, y, asBytes([]int64{1}))
	mustSync(t, qb)
	if err := qb.Wait(ev); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	launch(t, qb, kFillInt64, slice(y, 1), scalar(int64(2))) // skipped
	host := asBytes([]int64{-5})
	if err := qb.Retrieve(host, y); err != nil { // skipped
		t.Fatal(err)
	}
	if err := qsync(t, qb); !errors.Is(err, plugin.ErrKernelFailed) {
		t.Errorf("Synchronize on a queue that waited for a failed event = %v, want an error wrapping ErrKernelFailed", err)
	}
	if v := fromBytes[int64](host)[0]; v != -5 {
		t.Errorf("an operation after a failed wait ran: host buffer %d, want -5", v)
	}
	if got := fromBytes[int64](get(t, qb, y, 8)); got[0] != 1 {
		t.Errorf("a launch after a failed wait ran: device buffer %d, want 1", got[0])
	}
}

func (e *env) testEventError(t *testing.T) {
	d := e.devs[0]
	qa, qb := newQueue(t, d), newQueue(t, d)
	ev := failedEvent(t, d, qa, 31)
	waiterFails(t, d, qb, ev)
	if err := esync(t, ev); !errors.Is(err, plugin.ErrKernelFailed) {
		t.Errorf("Synchronize on an event recorded after a failed kernel = %v, want an error wrapping ErrKernelFailed", err)
	}
	if fired, err := ev.Query(); !fired || !errors.Is(err, plugin.ErrKernelFailed) {
		t.Errorf("Query on an event recorded after a failed kernel = %v, %v; want true and an error wrapping ErrKernelFailed", fired, err)
	}
	if err := qsync(t, qa); !errors.Is(err, plugin.ErrKernelFailed) {
		t.Errorf("Synchronize on the failed queue = %v, want an error wrapping ErrKernelFailed", err)
	}
	// Both queues work again.
	for i, q := range []plugin.Queue{qa, qb} {
		x := alloc(t, d, 8)
		launch(t, q, kFillInt64, slice(x, 1), scalar(int64(i+60)))
		if got := fromBytes[int64](get(t, q, x, 8)); got[0] != int64(i+60) {
			t.Errorf("queue %d after the failure: got %d, want %d", i, got[0], i+60)
		}
	}
}

func (e *env) testCrossDeviceWait(t *testing.T) {
	for _, pair := range [][2]int{{0, 1}, {1, 0}} {
		da, db := e.devs[pair[0]], e.devs[pair[1]]
		t.Run(fmt.Sprintf("%dto%d", pair[0], pair[1]), func(t *testing.T) {
			qa, qb := newQueue(t, da), newQueue(t, db)
			ev := newEvent(t, da)
			x := alloc(t, da, 8)
			launch(t, qa, kSleep, scalar(int64(100)))
			launch(t, qa, kFillInt64, slice(x, 1), scalar(int64(77)))
			if err := qa.Record(ev); err != nil {
				t.Fatalf("Record: %v", err)
			}
			w, ok := db.(plugin.ForeignEventWaiter)
			if !ok || !w.CanWait(ev) {
				err := qb.Wait(ev)
				if !errors.Is(err, plugin.ErrUnsupported) {
					t.Errorf("Wait on another device's event by a device that cannot = %v, want an error wrapping ErrUnsupported", err)
				}
				mustSync(t, qa)
				mustSync(t, qb)
				return
			}
			if err := qb.Wait(ev); err != nil {
				t.Fatalf("Wait on another device's event that CanWait accepts: %v", err)
			}
			y := alloc(t, db, 8)
			launch(t, qb, kFillInt64, slice(y, 1), scalar(int64(1)))
			mustSync(t, qb)
			// qb waited, so the event has fired by now (the 100ms kernel
			// before it would still run otherwise).
			if fired, err := ev.Query(); !fired || err != nil {
				t.Errorf("after the waiting queue synchronized, the event reports %v, %v; want true, nil: the wait did not hold the queue back", fired, err)
			}
			if got := fromBytes[int64](get(t, newQueue(t, da), x, 8)); got[0] != 77 {
				t.Errorf("buffer on the first device = %d, want 77", got[0])
			}
			mustSync(t, qa)

			// A failure crosses the devices too.
			waiterFails(t, db, qb, failedEvent(t, da, qa, 32))
			if err := qsync(t, qa); !errors.Is(err, plugin.ErrKernelFailed) {
				t.Errorf("Synchronize on the failed queue = %v, want an error wrapping ErrKernelFailed", err)
			}
		})
	}
}

// foreignEvent is an event of no device kind.
type foreignEvent struct{}

func (foreignEvent) Synchronize() error             { return nil }
func (foreignEvent) Query() (fired bool, err error) { return true, nil }
func (foreignEvent) Close() error                   { return nil }

func (e *env) testForeignEvent(t *testing.T) {
	d0, d1 := e.devs[0], e.devs[1]
	q := newQueue(t, d0)
	var fe plugin.Event = foreignEvent{}
	if w, ok := d0.(plugin.ForeignEventWaiter); ok && w.CanWait(fe) {
		t.Errorf("CanWait(an event of no device) = true")
	}
	if err := q.Wait(fe); !errors.Is(err, plugin.ErrUnsupported) {
		t.Errorf("Wait(an event of no device) = %v, want an error wrapping ErrUnsupported", err)
	}
	if err := q.Record(fe); !errors.Is(err, plugin.ErrBadHandle) {
		t.Errorf("Record(an event of no device) = %v, want an error wrapping ErrBadHandle", err)
	}

	// Record of another device's event is refused, and leaves the event
	// usable on its own device.
	ev1 := newEvent(t, d1)
	if err := q.Record(ev1); !errors.Is(err, plugin.ErrBadHandle) {
		t.Errorf("Record of another device's event = %v, want an error wrapping ErrBadHandle", err)
	}
	mustSync(t, q)
	if fired, err := ev1.Query(); fired || !errors.Is(err, plugin.ErrNotRecorded) {
		t.Errorf("after a refused Record, Query = %v, %v; want false, ErrNotRecorded", fired, err)
	}
	q1 := newQueue(t, d1)
	if err := q1.Record(ev1); err != nil {
		t.Fatalf("Record on its own device after a refused Record: %v", err)
	}
	if err := esync(t, ev1); err != nil {
		t.Errorf("Event.Synchronize: %v", err)
	}
}
