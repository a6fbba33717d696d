package remote

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/remote/proto"
	"github.com/goffload/offload/plugins/remote/stream"
)

const limitSecret = "limits-s3cret-0123456789"

// lockedBuffer collects a TCP server's log lines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) lines() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Split(strings.TrimSpace(b.b.String()), "\n")
}

// startTCP serves hosts on ln in this process, with a handshake deadline of
// timeout; it stops at cleanup and checks that only closing ln stopped it.
func startTCP(t *testing.T, ln net.Listener, timeout time.Duration, sec *stream.Security) (*tcpServer, *lockedBuffer) {
	t.Helper()
	srv := newTCPServer(ln, sec, entries.Current(), 1)
	srv.timeout = timeout
	logs := &lockedBuffer{}
	srv.log.w = logs
	done := make(chan error, 1)
	go func() { done <- srv.serve() }()
	t.Cleanup(func() {
		ln.Close()
		if err := <-done; !errors.Is(err, net.ErrClosed) {
			t.Errorf("ServeTCP ended with %v, want net.ErrClosed", err)
		}
	})
	return srv, logs
}

// security is the protection of a TCP server or host that knows
// limitSecret: TLS with ephemeral certificates, or plain TCP.
func security(t *testing.T, plain bool) *stream.Security {
	t.Helper()
	t.Setenv(envPlain, "")
	if plain {
		t.Setenv(envPlain, "1")
	}
	s, err := stream.SecurityFromEnv(limitSecret)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func listenLoopback(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// openHonest opens the TCP device at addr as a host that knows the secret.
// Where hosts of this address just failed their proofs, it is refused
// until their pause is over (guessLimiter), and tries again meanwhile.
func openHonest(t *testing.T, addr string) plugin.Device {
	t.Helper()
	t.Setenv(envSecret, limitSecret)
	devs, err := openTCP(addr)
	for deadline := time.Now().Add(2 * failPauseMax); err != nil && strings.Contains(err.Error(), "too many failed proofs") && time.Now().Before(deadline); {
		time.Sleep(failPause / 4)
		devs, err = openTCP(addr)
	}
	if err != nil {
		t.Fatalf("honest host: %v", err)
	}
	t.Cleanup(func() { devs[0].Close() })
	if err := devs[0].Load(entries.Current(), 0); err != nil {
		t.Fatalf("honest host: %v", err)
	}
	return devs[0]
}

// checkServed round-trips data through device memory.
func checkServed(t *testing.T, d plugin.Device) {
	t.Helper()
	p, err := d.Alloc(64)
	if err != nil {
		t.Fatalf("alloc: %v", err)
	}
	q, err := d.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	in, out := []byte("served past the flood"), make([]byte, 21)
	q.Submit(p, in)
	q.Retrieve(out, p)
	if err := q.Synchronize(); err != nil || !bytes.Equal(in, out) {
		t.Fatalf("round trip: %v, %q", err, out)
	}
	q.Close()
}

// waitClosed reads conn until the device closes it; a safety deadline
// turns a connection the device never closes into an error.
func waitClosed(conn net.Conn) error {
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err := io.Copy(io.Discard, conn)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%s: the device did not close the connection", conn.LocalAddr())
	}
	return nil // EOF, or a reset: closed
}

// TestTCPLimitIdleFlood opens 500 idle connections from one address, far
// more than the 8 a device holds in the handshake for one address (and the
// 64 for all): an honest host from the same address that comes after them
// is admitted (the address's oldest idle connection is closed for it) and
// served at once, every idle connection is closed (the last 7 by the
// handshake deadline), the device says so in a few rate-limited lines,
// and the honest host's session outlives the deadline.
func TestTCPLimitIdleFlood(t *testing.T) {
	const idle = 500
	ln := listenLoopback(t)
	srv, logs := startTCP(t, ln, 2*time.Second, security(t, false))
	addr := ln.Addr().String()
	conns := make([]net.Conn, idle)
	for i := range conns {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("idle connection %d: %v", i, err)
		}
		defer c.Close()
		conns[i] = c
	}
	d := openHonest(t, addr)
	checkServed(t, d)
	srv.mu.Lock()
	evicted := srv.evicted
	srv.mu.Unlock()
	if want := idle + 1 - srv.slots.perSource; evicted != want {
		t.Errorf("%d connections closed to make room, want %d: the honest host did not come in while %d idle ones of its address held the handshake",
			evicted, want, srv.slots.perSource)
	}

	errs := make(chan error, idle)
	for _, c := range conns {
		go func() { errs <- waitClosed(c) }()
	}
	for range conns {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := srv.handshaking(); n != 0 {
		t.Errorf("%d connections still in the handshake after all were closed", n)
	}
	checkServed(t, d) // the deadline is lifted once a host is in

	lines := logs.lines()
	all := strings.Join(lines, "\n")
	if len(lines) > 4*srv.log.burst || !strings.Contains(all, "closed its oldest") ||
		!strings.Contains(all, "no handshake within 2s") || !strings.Contains(all, "dropped") {
		t.Errorf("%d log lines, want a few saying connections were closed to make room or timed out, and how many lines were dropped:\n%s", len(lines), all)
	}
}

// TestTCPLimitSlowHost: a host that trickles its handshake a byte at a
// time (the plain proof, or the TLS preface and ClientHello) is cut off by
// the handshake deadline, which counts from the connection, not from the
// last byte.
func TestTCPLimitSlowHost(t *testing.T) {
	for _, plain := range []bool{false, true} {
		t.Run(map[bool]string{false: "tls", true: "plain"}[plain], func(t *testing.T) { testSlowHost(t, plain) })
	}
}

func testSlowHost(t *testing.T, plain bool) {
	const timeout = 300 * time.Millisecond
	ln := listenLoopback(t)
	_, logs := startTCP(t, ln, timeout, security(t, plain))
	start := time.Now()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var frame []byte
	if plain {
		exchangePlainPreface(t, c)
		if _, err := readAuth(c); err != nil {
			t.Fatalf("challenge: %v", err)
		}
		frame = proto.AppendFrame(nil, &proto.Msg{Type: proto.TAuth, Text: strings.Repeat("ab", 64) + " " + strings.Repeat("cd", 32)}, nil)
	} else {
		readPreface(t, c)
		frame = append([]byte(prefaceTLS), clientHello(t)...)
	}
	closed := make(chan error, 1)
	go func() { closed <- waitClosed(c) }()
	tick := time.NewTicker(10 * time.Millisecond) // 190 bytes or more: 1.9 s
	defer tick.Stop()
	for sent := 0; ; sent++ {
		select {
		case err := <-closed:
			if err != nil {
				t.Fatal(err)
			}
			if el := time.Since(start); el < timeout {
				t.Errorf("closed after %v, before the %v deadline", el, timeout)
			}
			if sent >= len(frame) {
				t.Errorf("the whole handshake went through before the device closed the connection")
			}
			if all := strings.Join(logs.lines(), "\n"); !strings.Contains(all, "no handshake within 300ms") {
				t.Errorf("log: %s", all)
			}
			return
		case <-tick.C:
			if sent < len(frame) {
				c.Write(frame[sent : sent+1])
			}
		}
	}
}

// readPreface reads a device's preface.
func readPreface(t *testing.T, c net.Conn) string {
	t.Helper()
	b := make([]byte, len(prefaceTLS))
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("the device's preface: %v", err)
	}
	return string(b)
}

// exchangePlainPreface opens a plain session's handshake on c.
func exchangePlainPreface(t *testing.T, c net.Conn) {
	t.Helper()
	if p := readPreface(t, c); p != prefacePlain {
		t.Fatalf("the device's preface is %q, want %q", p, prefacePlain)
	}
	c.Write([]byte(prefacePlain))
}

// captureConn records what is written to it, and reads nothing.
type captureConn struct {
	net.Conn
	b bytes.Buffer
}

func (c *captureConn) Write(p []byte) (int, error) { return c.b.Write(p) }
func (c *captureConn) Read([]byte) (int, error)    { return 0, io.EOF }
func (c *captureConn) Close() error                { return nil }
func (c *captureConn) SetDeadline(time.Time) error { return nil }

// clientHello is the first flight of a host's TLS handshake.
func clientHello(t testing.TB) []byte {
	t.Helper()
	cc := &captureConn{}
	tls.Client(cc, &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true}).Handshake()
	if cc.b.Len() == 0 {
		t.Fatal("no ClientHello")
	}
	return cc.b.Bytes()
}

// flakyListener fails its first Accepts with errs.
type flakyListener struct {
	net.Listener
	mu   sync.Mutex
	errs []error
}

func (l *flakyListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	if len(l.errs) > 0 {
		err := l.errs[0]
		l.errs = l.errs[1:]
		l.mu.Unlock()
		return nil, err
	}
	l.mu.Unlock()
	return l.Listener.Accept()
}

func acceptErr(errno syscall.Errno) error {
	return &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", errno)}
}

// TestTCPLimitAcceptErrors: accept failing with "too many open files" (and
// an aborted connection) pauses the device, 5 ms doubling, and it goes on
// serving; an error that cannot go away ends it.
func TestTCPLimitAcceptErrors(t *testing.T) {
	ln := &flakyListener{Listener: listenLoopback(t), errs: []error{
		acceptErr(syscall.EMFILE), acceptErr(syscall.EMFILE), acceptErr(syscall.ENFILE), acceptErr(syscall.ECONNABORTED),
	}}
	_, logs := startTCP(t, ln, 5*time.Second, security(t, false))
	checkServed(t, openHonest(t, ln.Addr().String()))
	lines := logs.lines()
	want := []string{"too many open files; retrying in 5ms", "too many open files; retrying in 10ms",
		"too many open files in system; retrying in 20ms", "software caused connection abort; retrying in 40ms"}
	if len(lines) != len(want) {
		t.Fatalf("log %q, want %d lines", lines, len(want))
	}
	for i, w := range want {
		if !strings.Contains(lines[i], w) {
			t.Errorf("log line %d: %q, want %q", i, lines[i], w)
		}
	}

	bad := &flakyListener{Listener: listenLoopback(t), errs: []error{acceptErr(syscall.EMFILE), acceptErr(syscall.EINVAL)}}
	defer bad.Close()
	srv := newTCPServer(bad, security(t, false), entries.Current(), 1)
	srv.log.w = io.Discard
	if err := srv.serve(); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("serving a listener that fails for good: %v, want EINVAL", err)
	}
}

// TestTCPLimitGarbage sends a device what no host sends before proving the
// secret: each connection is refused at once (long before the deadline)
// with a malformed-frame line, the device allocates nothing near the sizes
// claimed, and an honest host is served after.
func TestTCPLimitGarbage(t *testing.T) {
	ln := listenLoopback(t)
	_, logs := startTCP(t, ln, time.Minute, security(t, true))
	addr := ln.Addr().String()
	length := func(n uint32, rest []byte) []byte { return append(binary.LittleEndian.AppendUint32(nil, n), rest...) }
	cases := map[string][]byte{
		"http":          []byte("GET / HTTP/1.1\r\nHost: device\r\n\r\n"),
		"4 GiB frame":   length(0xffffffff, nil),
		"largest frame": length(proto.MaxFrame, make([]byte, proto.HeaderSize)),
		"short frame":   length(3, []byte{byte(proto.TAuth), 0, 0}),
		"text of 2 GiB": func() []byte {
			b := proto.AppendFrame(nil, &proto.Msg{Type: proto.TAuth, Text: "x"}, nil)
			b[4+42+3] = 0x80
			return b
		}(),
		"payload":         proto.AppendFrame(nil, &proto.Msg{Type: proto.TAuth, Text: "a b"}, []byte{1, 2, 3}),
		"hello, not auth": proto.AppendFrame(nil, &proto.Msg{Type: proto.THello, Text: helloText(entries.Current())}, nil),
	}
	const rounds = 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for name, garbage := range cases {
		for range rounds {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			exchangePlainPreface(t, c)
			if _, err := readAuth(c); err != nil {
				t.Fatalf("%s: challenge: %v", name, err)
			}
			c.Write(garbage)
			if err := waitClosed(c); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			c.Close()
		}
	}
	runtime.ReadMemStats(&after)
	n := uint64(rounds * len(cases))
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > 16<<10 {
		t.Errorf("%d bytes allocated per refused connection, want a few KiB", per)
	} else {
		t.Logf("%d bytes allocated per refused connection", per)
	}
	lines := logs.lines()
	for _, l := range lines {
		if !strings.Contains(l, "refused host") || !strings.Contains(l, "malformed frame") {
			t.Errorf("log line %q, want a refusal for a malformed frame", l)
		}
	}
	checkServed(t, openHonest(t, addr))
}

// TestTCPLimitHostSide: a host bounds what a device sends before proving
// the secret, too: a 4 GiB challenge (plain) or answer to its proof (inside
// TLS).
func TestTCPLimitHostSide(t *testing.T) {
	for _, plain := range []bool{false, true} {
		t.Run(map[bool]string{false: "tls", true: "plain"}[plain], func(t *testing.T) {
			sec := security(t, plain)
			ln := listenLoopback(t)
			defer ln.Close()
			go func() {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
				c.Write([]byte(prefaceOf(sec)))
				var w io.Writer = c
				if !plain {
					io.ReadFull(c, make([]byte, len(prefaceTLS)))
					tc := tlsServer(t, c)
					if tc.Handshake() != nil {
						return
					}
					w = tc
				}
				w.Write([]byte{0xff, 0xff, 0xff, 0xff})
				io.Copy(io.Discard, c)
			}()
			t.Setenv(envSecret, limitSecret)
			if _, err := openTCP(ln.Addr().String()); !errors.Is(err, proto.ErrFrame) || !strings.Contains(err.Error(), "before authentication") {
				t.Errorf("got %v, want ErrFrame for a 4 GiB handshake frame", err)
			}
		})
	}
}

// TestTCPLimitFloodKeepsOthers: an honest host from one address holds a
// handshake slot, not yet proved, while another address opens 200
// connections; its slot is kept (only the flood's own are closed), and
// its handshake then succeeds. The newest closed the oldest whatever its
// address, so the flood cut the honest host off.
func TestTCPLimitFloodKeepsOthers(t *testing.T) {
	const flood = 200
	ln := listenLoopback(t)
	srv, _ := startTCP(t, ln, 10*time.Second, security(t, false))
	addr := ln.Addr().String()
	honest, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer honest.Close()
	for srv.handshaking() != 1 { // admitted
		runtime.Gosched()
	}
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	for i := range flood {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("flood connection %d: %v", i, err)
		}
		defer c.Close()
	}
	for { // every connection admitted: in the handshake, or closed for room
		srv.mu.Lock()
		evicted := srv.evicted
		srv.mu.Unlock()
		if evicted+srv.handshaking() == flood+1 {
			break
		}
		runtime.Gosched()
	}
	honest.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := security(t, false).HostHandshake(honest, addr); err != nil {
		t.Fatalf("the honest host's handshake after the flood from another address: %v", err)
	}
}

// TestHandshakeSlotsFair drives the handshake slots without sockets: one
// address opening connections without end holds at most its share and
// evicts only its own, the honest addresses keep theirs; with every slot
// taken by addresses of one connection each, the oldest goes first.
func TestHandshakeSlotsFair(t *testing.T) {
	s := newHandshakeSlots(64, 8)
	var honest []*handshake
	for i := range 20 {
		h := &handshake{src: fmt.Sprintf("10.0.1.%d", i)}
		if _, old := s.admit(h); old != nil {
			t.Fatalf("an honest host was admitted by evicting %s", old.src)
		}
		honest = append(honest, h)
	}
	for i := range 1000 {
		_, old := s.admit(&handshake{src: "10.6.6.6"})
		if old != nil && old.src != "10.6.6.6" {
			t.Fatalf("flood connection %d evicted %s's", i, old.src)
		}
	}
	if n := s.bySrc["10.6.6.6"]; n != 8 {
		t.Errorf("the flooder holds %d slots, want 8", n)
	}
	for _, h := range honest {
		if h.evicted {
			t.Fatalf("%s was evicted by the flood", h.src)
		}
	}
	// 36 more addresses fill the 64 slots; newcomers then evict the
	// flooder's down to one, then the oldest of those that hold one each.
	for i := range 36 {
		if _, old := s.admit(&handshake{src: fmt.Sprintf("10.0.2.%d", i)}); old != nil {
			t.Fatalf("address %d of 36 evicted %s, with %d slots taken", i, old.src, s.len())
		}
	}
	for i := range 7 {
		if _, old := s.admit(&handshake{src: fmt.Sprintf("10.0.3.%d", i)}); old == nil || old.src != "10.6.6.6" {
			t.Fatalf("with every slot taken, newcomer %d evicted %v, want the flooder's", i, old)
		}
	}
	if _, old := s.admit(&handshake{src: "10.0.4.1"}); old != honest[0] {
		t.Fatalf("with every address holding one, the newcomer evicted %v, want the oldest (%s)", old, honest[0].src)
	}
	if s.len() != 64 {
		t.Fatalf("%d in the handshake, want 64", s.len())
	}
	for e := s.all.Front(); e != nil; {
		next := e.Next()
		if !s.leave(e) {
			t.Fatal("a handshake in the list counts as evicted")
		}
		e = next
	}
	if s.len() != 0 || len(s.bySrc) != 0 {
		t.Fatalf("after every handshake left: %d in the list, %d addresses counted", s.len(), len(s.bySrc))
	}
}

// TestSecretTooShort: a secret shorter than 16 bytes is refused by a host
// opening a tcp:// device (ErrBadSpec: Start fails) and by a TCP device
// starting, saying how to make one, unless GOFFLOAD_WEAK_SECRET=1.
func TestSecretTooShort(t *testing.T) {
	ln := listenLoopback(t)
	addr := ln.Addr().String()
	ln.Close() // nothing serves there
	t.Setenv("GOFFLOAD_WEAK_SECRET", "")
	for _, secret := range []string{"x", "s3cret", "fifteen bytes!!"} {
		t.Setenv(envSecret, secret)
		_, err := openTCP(addr)
		if !errors.Is(err, plugin.ErrBadSpec) || !strings.Contains(err.Error(), "openssl rand -hex 32") || !strings.Contains(err.Error(), "GOFFLOAD_WEAK_SECRET=1") || !strings.Contains(err.Error(), fmt.Sprintf("%d bytes, shorter than 16", len(secret))) {
			t.Errorf("host, secret %q: %v; want ErrBadSpec saying how to make one and how to opt out", secret, err)
		}
		t.Setenv(envRole, "device")
		t.Setenv(envFD, "")
		t.Setenv(envListen, "127.0.0.1:0")
		if err := serve(entries.Current()); err == nil || !strings.Contains(err.Error(), "openssl rand -hex 32") {
			t.Errorf("device, secret %q: %v; want a refusal saying how to make one", secret, err)
		}
		t.Setenv("GOFFLOAD_WEAK_SECRET", "1")
		if _, err := openTCP(addr); err == nil || errors.Is(err, plugin.ErrBadSpec) {
			t.Errorf("host, secret %q with %s=1: %v; want it taken (and the device unavailable)", secret, "GOFFLOAD_WEAK_SECRET", err)
		}
		t.Setenv("GOFFLOAD_WEAK_SECRET", "")
	}
	t.Setenv(envSecret, "sixteen bytes!!!")
	if _, err := openTCP(addr); err == nil || errors.Is(err, plugin.ErrBadSpec) {
		t.Errorf("a secret of 16 bytes: %v; want it taken (and the device unavailable)", err)
	}
}

// TestTCPLimitGarbageTLS sends a TLS device what no host sends: garbage
// instead of the preface, instead of TLS after it, and inside the TLS
// session instead of the proof (where the limits on handshake frames hold
// as on a plain session). Each connection is refused at once with a line
// that says why, the device allocates nothing near the sizes claimed, and
// an honest host is served after.
func TestTCPLimitGarbageTLS(t *testing.T) {
	ln := listenLoopback(t)
	sec := security(t, false)
	srv, logs := startTCP(t, ln, time.Minute, sec)
	srv.log.mu.Lock()
	srv.log.burst = 1 << 20 // every refusal's line, to check each
	srv.log.mu.Unlock()
	addr := ln.Addr().String()
	length := func(n uint32, rest []byte) []byte { return append(binary.LittleEndian.AppendUint32(nil, n), rest...) }
	http := []byte("GET / HTTP/1.1\r\nHost: device\r\n\r\n")
	cases := []struct {
		name    string
		preface bool   // send the TLS preface first
		inTLS   bool   // and set up the TLS session, and send garbage inside
		garbage []byte // what is sent then
		says    string // in the device's line
	}{
		{"http", false, false, http, "not a goffload host"},
		{"http after the preface", true, false, http, "does not speak TLS"},
		{"4 GiB frame", true, true, length(0xffffffff, nil), "malformed frame"},
		{"largest frame", true, true, length(proto.MaxFrame, make([]byte, proto.HeaderSize)), "malformed frame"},
		{"short frame", true, true, length(3, []byte{byte(proto.TAuth), 0, 0}), "malformed frame"},
		{"payload", true, true, proto.AppendFrame(nil, &proto.Msg{Type: proto.TAuth, Text: "a b"}, []byte{1, 2, 3}), "malformed frame"},
		{"hello, not auth", true, true, proto.AppendFrame(nil, &proto.Msg{Type: proto.THello, Text: helloText(entries.Current())}, nil), "malformed frame"},
	}
	const rounds = 10
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, c := range cases {
		for range rounds {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			readPreface(t, conn)
			var w net.Conn = conn
			if c.preface {
				conn.Write([]byte(prefaceTLS))
			}
			if c.inTLS {
				tc := tlsClient(conn)
				if err := tc.Handshake(); err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				w = tc
			}
			w.Write(c.garbage)
			if err := waitClosed(conn); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			conn.Close()
		}
		if all := strings.Join(logs.lines(), "\n"); !strings.Contains(all, c.says) {
			t.Errorf("%s: no refusal saying %q:\n%s", c.name, c.says, all)
		}
	}
	runtime.ReadMemStats(&after)
	// Both sides of the connections are in this process: a TLS handshake
	// each, the host's included.
	n := uint64(rounds * len(cases))
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > 256<<10 {
		t.Errorf("%d bytes allocated per refused connection, want some tens of KiB", per)
	} else {
		t.Logf("%d bytes allocated per refused connection, both sides", per)
	}
	for _, l := range logs.lines() {
		if !strings.Contains(l, "refused host") {
			t.Errorf("log line %q, want a refusal", l)
		}
	}
	checkServed(t, openHonest(t, addr))
}
