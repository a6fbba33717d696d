package remote_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/internal/opencltest"
	"github.com/goffload/offload/plugin"
)

// spinK loops n times, in OpenCL C on an OpenCL device: a kernel whose
// time is the device's work.
var spinK = func() plugin.Kernel {
	k := mustKernel("remotetest.spin", func(n int64, x []int64) {
		s := int64(0)
		for i := range n {
			s = s*6364136223846793005 + i
		}
		x[0] = s
	})
	src := `kernel void spin(long n, global long *x) {
	long s = 0;
	for (long i = 0; i < n; i++) { s = s * 6364136223846793005L + i; }
	x[get_global_id(0)] = s;
}
`
	if err := k.(*entries.Kernel).SetCode(plugin.DeviceCode{Format: "opencl", Image: []byte(src), Entry: "spin"}); err != nil {
		panic(err)
	}
	return k
}()

// TestProxyTraceServedTimes: a proxied OpenCL device (PoCL, served by a
// local device process) traces its kernels with the served device's own
// times, placed on the host's clock. Queue B waits for queue A's long
// kernel and runs a long one of its own, untimed; then, tagged, a short
// one. The short kernel starts, on the device, once the long ones ended,
// and takes the short kernel's time. Timed where the device process
// enqueues it, it would start while B's long kernel runs and last until
// that one's end.
func TestProxyTraceServedTimes(t *testing.T) {
	opencltest.Need(t)
	d := openProxied(t, "1[opencl]")[0]
	tr, ok := d.(plugin.Tracer)
	if !ok {
		t.Fatal("a proxied device is no plugin.Tracer")
	}
	var mu sync.Mutex
	var ops []plugin.OpTime
	tr.Trace(func(o plugin.OpTime) {
		mu.Lock()
		ops = append(ops, o)
		mu.Unlock()
	})
	pa, err := d.Alloc(8)
	if err != nil {
		t.Fatal(err)
	}
	pb, err := d.Alloc(8)
	if err != nil {
		t.Fatal(err)
	}
	qa, err := d.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	defer qa.Close()
	qb, err := d.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	defer qb.Close()
	// A first launch builds the program: the runs timed below do not.
	if err := qa.Launch(spinK, []plugin.Arg{{Scalar: int64(1)}, {Ptr: pa, Len: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := qa.Synchronize(); err != nil {
		t.Fatal(err)
	}
	// The long kernel's loop count, for 100ms or more on PoCL.
	run := func(n int64) time.Duration {
		start := time.Now()
		if err := qa.Launch(spinK, []plugin.Arg{{Scalar: n}, {Ptr: pa, Len: 1}}); err != nil {
			t.Fatal(err)
		}
		if err := qa.Synchronize(); err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	long := int64(1)
	for run(long) < 20*time.Millisecond {
		long *= 4
	}
	long *= 5
	longTime := run(long)
	before := time.Now()
	ev, err := d.NewEvent()
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Close()
	data := make([]byte, 8)
	if err := qa.Submit(pa, data); err != nil {
		t.Fatal(err)
	}
	if err := qa.Launch(spinK, []plugin.Arg{{Scalar: long}, {Ptr: pa, Len: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := qa.Record(ev); err != nil {
		t.Fatal(err)
	}
	if err := qb.Wait(ev); err != nil {
		t.Fatal(err)
	}
	if err := qb.Launch(spinK, []plugin.Arg{{Scalar: long}, {Ptr: pb, Len: 1}}); err != nil {
		t.Fatal(err)
	}
	qb.(plugin.TaggedQueue).Tag(2)
	if err := qb.Launch(spinK, []plugin.Arg{{Scalar: long / 100}, {Ptr: pb, Len: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := qb.Retrieve(data, pb); err != nil {
		t.Fatal(err)
	}
	if err := qb.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if err := qa.Synchronize(); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	mu.Lock()
	got := append([]plugin.OpTime(nil), ops...)
	mu.Unlock()
	var b *plugin.OpTime
	last := map[uint64]time.Time{}
	for i := range got {
		o := &got[i]
		t.Logf("tag %d %s %s %d bytes: %v +%v", o.Tag, o.Kind, o.Kernel, o.Bytes, o.Start.Sub(before), o.End.Sub(o.Start))
		if o.Err {
			t.Errorf("operation %+v failed", *o)
		}
		if o.Start.Before(before) || o.End.After(after) || o.End.Before(o.Start) {
			t.Errorf("tag %d %s: [%v, %v] outside the host's span [0, %v]", o.Tag, o.Kind, o.Start.Sub(before), o.End.Sub(before), after.Sub(before))
		}
		if o.Start.Before(last[o.Tag]) {
			t.Errorf("tag %d %s starts %v before the operation before it ended", o.Tag, o.Kind, last[o.Tag].Sub(o.Start))
		}
		last[o.Tag] = o.End
		if o.Kind == plugin.OpLaunch {
			if o.Kernel != "remotetest.spin" {
				t.Errorf("tag %d launch of %q, want remotetest.spin", o.Tag, o.Kernel)
			}
			if o.Tag != 2 || b != nil {
				t.Errorf("launch of tag %d: want one, of queue B (tag 2)", o.Tag)
			}
			b = o
		}
	}
	if b == nil {
		t.Fatal("the trace has no launch of queue B")
	}
	if at := b.Start.Sub(before); at < longTime/2 {
		t.Errorf("B's kernel starts %v after the host began, before A's kernel (%v) can have ended: timed where it was enqueued, not on the device", at, longTime)
	}
	if db := b.End.Sub(b.Start); db > longTime/4 {
		t.Errorf("B's short kernel took %v, A's long one %v: B's is not the device's time", db, longTime)
	}
}

// TestProxyTraceFailed: on a traced proxied OpenCL device, a launch that
// fails (a kernel without OpenCL C) is traced as failed, the operations it
// makes the queue skip are not traced, and the queue's operations after
// the sync are traced, in order: what the queue skipped holds back none
// of their reports.
func TestProxyTraceFailed(t *testing.T) {
	opencltest.Need(t)
	d := openProxied(t, "1[opencl]")[0]
	var mu sync.Mutex
	var ops []plugin.OpTime
	d.(plugin.Tracer).Trace(func(o plugin.OpTime) {
		mu.Lock()
		ops = append(ops, o)
		mu.Unlock()
	})
	p, err := d.Alloc(8)
	if err != nil {
		t.Fatal(err)
	}
	q, err := d.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	q.(plugin.TaggedQueue).Tag(7)
	data := make([]byte, 8)
	if err := q.Launch(addK, []plugin.Arg{{Scalar: 1.0}, {Ptr: p, Len: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := q.Submit(p, data); err != nil { // skipped
		t.Fatal(err)
	}
	if err := q.Synchronize(); err == nil {
		t.Fatal("a launch without OpenCL C succeeded")
	}
	q.(plugin.TaggedQueue).Tag(8)
	if err := q.Launch(spinK, []plugin.Arg{{Scalar: int64(1000)}, {Ptr: p, Len: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := q.Retrieve(data, p); err != nil {
		t.Fatal(err)
	}
	if err := q.Synchronize(); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	got := append([]plugin.OpTime(nil), ops...)
	mu.Unlock()
	var kinds []string
	var last time.Time
	for _, o := range got {
		kinds = append(kinds, fmt.Sprintf("%d %s %s err=%v", o.Tag, o.Kind, o.Kernel, o.Err))
		if o.Start.Before(last) || o.End.Before(o.Start) {
			t.Errorf("tag %d %s: [%v, %v] out of order (the one before ended at %v)", o.Tag, o.Kind, o.Start, o.End, last)
		}
		last = o.End
	}
	want := []string{"7 launch remotetest.add err=true", "8 launch remotetest.spin err=false", "8 retrieve  err=false"}
	if !slices.Equal(kinds, want) {
		t.Errorf("traced %q, want %q", kinds, want)
	}
}
