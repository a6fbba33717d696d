package waitpoll

import (
	"testing"
	"time"
)

// TestRecv: Recv returns what is sent while it polls, what is sent after
// its budget (parked), and reports a closed channel.
func TestRecv(t *testing.T) {
	for _, budget := range []time.Duration{0, time.Microsecond, Budget} {
		ch := make(chan int, 1)
		go func() {
			time.Sleep(2 * time.Millisecond)
			ch <- 7
		}()
		if v, ok := Recv(ch, budget, 20*time.Microsecond, 64); v != 7 || !ok {
			t.Errorf("budget %v: got %d, %v; want 7, true", budget, v, ok)
		}
		ch <- 8
		if v, ok := Recv(ch, budget, 20*time.Microsecond, 64); v != 8 || !ok {
			t.Errorf("budget %v: with a value ready got %d, %v; want 8, true", budget, v, ok)
		}
		close(ch)
		if _, ok := Recv(ch, budget, 20*time.Microsecond, 64); ok {
			t.Errorf("budget %v: closed channel: ok", budget)
		}
	}
}

// TestRecvBounded: a Recv with nothing sent polls no longer than its
// budget (and a little), then parks.
func TestRecvBounded(t *testing.T) {
	ch := make(chan int)
	done := make(chan struct{})
	go func() {
		Recv(ch, time.Millisecond, 0, 0)
		close(done)
	}()
	time.Sleep(50 * time.Millisecond) // long parked by now
	ch <- 1
	<-done
}
