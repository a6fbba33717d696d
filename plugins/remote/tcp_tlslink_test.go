package remote

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/remote/engine"
	"github.com/goffload/offload/plugins/remote/transport"
)

// TestTLSLinkBusyBothWays: over a protected session, 8 MiB transfers
// stream both ways while small operations go back and forth between them
// (answers that the device's reader writes without blocking, holding back
// what of a TLS record the socket has no room for): every byte arrives
// where it belongs and nothing hangs.
func TestTLSLinkBusyBothWays(t *testing.T) {
	t.Setenv(envSecret, limitSecret)
	ln := listenLoopback(t)
	startTCP(t, ln, 5*time.Second, security(t, false))
	d := openHonest(t, ln.Addr().String())
	if _, ok := d.(*engine.Device).Transport().(transport.Holder); !ok {
		t.Fatalf("not a TLS link: %T", d.(*engine.Device).Transport())
	}
	const big = 8 << 20
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Go(func() {
		p, err := d.Alloc(big)
		if err != nil {
			errs <- err
			return
		}
		q, _ := d.NewQueue()
		defer q.Close()
		in, out := make([]byte, big), make([]byte, big)
		for round := range 3 {
			for i := range in {
				in[i] = byte(i*7 + round)
			}
			q.Submit(p, in)
			q.Retrieve(out, p)
			if err := q.Synchronize(); err != nil {
				errs <- err
				return
			}
			if !bytes.Equal(in, out) {
				t.Errorf("round %d: 8 MiB came back different", round)
			}
		}
	})
	wg.Go(func() {
		p, err := d.Alloc(64)
		if err != nil {
			errs <- err
			return
		}
		q, _ := d.NewQueue()
		defer q.Close()
		for i := range 500 {
			in, out := bytes.Repeat([]byte{byte(i)}, 64), make([]byte, 64)
			q.Submit(p, in)
			q.Launch(nopK, []plugin.Arg{})
			q.Retrieve(out, p)
			if err := q.Synchronize(); err != nil {
				errs <- err
				return
			}
			if !bytes.Equal(in, out) {
				t.Errorf("small round trip %d: %v", i, out[:4])
				return
			}
		}
	})
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("transfers over a TLS link hang")
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
