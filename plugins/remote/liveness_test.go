package remote

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/goffload/offload/plugins/remote/proto"
)

// TestSessionEndsWhenHostSilent: a device session whose host sends nothing
// for GOFFLOAD_DEVICE_TIMEOUT ends, freeing its memory (a TCP host that
// vanished without a FIN, a host that is stopped).
func TestSessionEndsWhenHostSilent(t *testing.T) {
	t.Setenv(envTimeout, "300ms")
	_, done := startSession(t) // the test's host link sends no pings
	select {
	case err := <-done:
		if !errors.Is(err, ErrSilent) {
			t.Fatalf("session ended with %v, want ErrSilent", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the session outlived a silent host")
	}
}

// TestPingsKeepLinkAlive: two live links that exchange nothing but pings
// stay up for several timeouts.
func TestPingsKeepLinkAlive(t *testing.T) {
	a, b := socketPair(t)
	la, lb := newLink(a), newLink(b)
	la.live(20*time.Millisecond, 100*time.Millisecond)
	lb.live(20*time.Millisecond, 100*time.Millisecond)
	go func() { // readers, as the engine has
		for {
			if _, err := lb.r.ReadMsg(); err != nil {
				return
			}
		}
	}()
	read := make(chan error, 1)
	go func() {
		_, err := la.r.ReadMsg() // only pings come: it returns when the link fails
		read <- err
	}()
	select {
	case err := <-read:
		t.Fatalf("link failed: %v (%v)", err, la.failed())
	case <-time.After(600 * time.Millisecond):
	}
	la.fail(errLinkClosed)
	lb.fail(errLinkClosed)
}

// TestCountedTransfersNumberedInWireOrder: transfers streamed at once from
// several goroutines are numbered in the order their last fragment goes
// out, which is the order the receiver completes them in (issue 7, 2: the
// count was taken after the send returned, in whatever order goroutines got
// there, and a device told a peer about an event before the host had the
// data it depended on).
func TestCountedTransfersNumberedInWireOrder(t *testing.T) {
	a, b := socketPair(t)
	la, lb := newLink(a), newLink(b)
	defer la.fail(errLinkClosed)
	defer lb.fail(errLinkClosed)
	const G = 6
	sizes := []int{proto.Fragment*3 + 5, 100, proto.Fragment, 7, proto.Fragment*2 + 1, 1}
	got := make(chan uint64, G) // ids in the order the receiver completes them
	go func() {
		pending := map[uint64]*incoming{}
		var mu sync.Mutex
		for id, n := range sizes {
			pending[uint64(id+1)] = &incoming{dst: make([]byte, n), size: n}
		}
		for range G {
			for {
				m, err := lb.r.ReadMsg()
				if err != nil {
					return
				}
				in, err := receive(&mu, pending, lb, m)
				if err != nil {
					t.Error(err)
					return
				}
				if in != nil {
					got <- m.ID
					break
				}
			}
		}
	}()
	seqs := make([]uint64, G+1) // by id
	var wg sync.WaitGroup
	for i := range G {
		wg.Add(1)
		go func() {
			defer wg.Done()
			seq, err := la.sendData(uint64(i+1), make([]byte, sizes[i]), true)
			if err != nil {
				t.Error(err)
			}
			seqs[i+1] = seq
		}()
	}
	wg.Wait()
	for want := uint64(1); want <= G; want++ {
		id := <-got
		if seqs[id] != want {
			t.Fatalf("transfer %d completed %dth at the receiver, numbered %d by the writer", id, want, seqs[id])
		}
	}
}
