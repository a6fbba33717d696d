package host_test

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/host"
)

// TestBigCopyLetsGCRun: while a host device copies 256 MiB, garbage
// collections begin and end. A copy made by one copy() of the whole buffer
// holds every stop of the world until it is over, so no collection can
// both begin and end inside it: the goroutines of the program that
// allocate then stall for the whole copy (issue 47, item 6).
func TestBigCopyLetsGCRun(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("needs two Ps: one copies, one collects")
	}
	const size = 256 << 20
	d := newLoaded(t, host.Config{Cores: 1})
	var mu sync.Mutex
	var ops []plugin.OpTime
	d.(plugin.Tracer).Trace(func(o plugin.OpTime) {
		mu.Lock()
		ops = append(ops, o)
		mu.Unlock()
	})
	q, err := d.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	p, err := d.Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(p)
	src := make([]byte, size)
	for i := 0; i < len(src); i += 4096 {
		src[i] = byte(i >> 12)
	}
	// A few tries: on a loaded machine the collecting goroutine may not
	// run while the copy does. A copy that holds the collector never
	// shows two.
	best := 0
	for try := 0; try < 4 && best < 2; try++ {
		mu.Lock()
		ops = ops[:0]
		mu.Unlock()
		q.(plugin.TaggedQueue).Tag(uint64(try + 1))
		if err := q.Submit(p, src); err != nil {
			t.Fatal(err)
		}
		q.(plugin.TaggedQueue).Tag(0)
		var ends []time.Time
		for {
			done, err := q.Query()
			if err != nil {
				t.Fatal(err)
			}
			if done {
				break
			}
			runtime.GC()
			ends = append(ends, time.Now())
		}
		mu.Lock()
		if len(ops) != 1 || ops[0].Kind != plugin.OpSubmit {
			mu.Unlock()
			t.Fatalf("traced %v, want the one submit", ops)
		}
		o := ops[0]
		mu.Unlock()
		inside := 0
		for _, e := range ends {
			if e.After(o.Start) && e.Before(o.End) {
				inside++
			}
		}
		t.Logf("try %d: copy of %d MiB took %v; %d of %d collections ended inside it", try, size>>20, o.End.Sub(o.Start), inside, len(ends))
		best = max(best, inside)
	}
	if best < 2 {
		t.Errorf("no two garbage collections ended while a 256 MiB copy ran (best %d): the copy holds the collector's stop of the world", best)
	}
	out := make([]byte, size)
	if err := q.Retrieve(out, p); err != nil {
		t.Fatal(err)
	}
	if err := q.Synchronize(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < size; i += 4096 {
		if out[i] != src[i] {
			t.Fatalf("byte %d read back %d, want %d", i, out[i], src[i])
		}
	}
}

// TestBigBlocksOutsideHeap: a host device's big blocks are not Go memory:
// allocating them does not grow the Go heap (so it starts no collection),
// and freeing them gives them back to the system.
func TestBigBlocksOutsideHeap(t *testing.T) {
	const size = 64 << 20
	d := newLoaded(t, host.Config{Cores: 1})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	p, err := d.Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew >= size/2 {
		t.Errorf("Alloc of %d MiB grew the Go heap by %d bytes, want it outside the heap", size>>20, grew)
	}
	if mapped, _ := host.Memory(d).Mapped(); mapped < size {
		t.Errorf("%d bytes mapped after Alloc of %d", mapped, size)
	}
	if err := d.Free(p); err != nil {
		t.Fatal(err)
	}
	if mapped, waiting := host.Memory(d).Mapped(); mapped != 0 || waiting != 0 {
		t.Errorf("after Free (block above the pool's threshold): %d bytes mapped, %d waiting, want 0, 0", mapped, waiting)
	}
}
