package workpool

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// spinning turns polling on for the test, with the test on reports.
func spinning(t *testing.T, on *atomic.Bool) {
	on.Store(true)
	SetSpinWhile(on.Load)
	t.Cleanup(func() { SetSpinWhile(nil) })
}

// TestPollingCoversOnce: with polling workers, loops of every length from
// many goroutines at once on the same pool run each index once, and
// chunks do go through the workers' hands.
func TestPollingCoversOnce(t *testing.T) {
	var on atomic.Bool
	spinning(t, &on)
	p := New(4)
	defer p.Close()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for it := range 500 {
				n := (g*131 + it*17) % 97
				seen := make([]atomic.Int32, n)
				p.For(n, func(lo, hi int) {
					for i := lo; i < hi; i++ {
						seen[i].Add(1)
					}
				})
				for i := range seen {
					if c := seen[i].Load(); c != 1 {
						t.Errorf("goroutine %d loop %d (n=%d): index %d ran %d times", g, it, n, i, c)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if p.handed.Load() == 0 {
		t.Error("no chunk was handed to a polling worker")
	}
}

// TestPollingStops: workers poll only while the test holds; once it does
// not, they park (and a loop then wakes them through the channel).
func TestPollingStops(t *testing.T) {
	var on atomic.Bool
	spinning(t, &on)
	p := New(3)
	defer p.Close()
	p.For(3, func(lo, hi int) {})
	on.Store(false)
	deadline := time.Now().Add(5 * time.Second)
	for p.polling.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d workers still poll 5 s after the test turned false", p.polling.Load())
		}
		runtime.Gosched()
	}
	handed := p.handed.Load()
	var n atomic.Int32
	p.For(3, func(lo, hi int) { n.Add(int32(hi - lo)) })
	if n.Load() != 3 || p.handed.Load() != handed {
		t.Fatalf("after polling stopped: %d of 3 indexes, %d chunks handed to polling workers", n.Load(), p.handed.Load()-handed)
	}
}

// TestPollingGoexit: a chunk that a polling worker took and that ends the
// goroutine is reported as a Goexit; the replacement takes the worker's
// hand, and the pool keeps its size and closes.
func TestPollingGoexit(t *testing.T) {
	var on atomic.Bool
	spinning(t, &on)
	const workers = 2
	started := make(chan struct{}, 16)
	p := newPool(workers, func() { started <- struct{}{} })
	<-started
	reported := 0
	for try := 0; try < 2000 && reported < 3; try++ {
		handed := p.handed.Load()
		res := make(chan any, 1)
		go func() {
			defer func() { res <- recover() }()
			p.For(workers, func(lo, hi int) {
				if lo > 0 && p.handed.Load() > handed {
					runtime.Goexit()
				}
			})
		}()
		if r := <-res; r != nil {
			if pe, ok := r.(*PanicError); !ok || !pe.Goexit {
				t.Fatalf("recovered %v, want a *PanicError with Goexit set", r)
			}
			<-started // the replacement
			reported++
		}
	}
	if reported == 0 {
		t.Fatal("no chunk taken by a polling worker ended its goroutine")
	}
	var n atomic.Int32
	p.For(100, func(lo, hi int) { n.Add(int32(hi - lo)) })
	if n.Load() != 100 {
		t.Fatalf("after the Goexits a loop ran %d of 100 indexes", n.Load())
	}
	p.Close()
	if len(started) != 0 {
		t.Errorf("%d more workers started than ended", len(started))
	}
}

// TestPollingClose: Close returns while workers poll.
func TestPollingClose(t *testing.T) {
	var on atomic.Bool
	spinning(t, &on)
	p := New(4)
	p.For(4, func(lo, hi int) {})
	done := make(chan struct{})
	go func() { p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return with polling workers")
	}
}
