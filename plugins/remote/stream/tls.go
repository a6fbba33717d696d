package stream

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/goffload/offload/plugins/remote/proto"
	"github.com/goffload/offload/plugins/remote/transport"
)

// tlsTransport is a Transport over a TLS session (a tcp:// link). Its frames
// are transport.Stream's. They are written through a buffer of one TLS
// record. So small frames and a fragment's header share records with what
// follows them, rather than each costing one (and a write). It writes without
// blocking (TryWriteFrames) as a plain socket does. But a record is encrypted
// whole. What of it the socket has no room for is held back (UnderTLS). The
// link's writer writes that before anything else.
type tlsTransport struct {
	s   *transport.Stream
	bw  *bufio.Writer
	raw *UnderTLS // under the TLS session
	tc  *tls.Conn
	hdr []byte // the writer's
}

// tlsRecord is the largest plaintext of a TLS record.
const tlsRecord = 16 << 10

// NewTLS makes the transport of a link over the TLS session tc. tc must run
// over Under's connection, spinning (UnderTLS.Spin) once the handshake is
// done. Its reads then poll before they park beneath the TLS layer, as a
// plain link's do. Its tries to write never wait. They hold back for the
// writer what of a record the socket has no room for (transport.TryWriter,
// transport.Holder).
func NewTLS(tc *tls.Conn) transport.Transport {
	u := tc.NetConn().(*UnderTLS)
	return &tlsTransport{s: transport.NewStream(tc, nil), bw: bufio.NewWriterSize(tc, tlsRecord), raw: u, tc: tc}
}

// ConnectionState is the TLS session's state (tls.Conn.ConnectionState).
func (t *tlsTransport) ConnectionState() tls.ConnectionState { return t.tc.ConnectionState() }

func (t *tlsTransport) WriteFrames(frames []byte) error {
	if err := t.raw.writeHeld(); err != nil {
		return explainTLS(err, false)
	}
	t.bw.Write(frames) // an error stays in bw, which Flush returns
	return explainTLS(t.bw.Flush(), false)
}

// TryWriteFrames encrypts frames into one record (or more) and writes what
// the socket has room for now. The rest is held back for the writer. If bytes
// are held back already, it writes nothing.
func (t *tlsTransport) TryWriteFrames(frames []byte) (int, error) {
	if t.raw.raw == nil || t.Held() {
		return 0, nil
	}
	t.raw.try.Store(true)
	_, err := t.tc.Write(frames)
	t.raw.try.Store(false)
	if err != nil {
		return 0, explainTLS(err, false)
	}
	return len(frames), nil
}

// Held reports whether bytes are held back for the writer.
func (t *tlsTransport) Held() bool { return t.raw.held() }

func (t *tlsTransport) WriteData(id uint64, off int, data []byte) error {
	if err := t.raw.writeHeld(); err != nil {
		return explainTLS(err, false)
	}
	t.hdr = transport.AppendDataHeader(t.hdr[:0], id, off, len(data))
	t.bw.Write(t.hdr)
	t.bw.Write(data)
	return explainTLS(t.bw.Flush(), false)
}

func (t *tlsTransport) ReadMsg() (*proto.Msg, error) {
	m, err := t.s.ReadMsg()
	if err != nil {
		return nil, explainTLS(err, false)
	}
	return m, nil
}

func (t *tlsTransport) ReadPayload(m *proto.Msg, dst []byte) error {
	return explainTLS(t.s.ReadPayload(m, dst), false)
}

func (t *tlsTransport) Discard(m *proto.Msg) error { return explainTLS(t.s.Discard(m), false) }

// Buffered reports whether bytes were read already that the next ReadMsg
// reads first (beyond those the TLS session holds).
func (t *tlsTransport) Buffered() bool { return t.s.Buffered() }

// Close closes the connection under the session without a close_notify alert,
// which could wait for room to write it. The protocol's own frames end a
// session, and a cut one is an error either way.
func (t *tlsTransport) Close() error { return t.raw.Close() }

// Under returns the connection to set a TLS session up over, for NewTLS. It
// is conn, whose reads park at once until Spin.
func Under(conn net.Conn) *UnderTLS { return &UnderTLS{Conn: conn} }

// UnderTLS is the TCP connection under a TLS session. Once the session is set
// up, its reads poll before they park, as a plain link's do
// (transport.SpinReader). During the handshake they park at once, so a flood
// of handshakes costs no polling. Only the session's reader reads it. A write
// while try is set (tlsTransport.TryWriteFrames) never blocks. What the
// socket has no room for is held back, and every write writes what is held
// back first.
type UnderTLS struct {
	net.Conn
	r   io.Reader
	raw syscall.RawConn // for writes that must not block; nil if none

	try   atomic.Bool
	mu    sync.Mutex   // over hold, held across a blocking write
	hold  []byte       // ciphertext a try could not write yet
	nhold atomic.Int64 // len(hold), read without mu: a blocking write holds mu
}

// Spin makes the connection's reads poll before they park, as a plain link's
// do: the session is set up.
func (u *UnderTLS) Spin() {
	u.r = transport.SpinReader(u.Conn, transport.SpinBudget())
	if sc, ok := u.Conn.(syscall.Conn); ok {
		u.raw, _ = sc.SyscallConn()
	}
}

// Write writes p, or during a try holds back what the socket has no room for.
// What is held back goes first.
func (u *UnderTLS) Write(p []byte) (int, error) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.try.Load() {
		n := 0
		if len(u.hold) == 0 {
			var err error
			if n, err = tryWrite(u.raw, p); err != nil {
				return 0, err
			}
		}
		u.hold = append(u.hold, p[n:]...)
		u.nhold.Store(int64(len(u.hold)))
		return len(p), nil
	}
	if err := u.writeHeldLocked(); err != nil {
		return 0, err
	}
	return u.Conn.Write(p)
}

// held reports whether bytes are held back. It never waits: the link
// asks under its lock.
func (u *UnderTLS) held() bool { return u.nhold.Load() > 0 }

// writeHeld writes what is held back, waiting for room.
func (u *UnderTLS) writeHeld() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.writeHeldLocked()
}

func (u *UnderTLS) writeHeldLocked() error {
	if len(u.hold) == 0 {
		return nil
	}
	_, err := u.Conn.Write(u.hold)
	if cap(u.hold) > 1<<20 {
		u.hold = nil
	} else {
		u.hold = u.hold[:0]
	}
	u.nhold.Store(0)
	return err
}

// Read reads what came, polling first once Spin was called.
func (u *UnderTLS) Read(p []byte) (int, error) {
	if u.r != nil {
		return u.r.Read(p)
	}
	return u.Conn.Read(p)
}

// explainTLS says what a TLS error means for a session. A record that failed
// its integrity check was altered (or corrupted) on the way. A certificate
// refused is the PKI's. pki says whether this side checks certificates.
func explainTLS(err error, pki bool) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("the connection was cut inside a TLS record: %w", err)
	}
	var op *net.OpError
	if !errors.As(err, &op) || (op.Op != "local error" && op.Op != "remote error") {
		var rh tls.RecordHeaderError
		if errors.As(err, &rh) {
			return fmt.Errorf("the peer does not speak TLS: %w", err)
		}
		var ce *tls.CertificateVerificationError
		if errors.As(err, &ce) {
			return fmt.Errorf("the peer's certificate does not verify against %s: %w", envTLSCA, err)
		}
		return err
	}
	text := op.Err.Error()
	side := "this side"
	if op.Op == "remote error" {
		side = "the other side"
	}
	switch {
	case strings.Contains(text, "bad record MAC"):
		return fmt.Errorf("a TLS record failed its integrity check at %s: the bytes were altered (or corrupted) on the way: %w", side, err)
	case strings.Contains(text, "certificate") || strings.Contains(text, "unknown certificate authority"):
		if pki {
			return fmt.Errorf("%s refused a certificate (expired, or not from the CA in %s): %w", side, envTLSCA, err)
		}
		return fmt.Errorf("%s refused a certificate: the peer checks certificates (%s, %s, %s set there) and this side has none of its CA: %w",
			side, envTLSCert, envTLSKey, envTLSCA, err)
	}
	return err
}
