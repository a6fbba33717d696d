package opencl_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/opencl"
)

// TestTraceTimesBounded: a clock reference the host saw late (as a loaded
// machine makes it, by milliseconds) does not place a command after the
// host saw it complete, or before it was issued: the conformance suite's
// Tracer failed under load with "report 2 (retrieve) ends 3.8ms after the
// event after it fired" (issue 47 item 7).
func TestTraceTimesBounded(t *testing.T) {
	got, before, fired := tracedCopies(t, 50*time.Millisecond)
	for i, o := range got {
		if o.Start.Before(before) || o.End.After(fired) || o.End.Before(o.Start) {
			t.Errorf("report %d (%s): from %v to %v after the first was enqueued; the event fired at %v", i, o.Kind, o.Start.Sub(before), o.End.Sub(before), fired.Sub(before))
		}
	}
}

// TestTraceTimesMonotonic: the times a device reports carry the monotonic
// reading of the host's clock, as time.Now's do. Times on the wall clock
// alone were compared with and subtracted from the host's times on the
// wall clock, which time.Now reads apart from the monotonic one: a PoCL
// device served by an MPI rank reported a copy that ended 20ns before it
// started on the rank's clock, and the host lost the device for the
// malformed record.
func TestTraceTimesMonotonic(t *testing.T) {
	got, _, _ := tracedCopies(t, 0)
	for i, o := range got {
		if !strings.Contains(o.Start.String(), " m=") || !strings.Contains(o.End.String(), " m=") {
			t.Errorf("report %d (%s): from %v to %v: want times with the monotonic clock's reading (m=)", i, o.Kind, o.Start, o.End)
		}
	}
}

// tracedCopies traces a submit and a retrieve on a tagged queue, with the
// clock reference skewed by skew, and returns their reports, the time
// before the first and the time the event after them fired.
func tracedCopies(t *testing.T, skew time.Duration) (got []plugin.OpTime, before, fired time.Time) {
	t.Helper()
	d := loaded(t)
	var mu sync.Mutex
	d.(plugin.Tracer).Trace(func(o plugin.OpTime) {
		mu.Lock()
		got = append(got, o)
		mu.Unlock()
	})
	q := mustQueue(t, d)
	p := mustAlloc(t, d, 4096)
	buf := make([]byte, 4096)
	if skew != 0 {
		opencl.SkewTraceClock(d, skew)
	}
	before = time.Now()
	q.(plugin.TaggedQueue).Tag(3)
	if err := q.Submit(p, buf); err != nil {
		t.Fatal(err)
	}
	if err := q.Retrieve(buf, p); err != nil {
		t.Fatal(err)
	}
	ev, err := d.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Record(ev); err != nil {
		t.Fatal(err)
	}
	if err := ev.Synchronize(); err != nil {
		t.Fatal(err)
	}
	fired = time.Now()
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("%d operations reported when the event fired, want 2: %+v", len(got), got)
	}
	return append([]plugin.OpTime(nil), got...), before, fired
}
