package remote

import (
	"bytes"
	"sync"
	"testing"
	"time"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/remote/proto"
	"github.com/goffload/offload/plugins/remote/stream"
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
	if _, ok := d.(*device).l.t.(transport.Holder); !ok {
		t.Fatalf("not a TLS link: %T", d.(*device).l.t)
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

// tlsPair is a TLS session over a socket pair, both ends' transports.
func tlsPair(t *testing.T) (host, dev transport.Transport) {
	t.Helper()
	a, b := socketPair(t)
	sec := security(t, false)
	ua, ub := stream.Under(a), stream.Under(b)
	ca, cb := sec.client(ua, "pair:0"), sec.server(ub)
	errs := make(chan error, 1)
	go func() { errs <- cb.Handshake() }()
	if err := ca.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-errs; err != nil {
		t.Fatal(err)
	}
	ua.Spin()
	ub.Spin()
	return stream.NewTLS(ca), stream.NewTLS(cb)
}

// TestTLSLinkHoldsBack: a link whose other side reads nothing answers
// without blocking until the socket is full, the rest of the last TLS
// record held back; once the other side reads, the link's writer writes
// what was held back first, and every frame arrives, in order.
func TestTLSLinkHoldsBack(t *testing.T) {
	ht, dt := tlsPair(t)
	l := startLink(ht)
	defer l.fail(errLinkClosed)
	sent := 0
	for ; !l.held() && sent < 1<<20; sent++ {
		if err := l.sendSoon(&proto.Data{Xfer: uint64(sent)}); err != nil {
			t.Fatal(err)
		}
	}
	if !l.held() {
		t.Fatalf("%d frames sent without holding any bytes back", sent)
	}
	for i := range 100 { // queued behind what is held back
		if err := l.sendSoon(&proto.Data{Xfer: uint64(sent + i)}); err != nil {
			t.Fatal(err)
		}
	}
	sent += 100
	for i := range sent {
		m, err := dt.ReadMsg()
		if err != nil {
			t.Fatalf("frame %d of %d: %v", i, sent, err)
		}
		if m.Type != proto.TData || m.ID != uint64(i) {
			t.Fatalf("frame %d of %d: %s %d", i, sent, m.Type, m.ID)
		}
	}
	if l.held() {
		t.Error("bytes still held back after every frame came")
	}
}
