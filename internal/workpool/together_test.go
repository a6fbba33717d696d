package workpool

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// TestChunksRunTogether: a chunk handed to a worker starts at once, not
// after an idle thread wakes up to take it. The caller's chunk spins (it
// never yields) until the worker's has started. When the worker waited as
// the next goroutine of the caller's P, it started only once an idle thread
// woke up to take it: 40–90 µs late on a 2-core VM between back-to-back
// loops, 0.4–0.7 ms after a millisecond idle (as here); a loop of 100 µs
// chunks over two workers ran no faster than on one core. Now it runs first, on the caller's P, and the
// caller's chunk goes where an idle P finds it: the wait is nil in most
// rounds, whatever the load; the median over the rounds is checked.
func TestChunksRunTogether(t *testing.T) {
	p := New(2)
	defer p.Close()
	var waits []time.Duration
	for range 51 {
		// Long enough for the idle threads to go to sleep, as between
		// the kernels of a real program.
		time.Sleep(time.Millisecond)
		var started atomic.Bool
		var waited time.Duration
		p.ForChunks(2, func(c Chunk) {
			if c.Index == 1 {
				started.Store(true)
				return
			}
			t0 := time.Now()
			for !started.Load() && time.Since(t0) < time.Second {
			}
			waited = time.Since(t0)
		})
		waits = append(waits, waited)
	}
	slices.Sort(waits)
	if med := waits[len(waits)/2]; med > 20*time.Microsecond {
		t.Fatalf("the caller's chunk ran %v (median of %d rounds) before the worker's chunk started; all: %v", med, len(waits), waits)
	}
}
