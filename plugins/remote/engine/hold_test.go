package engine

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"testing"
	"time"

	"github.com/goffload/offload/plugins/remote/proto"
	"github.com/goffload/offload/plugins/remote/stream"
	"github.com/goffload/offload/plugins/remote/transport"
)

// TestReaderAnswersABatchInOneWrite: frames that arrive together are
// answered together. A link's reader that answers each frame with sendSoon
// while more frames wait in its buffer holds the answers back (link.hold)
// and writes them in one go when it reaches the end of the batch
// (link.release): a batch of launches costs one write back, not one each.
// Every answer arrives, in order, and none waits for a later frame.
func TestReaderAnswersABatchInOneWrite(t *testing.T) {
	a, b := socketPair(t)
	dev := newLink(a)
	defer dev.close(time.Second)
	const n = 200
	var batch []byte
	for i := range n {
		batch = proto.AppendFrame(batch, &proto.Msg{Type: proto.TLaunch, ID: uint64(i)}, nil)
	}
	// The whole batch is in the socket before the device reads any of it:
	// a reader that raced the write could find it in pieces.
	host := stream.New(b)
	before := dev.writes.Load()
	if err := host.WriteFrames(batch); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() {
		for {
			m, err := dev.r.ReadMsg()
			if err != nil {
				served <- err
				return
			}
			if err := dev.sendSoon(&proto.Reply{Req: m.ID}); err != nil {
				served <- err
				return
			}
		}
	}()
	read := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			m, err := host.ReadMsg()
			if err != nil {
				t.Fatal(err)
			}
			if m.Type != proto.TReply || m.ID != uint64(i) {
				t.Fatalf("answer %d: %s %d", i, m.Type, m.ID)
			}
		}
	}
	read(0, n)
	if w := dev.writes.Load() - before; w > n/10 {
		t.Errorf("%d frames that came in one write were answered in %d writes, want a few", n, w)
	}
	// A lone frame is answered at once: nothing is held back waiting for
	// frames that do not come.
	for i := n; i < n+10; i++ {
		if err := host.WriteFrames(proto.AppendFrame(nil, &proto.Msg{Type: proto.TLaunch, ID: uint64(i)}, nil)); err != nil {
			t.Fatal(err)
		}
		read(i, i+1)
	}
	select {
	case err := <-served:
		t.Fatalf("device reader ended: %v", err)
	default:
	}
}

// tlsPair is a TLS session over a socket pair, both ends' transports.
func tlsPair(t *testing.T) (host, dev transport.Transport) {
	t.Helper()
	a, b := socketPair(t)
	cert := selfSigned(t)
	ua, ub := stream.Under(a), stream.Under(b)
	ca := tls.Client(ua, &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true})
	cb := tls.Server(ub, &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}})
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

// selfSigned is a fresh self-signed certificate.
func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "goffload test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
