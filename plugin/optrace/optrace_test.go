package optrace

import (
	"sync"
	"testing"
	"time"

	"github.com/goffload/offload/plugin"
)

type log struct {
	mu  sync.Mutex
	ops []plugin.OpTime
}

func (l *log) add(o plugin.OpTime) {
	l.mu.Lock()
	l.ops = append(l.ops, o)
	l.mu.Unlock()
}

func TestTaggedOnlyWhenTraced(t *testing.T) {
	var tr Tracer
	var g Tag
	g.Tag(7)
	if tag := tr.Tagged(&g); tag != 0 || tr.On() || tr.Sink() != nil {
		t.Errorf("an untraced device: Tagged %d, On %v, Sink set %v; want 0, false, false", tag, tr.On(), tr.Sink() != nil)
	}
	tr.Report(plugin.OpTime{Tag: 1}) // dropped, not a crash
	var l log
	tr.Trace(l.add)
	if tag := tr.Tagged(&g); tag != 7 || !tr.On() || tr.Sink() == nil {
		t.Errorf("a traced device: Tagged %d, On %v; want 7, true", tag, tr.On())
	}
	g.Tag(0)
	if _, ok := Op(tr.Tagged(&g), plugin.OpLaunch, "k", 0); ok {
		t.Error("an operation of a queue tagged 0 is timed")
	}
	tr.Trace(nil)
	if tr.On() {
		t.Error("Trace(nil) left the device traced")
	}
}

// TestTimed: an operation timed where it runs is reported once, with what
// it is, its times and whether it failed, to the kind's report function,
// which gets what the kind kept beside it.
func TestTimed(t *testing.T) {
	var tr Tracer
	var l log
	tr.Trace(l.add)
	var g Tag
	g.Tag(3)
	o, ok := Op(tr.Tagged(&g), plugin.OpSubmit, "", 64)
	if !ok {
		t.Fatal("an operation of a tagged queue of a traced device is not timed")
	}
	start := time.Now()
	end := start.Add(time.Millisecond)
	Timed(o, &tr, (*Tracer).Report)(start, end, nil)
	var kept string
	Timed(o, "queue 9", func(c string, o plugin.OpTime) { kept = c; tr.Report(o) })(end, end, errFailed)
	if len(l.ops) != 2 {
		t.Fatalf("%d reports, want 2", len(l.ops))
	}
	want := plugin.OpTime{Tag: 3, Kind: plugin.OpSubmit, Bytes: 64, Start: start, End: end}
	if l.ops[0] != want {
		t.Errorf("reported %+v, want %+v", l.ops[0], want)
	}
	if !l.ops[1].Err || kept != "queue 9" {
		t.Errorf("a failed operation reported Err %v, with %q kept; want true, %q", l.ops[1].Err, kept, "queue 9")
	}
}

var errFailed = plugin.ErrKernelFailed

func TestOrder(t *testing.T) {
	base := time.Now()
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }
	var q Order
	for _, c := range []struct{ start, end, wantStart, wantEnd int }{
		{0, 10, 0, 10},
		{8, 20, 10, 20},  // starts before the last ended: moved
		{25, 22, 25, 25}, // ends before it starts: moved
		{24, 23, 25, 25}, // both before the last end
		{30, 40, 30, 40},
	} {
		o := plugin.OpTime{Start: at(c.start), End: at(c.end)}
		q.Place(&o)
		if !o.Start.Equal(at(c.wantStart)) || !o.End.Equal(at(c.wantEnd)) {
			t.Errorf("[%d, %d] placed at [%v, %v], want [%d, %d]", c.start, c.end,
				o.Start.Sub(base), o.End.Sub(base), c.wantStart, c.wantEnd)
		}
	}
}

// TestConcurrentTracing: queues tag and time operations on many goroutines
// while the device's tracing is switched on and off; a queue's reports
// keep its order.
func TestConcurrentTracing(t *testing.T) {
	var tr Tracer
	var l log
	tr.Trace(l.add)
	const queues, each = 8, 200
	var wg sync.WaitGroup
	for qi := range queues {
		wg.Go(func() {
			var g Tag
			for i := range each {
				g.Tag(uint64(qi*each + i + 1))
				if o, ok := Op(tr.Tagged(&g), plugin.OpLaunch, "k", 0); ok {
					now := time.Now()
					Timed(o, &tr, (*Tracer).Report)(now, now, nil)
				}
			}
		})
	}
	wg.Go(func() {
		for range 100 {
			tr.Trace(nil)
			tr.Trace(l.add)
		}
	})
	wg.Wait()
	last := map[uint64]uint64{}
	for _, o := range l.ops {
		q := (o.Tag - 1) / each
		if o.Tag <= last[q] {
			t.Fatalf("queue %d reported tag %d after %d", q, o.Tag, last[q])
		}
		last[q] = o.Tag
	}
}
