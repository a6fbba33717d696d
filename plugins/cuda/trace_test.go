package cuda_test

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/goffload/offload"
	"github.com/goffload/offload/internal/cudadrv/cudafake"
	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/internal/tracefile"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/cuda"
)

// kBoom is a kernel without PTX that panics: in the emulate mode it fails
// when its queue issues it.
var kBoom = mustKernel("cudatest.trace.boom", func(x int64) { panic("boom") }, nil)

// opLog collects what a device reports to its tracer.
type opLog struct {
	mu  sync.Mutex
	ops []plugin.OpTime
}

func (l *opLog) add(o plugin.OpTime) {
	l.mu.Lock()
	l.ops = append(l.ops, o)
	l.mu.Unlock()
}

func (l *opLog) get() []plugin.OpTime {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]plugin.OpTime(nil), l.ops...)
}

// traced returns d traced into a new log.
func traced(t *testing.T, d plugin.Device) *opLog {
	t.Helper()
	tr, ok := d.(plugin.Tracer)
	if !ok {
		t.Fatalf("%T is not a plugin.Tracer", d)
	}
	l := &opLog{}
	tr.Trace(l.add)
	return l
}

func tag(t *testing.T, q plugin.Queue, tag uint64) {
	t.Helper()
	tq, ok := q.(plugin.TaggedQueue)
	if !ok {
		t.Fatalf("%T is not a plugin.TaggedQueue", q)
	}
	tq.Tag(tag)
}

func int64Bytes(x []int64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(x))), 8*len(x))
}

// TestTraceDeviceTimes times two queues' copies and PTX launches on a fake
// GPU whose stream operations each wait 2 ms: each queue's reports come in
// its order with the right tags, kinds, kernels and bytes, do not overlap,
// lie on the host's clock between their enqueueing and the end of the
// Synchronize, last at least as long as the stream took; untagged
// operations are not reported. An event recorded after a queue's
// operations reports them before Query says it fired, and before the
// function given to OnFire runs.
func TestTraceDeviceTimes(t *testing.T) {
	const delay = 2 * time.Millisecond
	drv := cudafake.New(cudafake.Config{GPUs: []cudafake.GPU{cudafake.H100}, OpDelay: delay})
	drv.SetKernel("addone", addOne)
	d := loaded(t, drv)
	log := traced(t, d)
	const n = 1000
	x := make([]int64, n)
	var qs [2]plugin.Queue
	var ptrs [2]plugin.Ptr
	for i := range qs {
		q, err := d.NewQueue()
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		qs[i] = q
		if ptrs[i], err = d.Alloc(8 * n); err != nil {
			t.Fatal(err)
		}
	}
	before := time.Now()
	for i, q := range qs {
		p := ptrs[i]
		q.Submit(p, make([]byte, 8)) // untagged
		tag(t, q, uint64(10+i))
		if err := q.Submit(p, int64Bytes(x)); err != nil {
			t.Fatal(err)
		}
		if err := q.Launch(kAddOne, []plugin.Arg{{Ptr: p, Len: n}, {Scalar: n}}); err != nil {
			t.Fatal(err)
		}
		tag(t, q, uint64(20+i))
		if err := q.Launch(kAddOne, []plugin.Arg{{Ptr: p, Len: n}, {Scalar: n}}); err != nil {
			t.Fatal(err)
		}
		if err := q.Retrieve(make([]byte, 800), p); err != nil {
			t.Fatal(err)
		}
		tag(t, q, 0)
		q.Retrieve(make([]byte, 8), p) // untagged
	}
	for _, q := range qs {
		if err := q.Synchronize(); err != nil {
			t.Fatal(err)
		}
	}
	after := time.Now()
	all := log.get()
	if len(all) != 8 {
		t.Fatalf("%d operations reported, want 8 (4 tagged on each queue): %+v", len(all), all)
	}
	type want struct {
		tag    uint64
		kind   plugin.OpKind
		kernel string
		bytes  int64
	}
	for i := range qs {
		var got []plugin.OpTime
		for _, o := range all {
			if o.Tag%10 == uint64(i) {
				got = append(got, o)
			}
		}
		ws := []want{{uint64(10 + i), plugin.OpSubmit, "", 8 * n}, {uint64(10 + i), plugin.OpLaunch, kAddOne.Name(), 0},
			{uint64(20 + i), plugin.OpLaunch, kAddOne.Name(), 0}, {uint64(20 + i), plugin.OpRetrieve, "", 800}}
		if len(got) != len(ws) {
			t.Fatalf("queue %d: %d reports, want %d: %+v", i, len(got), len(ws), got)
		}
		for j, w := range ws {
			o := got[j]
			if o.Tag != w.tag || o.Kind != w.kind || o.Kernel != w.kernel || o.Bytes != w.bytes || o.Err {
				t.Errorf("queue %d report %d: %+v, want %+v", i, j, o, w)
			}
			if o.End.Before(o.Start) || o.Start.Before(before) || o.End.After(after) {
				t.Errorf("queue %d report %d (%s): [%v, %v] is not inside the host's window [%v, %v]",
					i, j, o.Kind, o.Start, o.End, before, after)
			}
			if j > 0 && o.Start.Before(got[j-1].End) {
				t.Errorf("queue %d report %d (%s) starts %v before the one before it ended", i, j, o.Kind, got[j-1].End.Sub(o.Start))
			}
			// Each operation is a stream operation after its start record,
			// which waits the delay too.
			if o.End.Sub(o.Start) < delay {
				t.Errorf("queue %d report %d (%s) took %v on the stream, want at least %v", i, j, o.Kind, o.End.Sub(o.Start), delay)
			}
		}
	}

	// An event after a tagged launch: its Query, and OnFire, report the
	// launch before they say it fired.
	q := qs[0]
	tag(t, q, 30)
	ev1, _ := d.NewEvent()
	defer ev1.Close()
	launched := time.Now()
	if err := q.Launch(kAddOne, []plugin.Arg{{Ptr: ptrs[0], Len: n}, {Scalar: n}}); err != nil {
		t.Fatal(err)
	}
	if err := q.Record(ev1); err != nil {
		t.Fatal(err)
	}
	tag(t, q, 31)
	if err := q.Launch(kAddOne, []plugin.Arg{{Ptr: ptrs[0], Len: n}, {Scalar: n}}); err != nil {
		t.Fatal(err)
	}
	ev2, _ := d.NewEvent()
	defer ev2.Close()
	if err := q.Record(ev2); err != nil {
		t.Fatal(err)
	}
	var seen int
	for {
		done, err := ev1.Query()
		if err != nil {
			t.Fatal(err)
		}
		if done {
			seen = len(log.get())
			break
		}
		time.Sleep(100 * time.Microsecond)
	}
	fired := time.Now()
	if ops := log.get(); seen < 9 || ops[8].Tag != 30 {
		t.Fatalf("when Query said the event after the launch fired, %d operations were reported, want 9: %+v", seen, ops[8:])
	} else if k := ops[8]; k.Start.Before(launched) || k.End.After(fired) {
		t.Errorf("the launch's interval [%v, %v] is not between its Launch (%v) and the Query that saw it done (%v)",
			k.Start, k.End, launched, fired)
	}
	onFire := make(chan int, 1)
	ev2.(plugin.FireNotifier).OnFire(func() { onFire <- len(log.get()) })
	select {
	case got := <-onFire:
		if got != 10 {
			t.Errorf("when OnFire's function ran, %d operations were reported, want 10", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("OnFire's function did not run")
	}
}

// TestTraceErrorFire: an event that fires at once with its queue's error
// (a wait on a failed event failed when issued) reports the launch before
// the failure, timed on the GPU, and the failed wait.
func TestTraceErrorFire(t *testing.T) {
	drv := cudafake.New(cudafake.Config{GPUs: []cudafake.GPU{smallGPU}, OpDelay: 5 * time.Millisecond})
	drv.SetKernel("addone", addOne)
	devs, err := cuda.OpenWith(drv, 0, true) // kBoom is emulated; kAddOne runs its PTX
	if err != nil {
		t.Fatal(err)
	}
	d := devs[0]
	defer d.Close()
	if err := d.Load(entries.Current(), 0); err != nil {
		t.Fatal(err)
	}
	log := traced(t, d)
	q1, _ := d.NewQueue()
	defer q1.Close()
	q2, _ := d.NewQueue()
	defer q2.Close()
	p, _ := d.Alloc(8)
	q1.Launch(kBoom, []plugin.Arg{{Scalar: int64(1)}})
	failed, _ := d.NewEvent()
	defer failed.Close()
	q1.Record(failed) // fires with the kernel's error
	tag(t, q2, 5)
	q2.Launch(kAddOne, []plugin.Arg{{Ptr: p, Len: 1}, {Scalar: 1}})
	q2.Wait(failed)
	ev, _ := d.NewEvent()
	defer ev.Close()
	q2.Record(ev)
	if err := ev.Synchronize(); err == nil {
		t.Fatal("an event after a wait on a failed event fired without an error")
	}
	ops := log.get()
	if len(ops) != 2 || ops[0].Kind != plugin.OpLaunch || ops[0].Err || ops[1].Kind != plugin.OpWait || !ops[1].Err {
		t.Fatalf("when the event fired, the reports were %+v; want the launch, and the failed wait", ops)
	}
	if d := ops[0].End.Sub(ops[0].Start); d < 5*time.Millisecond {
		t.Errorf("the launch took %v on the fake GPU, whose operations take 5 ms", d)
	}
	_ = q1.Synchronize()
	_ = q2.Synchronize()
}

// TestTraceEventPool: 10,000 timed launches, synchronized in rounds, are
// all reported, and the device's timing events are reused: the fake
// driver's live events do not grow after the first round, and none is
// left once the device is closed.
func TestTraceEventPool(t *testing.T) {
	drv := cudafake.New(cudafake.Config{GPUs: []cudafake.GPU{cudafake.H100}})
	drv.SetKernel("addone", addOne)
	d := loaded(t, drv)
	var reported int
	var mu sync.Mutex
	d.(plugin.Tracer).Trace(func(plugin.OpTime) { mu.Lock(); reported++; mu.Unlock() })
	q, _ := d.NewQueue()
	p, _ := d.Alloc(8)
	tag(t, q, 1)
	const rounds, per = 100, 100
	var first int
	for r := range rounds {
		for range per {
			if err := q.Launch(kAddOne, []plugin.Arg{{Ptr: p, Len: 1}, {Scalar: 1}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := q.Synchronize(); err != nil {
			t.Fatal(err)
		}
		_, _, _, events, _ := drv.Live()
		if r == 0 {
			first = events
		} else if events > first {
			t.Fatalf("round %d: %d live CUDA events, %d after the first round: the timing events are not reused", r, events, first)
		}
	}
	mu.Lock()
	if reported != rounds*per {
		t.Errorf("%d launches reported, want %d", reported, rounds*per)
	}
	mu.Unlock()
	if first > 2*per+4 {
		t.Errorf("%d live CUDA events for %d launches in flight", first, per)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if allocs, host, streams, events, mods := drv.Live(); allocs+host+streams+events+mods != 0 {
		t.Errorf("after Close: %d allocations, %d pinned, %d streams, %d events, %d modules live", allocs, host, streams, events, mods)
	}
}

// TestTraceRuntime runs the runtime over fake GPUs with a trace
// (offload.WithProfile): the GPU's kernels and copies show in it as the
// device ran them, inside their tasks' spans.
func TestTraceRuntime(t *testing.T) {
	drv := cudafake.New(cudafake.Config{GPUs: []cudafake.GPU{cudafake.H100}, OpDelay: time.Millisecond})
	drv.SetKernel("addone", addOne)
	defer cuda.UseDriverForTests(drv)()
	path := filepath.Join(t.TempDir(), "trace.json")
	if err := offload.Start(offload.WithDevices("cuda,host"), offload.WithProfile(path)); err != nil {
		t.Fatal(err)
	}
	const n = 1000
	x := make([]int64, n)
	gpu := offload.On(0)
	for range 3 {
		if err := addOneK.Run(gpu, x, n); err != nil {
			offload.Stop()
			t.Fatal(err)
		}
	}
	task := addOneK.Nowait(gpu.Nowait(), x, n)
	if err := task.Wait(); err != nil {
		offload.Stop()
		t.Fatal(err)
	}
	if err := offload.Stop(); err != nil {
		t.Fatal(err)
	}
	if x[0] != 4 {
		t.Fatalf("x[0] = %d after 4 launches", x[0])
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	evs, err := tracefile.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	tasks := map[float64]tracefile.Event{}
	for _, e := range evs {
		if e.Ph == "X" && e.Cat == "task" {
			tasks[e.Args["task"].(float64)] = e
		}
	}
	kernels, copies := 0, 0
	const eps = 0.002 // µs: rounding of the JSON numbers
	for _, e := range evs {
		if e.Ph != "X" || e.Pid != 0 || (e.Cat != "kernel" && e.Cat != "copy") {
			continue
		}
		if e.Cat == "kernel" {
			kernels++
			if e.Name != "kernel cudatest.rt.addone" {
				t.Errorf("a kernel span named %q", e.Name)
			}
			if e.Dur < 1e3 {
				t.Errorf("kernel span %q lasts %.1f µs; the fake GPU's operations take 1 ms", e.Name, e.Dur)
			}
		} else {
			copies++
		}
		task, ok := tasks[e.Args["task"].(float64)]
		if !ok {
			t.Errorf("device span %q names no task span: %v", e.Name, e.Args)
			continue
		}
		if e.Ts < task.Ts-eps || e.End() > task.End()+eps {
			t.Errorf("device span %q [%.3f, %.3f] lies outside its task's span %q [%.3f, %.3f]", e.Name, e.Ts, e.End(), task.Name, task.Ts, task.End())
		}
	}
	if kernels != 4 || copies != 8 {
		t.Errorf("the trace has %d kernel spans and %d copy spans on the GPU, want 4 and 8", kernels, copies)
	}
}

// TestTraceConcurrent: four queues issue timed launches and copies at once,
// with events recorded between them that the host queries, synchronizes
// and watches (OnFire), for longer than a clock reference serves (a
// second), so that references are taken while other queues time their
// operations. Every tagged operation is reported once, in its queue's
// order, before the events after it fire; no CUDA event is left after
// Close.
func TestTraceConcurrent(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for more than a second")
	}
	drv := cudafake.New(cudafake.Config{GPUs: []cudafake.GPU{cudafake.H100}, OpDelay: 20 * time.Microsecond})
	drv.SetKernel("addone", addOne)
	d := loaded(t, drv)
	log := traced(t, d)
	const queues = 4
	deadline := time.Now().Add(1200 * time.Millisecond)
	var wg sync.WaitGroup
	counts := make([]uint64, queues)
	errs := make(chan error, queues)
	for i := range queues {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q, err := d.NewQueue()
			if err != nil {
				errs <- err
				return
			}
			defer q.Close()
			p, _ := d.Alloc(64)
			buf := make([]byte, 64)
			var seq uint64
			for r := 0; time.Now().Before(deadline); r++ {
				for range 3 {
					seq++
					q.(plugin.TaggedQueue).Tag(uint64(i)<<32 | seq)
					if r%2 == 0 {
						q.Launch(kAddOne, []plugin.Arg{{Ptr: p, Len: 8}, {Scalar: 8}})
					} else {
						q.Retrieve(buf, p)
					}
				}
				ev, _ := d.NewEvent()
				q.Record(ev)
				want := seq
				check := func(how string) {
					n := 0
					for _, o := range log.get() {
						if o.Tag>>32 == uint64(i) && o.Tag&(1<<32-1) <= want {
							n++
						}
					}
					if n != int(want) {
						errs <- errors.New(how + ": the operations before the event were not all reported when it fired")
					}
				}
				switch r % 3 {
				case 0:
					if err := ev.Synchronize(); err != nil {
						errs <- err
						return
					}
					check("Synchronize")
				case 1:
					for done := false; !done; {
						done, err = ev.Query()
						if err != nil {
							errs <- err
							return
						}
					}
					check("Query")
				case 2:
					fired := make(chan struct{})
					ev.(plugin.FireNotifier).OnFire(func() { check("OnFire"); close(fired) })
					<-fired
				}
				ev.Close()
			}
			if err := q.Synchronize(); err != nil {
				errs <- err
			}
			counts[i] = seq
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	ops := log.get()
	last := make([]uint64, queues)
	lastEnd := make([]time.Time, queues)
	total := 0
	for _, o := range ops {
		i, seq := o.Tag>>32, o.Tag&(1<<32-1)
		if seq != last[i]+1 {
			t.Fatalf("queue %d: operation %d reported after %d", i, seq, last[i])
		}
		if o.Start.Before(lastEnd[i]) || o.End.Before(o.Start) || o.Err {
			t.Errorf("queue %d operation %d: %+v, after one that ended at %v", i, seq, o, lastEnd[i])
		}
		last[i], lastEnd[i] = seq, o.End
		total++
	}
	want := 0
	for i, n := range counts {
		want += int(n)
		if last[i] != n {
			t.Errorf("queue %d: %d operations reported, want %d", i, last[i], n)
		}
	}
	if total != want {
		t.Errorf("%d operations reported, want %d", total, want)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, streams, events, _ := drv.Live(); streams+events != 0 {
		t.Errorf("after Close: %d streams and %d events live", streams, events)
	}
}
