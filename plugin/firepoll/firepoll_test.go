package firepoll

import (
	"sync/atomic"
	"testing"
)

// TestPoller: each function runs once, after its event reports fired, in
// whatever order the events fire; the poller's goroutine ends when nothing
// is left to watch and starts again for the next Add.
func TestPoller(t *testing.T) {
	var p Poller
	for round := range 2 {
		const n = 50
		var flags [n]atomic.Bool
		var ran [n]atomic.Int32
		done := make(chan int, n)
		for i := range n {
			p.Add(flags[i].Load, func() {
				if !flags[i].Load() {
					t.Errorf("round %d: function %d ran before its event fired", round, i)
				}
				ran[i].Add(1)
				done <- i
			})
		}
		for i := n - 1; i >= 0; i-- { // fire in reverse
			flags[i].Store(true)
		}
		for range n {
			<-done
		}
		for i := range n {
			if r := ran[i].Load(); r != 1 {
				t.Errorf("round %d: function %d ran %d times", round, i, r)
			}
		}
	}
}
