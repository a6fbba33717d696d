package stream

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/goffload/offload/plugins/remote/proto"
)

// TestGuessLimiter drives the failed-proof limiter without sockets: a
// failed proof pauses its source's next ones, doubling up to the most,
// other sources are not paused, a proof forgets the failures, and so does
// a long quiet time; the sources remembered are bounded.
func TestGuessLimiter(t *testing.T) {
	g := NewGuessLimiter()
	t0 := time.Unix(1000, 0)
	if w := g.allow("10.0.0.1", t0); w != 0 {
		t.Fatalf("a new source waits %v", w)
	}
	want := failPause
	now := t0
	for i := range 12 {
		if p := g.failed("10.0.0.1", now); p != want {
			t.Fatalf("failure %d: pause %v, want %v", i+1, p, want)
		}
		if w := g.allow("10.0.0.1", now.Add(want/2)); w != want/2 {
			t.Fatalf("failure %d: halfway through the pause, waits %v, want %v", i+1, w, want/2)
		}
		if w := g.allow("10.0.0.2", now); w != 0 {
			t.Fatalf("another source waits %v", w)
		}
		now = now.Add(want)
		if w := g.allow("10.0.0.1", now); w != 0 {
			t.Fatalf("failure %d: after the pause, waits %v", i+1, w)
		}
		want = min(2*want, failPauseMax)
	}
	if want != failPauseMax {
		t.Fatalf("the pause stopped doubling at %v, want %v", want, failPauseMax)
	}
	g.Proved("10.0.0.1")
	if p := g.failed("10.0.0.1", now); p != failPause {
		t.Fatalf("after a proof, a failure pauses %v, want %v", p, failPause)
	}
	g.failed("10.0.0.1", now)
	if p := g.failed("10.0.0.1", now.Add(failForget)); p != failPause {
		t.Fatalf("after %v quiet, a failure pauses %v, want %v", failForget, p, failPause)
	}
	for i := range 2 * maxFailSources {
		g.failed(fmt.Sprintf("src%d", i), now.Add(time.Duration(i)))
	}
	if n := len(g.src); n > maxFailSources {
		t.Fatalf("%d sources remembered, want at most %d", n, maxFailSources)
	}
	if w := g.allow(fmt.Sprintf("src%d", 2*maxFailSources-1), now); w == 0 {
		t.Fatal("the latest source's failure was forgotten")
	}
}

// FuzzTCPHandshake feeds a TCP device's handshake (device side, in the mode
// of the input's first byte: odd plain, even TLS) what a host that has not
// proved the secret may send, after the device's preface: it must refuse
// it with an error, never panic or hang, and never let it in. What a host
// sends once in is read by the session's handlers (FuzzSession) through
// the same frame reader, whether the link is plain or TLS.
func FuzzTCPHandshake(f *testing.F) {
	hello := func(plain bool) []byte {
		if plain {
			return append([]byte(prefacePlain), frames(&proto.Msg{Type: proto.TAuth, Text: strings.Repeat("ab", 32) + " " + strings.Repeat("cd", 32)})...)
		}
		return append([]byte(prefaceTLS), clientHello(f)...)
	}
	f.Add(append([]byte{1}, hello(true)...))
	f.Add(append([]byte{0}, hello(false)...))
	f.Add(append([]byte{0}, prefacePlain...))
	f.Add([]byte{0, 0x16, 3, 1, 0xff, 0xff})
	secs := map[bool]*Security{}
	for _, plain := range []bool{false, true} {
		s := &Security{secret: limitSecret, plain: plain}
		if !plain {
			s.cert, _ = ephemeralCert()
		}
		secs[plain] = s
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		sec := secs[data[0]%2 == 1]
		host, dev := socketPair(t)
		dev.SetDeadline(time.Now().Add(20 * time.Second))
		go func() {
			host.Write(data[1:])
			host.(*net.UnixConn).CloseWrite()
			io.Copy(io.Discard, host)
		}()
		if c, err := sec.deviceHandshake(dev, nil); err == nil {
			t.Fatalf("%x: let in as %T", data, c)
		} else if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%x: the handshake hung", data)
		}
	})
}

// TestEphemeralCertOnce: the process's self-signed certificate is made
// once, however many sessions it protects.
func TestEphemeralCertOnce(t *testing.T) {
	a, _ := ephemeralCert()
	b, _ := ephemeralCert()
	if &a.Certificate[0][0] != &b.Certificate[0][0] {
		t.Error("a second ephemeral certificate was made")
	}
}

const limitSecret = "limits-s3cret-0123456789"

// socketPair is a connected pair of Unix stream sockets.
func socketPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := SocketPair()
	if err != nil {
		t.Fatal(err)
	}
	var c [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "test-socket")
		c[i], err = net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { c[0].Close(); c[1].Close() })
	return c[0], c[1]
}

// frames encodes ms, one after the other.
func frames(ms ...*proto.Msg) []byte {
	var b []byte
	for _, m := range ms {
		b = proto.AppendFrame(b, m, m.Payload)
	}
	return b
}

// captureConn keeps what is written to it.
type captureConn struct {
	net.Conn
	b bytes.Buffer
}

func (c *captureConn) Write(p []byte) (int, error) { return c.b.Write(p) }
func (c *captureConn) Read([]byte) (int, error)    { return 0, io.EOF }
func (c *captureConn) Close() error                { return nil }
func (c *captureConn) SetDeadline(time.Time) error { return nil }

// clientHello is a TLS ClientHello as a host sends it.
func clientHello(t testing.TB) []byte {
	t.Helper()
	sec := &Security{secret: limitSecret}
	cc := &captureConn{}
	sec.client(cc, "127.0.0.1:1").Handshake()
	if cc.b.Len() == 0 {
		t.Fatal("no ClientHello")
	}
	return cc.b.Bytes()
}
