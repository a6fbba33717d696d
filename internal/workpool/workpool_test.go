package workpool

import (
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
)

func TestForCoversOnce(t *testing.T) {
	p := New(3)
	defer p.Close()
	for _, n := range []int{0, 1, 2, 3, 7, 1000} {
		hits := make([]atomic.Int32, n)
		p.For(n, func(lo, hi int) {
			p.For(hi-lo, func(a, b int) { // nested loops do not deadlock
				for i := lo + a; i < lo+b; i++ {
					hits[i].Add(1)
				}
			})
		})
		for i := range hits {
			if hits[i].Load() != 1 {
				t.Fatalf("n=%d: index %d ran %d times", n, i, hits[i].Load())
			}
		}
	}
}

func TestForPanics(t *testing.T) {
	p := New(2)
	defer p.Close()
	defer func() {
		r := recover()
		pe, ok := r.(*PanicError)
		if !ok || pe.Value != "chunk" || !strings.Contains(pe.Error(), "goroutine") {
			t.Errorf("recovered %v, want a *PanicError with the value and stack", r)
		}
	}()
	p.For(10, func(lo, hi int) {
		if lo > 0 {
			panic("chunk")
		}
	})
}

func TestForAfterClose(t *testing.T) {
	p := New(4)
	p.Close()
	var sum atomic.Int64
	p.For(100, func(lo, hi int) { sum.Add(int64(hi - lo)) })
	if sum.Load() != 100 {
		t.Errorf("sum %d", sum.Load())
	}
}

// TestForGoexit: a chunk that calls runtime.Goexit on a worker is re-raised
// in the caller as a *PanicError with Goexit set, after every chunk is done;
// the worker is replaced (the pool keeps its size, and Close still returns).
// A chunk that runs on the caller (no worker was idle) ends the caller's
// goroutine, as any Goexit does, after the other chunks: the test tries
// again until a worker took the chunk.
func TestForGoexit(t *testing.T) {
	const workers = 3
	started := make(chan struct{}, 16)
	p := newPool(workers, func() { started <- struct{}{} })
	for range workers - 1 {
		<-started
	}
	onWorker := false
	for try := 0; try < 1000 && !onWorker; try++ {
		var done atomic.Int32
		var ended atomic.Bool
		res := make(chan any, 1)
		go func() {
			defer func() { res <- recover() }()
			p.For(workers, func(lo, hi int) {
				defer done.Add(1)
				if lo > 0 && !ended.Swap(true) {
					runtime.Goexit()
				}
			})
		}()
		r := <-res
		if r == nil {
			// The chunk ran on the caller's goroutine, which ended (the
			// chunks not handed out yet never start).
			continue
		}
		if done.Load() != workers {
			t.Fatalf("%d chunks ended before For did, want %d", done.Load(), workers)
		}
		pe, ok := r.(*PanicError)
		if !ok || !pe.Goexit || !strings.Contains(pe.Error(), "Goexit") {
			t.Fatalf("recovered %v, want a *PanicError with Goexit set", r)
		}
		<-started // the replacement worker
		onWorker = true
	}
	if !onWorker {
		t.Fatalf("a Goexit in a chunk was never reported by For")
	}
	// Close returns: the replacement took over the ended worker's count.
	p.Close()
	if len(started) != 0 {
		t.Errorf("%d more workers started than ended", len(started))
	}
}

// TestOnClose: the hooks run once, at the first Close, after the workers
// ended; one added after Close runs at once.
func TestOnClose(t *testing.T) {
	p := New(3)
	var ran []string
	p.OnClose(func() { ran = append(ran, "a") })
	p.OnClose(func() { ran = append(ran, "b") })
	if len(ran) != 0 {
		t.Fatalf("hooks ran before Close: %v", ran)
	}
	p.Close()
	p.Close()
	if strings.Join(ran, "") != "ab" {
		t.Fatalf("after two Closes the hooks ran %v, want a then b, once", ran)
	}
	p.OnClose(func() { ran = append(ran, "c") })
	if strings.Join(ran, "") != "abc" {
		t.Fatalf("a hook added after Close: %v, want it run at once", ran)
	}
}
