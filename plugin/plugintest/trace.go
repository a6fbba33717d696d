package plugintest

import (
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/goffload/offload/plugin"
)

// testTracer checks the optional timing of queue operations (plugin.Tracer
// and plugin.TaggedQueue) on fresh devices. Tagged operations, and only
// those, are reported in order. Each has its kind, bytes, kernel and failure.
// Its times are on the host's clock, between its enqueueing and its
// completion. They are reported before an event recorded after them fires.
func (e *env) testTracer(t *testing.T) {
	if _, ok := e.devs[0].(plugin.Tracer); !ok {
		t.Skip("the kind does not time queue operations (plugin.Tracer is optional)")
	}
	devs := e.openLoaded(t)
	d := devs[0]
	var mu sync.Mutex
	var got []plugin.OpTime
	d.(plugin.Tracer).Trace(func(o plugin.OpTime) {
		mu.Lock()
		got = append(got, o)
		mu.Unlock()
	})
	reports := func() []plugin.OpTime {
		mu.Lock()
		defer mu.Unlock()
		return append([]plugin.OpTime(nil), got...)
	}
	q := newQueue(t, d)
	tq, ok := q.(plugin.TaggedQueue)
	if !ok {
		t.Fatalf("a Tracer's queue %T is not a plugin.TaggedQueue", q)
	}
	p := alloc(t, d, 4096)
	put(t, q, p, make([]byte, 8)) // not tagged: not timed
	mustSync(t, q)

	before := time.Now()
	tq.Tag(7)
	put(t, q, p, pattern(4096, 1))
	launch(t, q, kSleep, plugin.Arg{Scalar: int64(5)})
	out := make([]byte, 4096)
	if err := q.Retrieve(out, p); err != nil {
		t.Fatalf("Retrieve: %v", err)
	}
	ev := newEvent(t, d)
	if err := q.Record(ev); err != nil {
		t.Fatalf("Record: %v", err)
	}
	tq.Tag(0)
	put(t, q, p, make([]byte, 8)) // untagged again
	if err := esync(t, ev); err != nil {
		t.Fatalf("Event.Synchronize: %v", err)
	}
	fired := time.Now()
	if n := len(reports()); n != 3 {
		t.Fatalf("when the event after 3 tagged operations fired, %d were reported: %+v", n, reports())
	}
	mustSync(t, q)

	launch(t, q, kSleep, plugin.Arg{Scalar: int64(20)}) // untagged: what q2 waits for
	ev2 := newEvent(t, d)
	if err := q.Record(ev2); err != nil {
		t.Fatalf("Record: %v", err)
	}
	q2 := newQueue(t, d)
	q2.(plugin.TaggedQueue).Tag(9)
	if err := q2.Wait(ev2); err != nil {
		t.Fatalf("Wait: %v", err)
	}
	launch(t, q2, kPanic, plugin.Arg{Scalar: int64(3)})
	if err := qsync(t, q2); err == nil {
		t.Fatal("a panicking kernel: Synchronize returned nil")
	}
	all := reports()
	if len(all) != 5 {
		t.Fatalf("%d operations reported, want 5 (3 of tag 7, a wait and a failed launch of tag 9): %+v", len(all), all)
	}
	want := []struct {
		tag    uint64
		kind   plugin.OpKind
		bytes  int64
		kernel string
		failed bool
	}{{7, plugin.OpSubmit, 4096, "", false}, {7, plugin.OpLaunch, 0, kSleep.Name(), false}, {7, plugin.OpRetrieve, 4096, "", false},
		{9, plugin.OpWait, 0, "", false}, {9, plugin.OpLaunch, 0, kPanic.Name(), true}}
	const slack = time.Millisecond // clock alignment of a device with a clock of its own
	for i, w := range want {
		o := all[i]
		if o.Tag != w.tag || o.Kind != w.kind || o.Bytes != w.bytes || o.Kernel != w.kernel || o.Err != w.failed {
			t.Errorf("report %d: %+v, want tag %d, %s, %d bytes, kernel %q, failed %v", i, o, w.tag, w.kind, w.bytes, w.kernel, w.failed)
		}
		if o.End.Before(o.Start) || o.Start.Before(before.Add(-slack)) {
			t.Errorf("report %d (%s): from %v to %v, enqueued at %v", i, o.Kind, o.Start, o.End, before)
		}
		if i < 3 && o.End.After(fired.Add(slack)) {
			t.Errorf("report %d (%s) ends %v after the event after it fired", i, o.Kind, o.End.Sub(fired))
		}
		if i > 0 && i < 3 && o.Start.Before(all[i-1].End.Add(-slack)) {
			t.Errorf("report %d (%s) starts %v before the one before it ended", i, o.Kind, all[i-1].End.Sub(o.Start))
		}
	}
	if d := all[1].End.Sub(all[1].Start); d < 5*time.Millisecond {
		t.Errorf("a 5 ms kernel took %v on the device", d)
	}
}

// testCancelKernels checks a device that can ask its kernels to stop
// (plugin.Canceler). It closes their contexts' Done channel, for a kernel
// running and for those launched after, and only on that device.
func (e *env) testCancelKernels(t *testing.T) {
	devs := e.openLoaded(t)
	d, other := devs[0], devs[1]
	c, ok := d.(plugin.Canceler)
	if !ok {
		t.Skip("the kind cannot ask its kernels to stop (plugin.Canceler is optional)")
	}
	q, oq := newQueue(t, d), newQueue(t, other)
	x, y, z := alloc(t, d, 8), alloc(t, d, 8), alloc(t, other, 8)
	launch(t, q, kCancel, slice(x, 1), scalar(int64(30_000))) // waits for the cancel
	launch(t, oq, kCancel, slice(z, 1), scalar(int64(50)))    // on the other device: never cancelled
	c.CancelKernels()
	launch(t, q, kCancel, slice(y, 1), scalar(int64(30_000))) // after: cancelled at once
	wantSaw(t, []sawCase{{"the running kernel", q, x, 1}, {"a later kernel", q, y, 1}, {"the other device's kernel", oq, z, 2}})
}

// sawCase is what one cancelKernel wrote at p, read through q. want is 1 if
// it was asked to stop, 2 if not.
type sawCase struct {
	name string
	q    plugin.Queue
	p    plugin.Ptr
	want int64
}

// wantSaw checks what the cancelKernels of cs saw.
func wantSaw(t *testing.T, cs []sawCase) {
	t.Helper()
	for _, c := range cs {
		got := int64(binary.LittleEndian.Uint64(get(t, c.q, c.p, 8)))
		if got != c.want {
			t.Errorf("%s saw %d, want %d (1: Done closed with Err context.Canceled, 2: not stopped)", c.name, got, c.want)
		}
	}
}

// testStopLaunch checks a queue that can stop one launch
// (plugin.StopLauncher). It closes that kernel's Done channel when its signal
// stops, and no other kernel's. It does so whether the kernel runs already or
// waits its turn.
func (e *env) testStopLaunch(t *testing.T) {
	d := e.devs[0]
	q := newQueue(t, d)
	sl, ok := q.(plugin.StopLauncher)
	if !ok {
		t.Skip("the kind's queues cannot stop one launch (plugin.StopLauncher is optional)")
	}
	x, y, z := alloc(t, d, 8), alloc(t, d, 8), alloc(t, d, 8)
	running, waiting := plugin.NewStopSignal(), plugin.NewStopSignal()
	if err := sl.LaunchStop(kCancel, []plugin.Arg{slice(x, 1), scalar(int64(30_000))}, running); err != nil {
		t.Fatal(err)
	}
	launch(t, q, kCancel, slice(z, 1), scalar(int64(50))) // no signal: never stopped
	if err := sl.LaunchStop(kCancel, []plugin.Arg{slice(y, 1), scalar(int64(30_000))}, waiting); err != nil {
		t.Fatal(err)
	}
	running.Stop()
	waiting.Stop()
	wantSaw(t, []sawCase{{"the stopped running kernel", q, x, 1}, {"the kernel without a signal", q, z, 2}, {"the kernel stopped while it waited", q, y, 1}})
	// A signal that stops after the queue is done changes nothing.
	late := plugin.NewStopSignal()
	if err := sl.LaunchStop(kCancel, []plugin.Arg{slice(x, 1), scalar(int64(1))}, late); err != nil {
		t.Fatal(err)
	}
	mustSync(t, q)
	late.Stop()
	mustSync(t, q)
}

// testFireNotifier checks the optional plugin.FireNotifier of events. A
// function given before the event fires runs once, after it fired; its error
// is there to read. One given after it fired runs at once.
func (e *env) testFireNotifier(t *testing.T) {
	d := e.devs[0]
	ev := newEvent(t, d)
	fn, ok := ev.(plugin.FireNotifier)
	if !ok {
		t.Skip("the kind's events do not say when they fire (plugin.FireNotifier is optional)")
	}
	q := newQueue(t, d)
	launch(t, q, kSleep, plugin.Arg{Scalar: int64(20)})
	launch(t, q, kPanic, plugin.Arg{Scalar: int64(7)})
	if err := q.Record(ev); err != nil {
		t.Fatalf("Record: %v", err)
	}
	fired := make(chan error, 2)
	fn.OnFire(func() {
		done, err := ev.Query()
		if !done {
			err = errors.New("OnFire's function ran before the event fired")
		}
		fired <- err
	})
	select {
	case err := <-fired:
		if err == nil || !errors.Is(err, plugin.ErrKernelFailed) {
			t.Errorf("after a failed kernel the event fired with %v, want ErrKernelFailed", err)
		}
	case <-time.After(timeout):
		t.Fatal("OnFire's function did not run")
	}
	ran := false
	fn.OnFire(func() { ran = true })
	if !ran {
		t.Error("OnFire on a fired event did not run the function at once")
	}
	if len(fired) != 0 {
		t.Error("OnFire's function ran twice")
	}
	_ = qsync(t, q) // take the queue's error
}
