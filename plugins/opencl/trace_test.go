package opencl_test

import (
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
	d := loaded(t)
	var mu sync.Mutex
	var got []plugin.OpTime
	d.(plugin.Tracer).Trace(func(o plugin.OpTime) {
		mu.Lock()
		got = append(got, o)
		mu.Unlock()
	})
	q := mustQueue(t, d)
	p := mustAlloc(t, d, 4096)
	buf := make([]byte, 4096)
	opencl.SkewTraceClock(d, 50*time.Millisecond)
	before := time.Now()
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
	fired := time.Now()
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("%d operations reported when the event fired, want 2: %+v", len(got), got)
	}
	for i, o := range got {
		if o.Start.Before(before) || o.End.After(fired) || o.End.Before(o.Start) {
			t.Errorf("report %d (%s): from %v to %v after the first was enqueued; the event fired at %v", i, o.Kind, o.Start.Sub(before), o.End.Sub(before), fired.Sub(before))
		}
	}
}
