package remote

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
	"os"
	"syscall"

	"github.com/goffload/offload/plugins/remote/proto"
)

// Transport carries one link's frames between two processes: ordered
// control frames, and bulk data in fragments that are written from, and
// read into, the transfer's own memory. The engine above it (link, device,
// session, peers) is the same whatever carries the frames: the socket
// transport here, MPI in its own.
//
// A transport may ask for data fragments of another size than
// proto.Fragment with a method FragmentSize() int.
//
// A link uses its transport from exactly two goroutines: its writer calls
// the Write methods, its reader the Read methods. Frames arrive in the order
// they were written, data fragments included.
type Transport interface {
	// WriteFrames writes encoded control frames (proto.AppendFrame), in
	// order; frames may be several, concatenated.
	WriteFrames(frames []byte) error
	// WriteData writes one fragment of bulk transfer id: the bytes at
	// offset off of the transfer, written straight from data.
	WriteData(id uint64, off int, data []byte) error
	// ReadMsg reads the next frame. A payload of at most proto.MaxInline
	// bytes comes in m.Payload (valid until the next ReadMsg); a larger one
	// must be read with ReadPayload, or skipped with Discard, before the
	// next ReadMsg.
	ReadMsg() (*proto.Msg, error)
	// ReadPayload reads m's payload into dst, which is m.PayloadLen bytes.
	ReadPayload(m *proto.Msg, dst []byte) error
	// Discard skips m's payload.
	Discard(m *proto.Msg) error
	// Close ends the transport: blocked reads and writes return errors.
	Close() error
}

// streamTransport is a Transport over a byte stream (a Unix or TCP socket):
// frames are length-prefixed, and a data fragment is its header and payload
// in one writev.
type streamTransport struct {
	conn io.ReadWriteCloser
	raw  syscall.RawConn // conn's descriptor, for TryWriteFrames; nil if it has none
	shm  *shmConn        // conn, when it is a shared-memory link
	*proto.Reader
	br  *bufio.Reader // under Reader
	hdr []byte
}

// Buffered reports whether bytes were read already that the next ReadMsg
// reads first.
func (t *streamTransport) Buffered() bool { return t.br.Buffered() > 0 }

// tryWriter is a Transport that can write frames without blocking: as many
// bytes as the other side has room for now, possibly none. A link uses it
// to write from any goroutine, its reader included, without waking its
// writer (see link.sendSoon); a transport without it has every frame
// written by the link's writer.
type tryWriter interface {
	// TryWriteFrames writes a prefix of frames without waiting and returns
	// its length; what is left must be written after it, before anything
	// else.
	TryWriteFrames(frames []byte) (int, error)
}

// newStreamTransport frames conn. Its reader spins briefly before parking
// (spin.go); the buffer is small, so that the payload of a large fragment is
// read straight into place rather than through it.
func newStreamTransport(conn net.Conn) *streamTransport {
	br := bufio.NewReaderSize(spinning(conn), 16<<10)
	t := &streamTransport{conn: conn, br: br, Reader: proto.NewReader(br)}
	if sc, ok := conn.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			t.raw = raw
		}
	}
	return t
}

// newShmTransport frames a shared-memory link, which waits in its own way.
func newShmTransport(c *shmConn) *streamTransport {
	br := bufio.NewReaderSize(c, 16<<10)
	return &streamTransport{conn: c, shm: c, br: br, Reader: proto.NewReader(br)}
}

// TryWriteFrames makes one non-blocking write(2) of frames.
func (t *streamTransport) TryWriteFrames(frames []byte) (int, error) {
	if t.shm != nil {
		return t.shm.TryWriteFrames(frames)
	}
	if t.raw == nil {
		return 0, nil
	}
	return tryWrite(t.raw, frames)
}

// tryWrite makes one non-blocking write(2) of b on raw's descriptor and
// returns how much it wrote.
func tryWrite(raw syscall.RawConn, frames []byte) (int, error) {
	var n int
	var werr error
	err := raw.Write(func(fd uintptr) bool {
		for {
			n, werr = syscall.Write(int(fd), frames)
			if werr != syscall.EINTR {
				return true // done, or full: never park here
			}
		}
	})
	switch {
	case err != nil:
		return 0, err
	case werr == syscall.EAGAIN:
		return 0, nil
	case werr != nil:
		return 0, os.NewSyscallError("write", werr)
	}
	return max(n, 0), nil
}

func (t *streamTransport) WriteFrames(frames []byte) error {
	_, err := t.conn.Write(frames)
	return err
}

func (t *streamTransport) WriteData(id uint64, off int, data []byte) error {
	m := proto.Msg{Type: proto.TData, ID: id, Ptr: uint64(off)}
	t.hdr = proto.AppendHeader(appendLen(t.hdr[:0], proto.FrameLen(&m, len(data))), &m, len(data))
	bufs := net.Buffers{t.hdr, data}
	_, err := bufs.WriteTo(t.conn)
	return err
}

func (t *streamTransport) Close() error { return t.conn.Close() }

func appendLen(b []byte, n int) []byte {
	return append(b, byte(n), byte(n>>8), byte(n>>16), byte(n>>24))
}

// tlsTransport is a Transport over a TLS session (a tcp:// link): frames
// as streamTransport's, written through a buffer of one TLS record so that
// small frames and a fragment's header share records with what follows
// them rather than each costing one (and a write). It writes without
// blocking (TryWriteFrames) as a plain socket does, but a record is
// encrypted whole: what of it the socket has no room for is held back
// (underTLS) and written by the link's writer before anything else.
type tlsTransport struct {
	s   *streamTransport
	bw  *bufio.Writer
	raw *underTLS // under the TLS session
	tc  *tls.Conn
}

// tlsRecord is the largest plaintext of a TLS record.
const tlsRecord = 16 << 10

// newTLSTransport frames the TLS session tc. Its reads poll before they
// park beneath the TLS layer (underTLS), as a plain link's do.
func newTLSTransport(tc *tls.Conn) *tlsTransport {
	u := tc.NetConn().(*underTLS)
	return &tlsTransport{s: newStreamTransport(tc), bw: bufio.NewWriterSize(tc, tlsRecord), raw: u, tc: tc}
}

func (t *tlsTransport) WriteFrames(frames []byte) error {
	if err := t.raw.writeHeld(); err != nil {
		return explainTLS(err, false)
	}
	t.bw.Write(frames) // an error stays in bw, which Flush returns
	return explainTLS(t.bw.Flush(), false)
}

// TryWriteFrames encrypts frames into one record (or more) and writes what
// the socket has room for now; the rest is held back for the writer. If
// bytes are held back already, it writes nothing.
func (t *tlsTransport) TryWriteFrames(frames []byte) (int, error) {
	if t.raw.raw == nil || t.held() {
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

func (t *tlsTransport) held() bool { return t.raw.held() }

func (t *tlsTransport) WriteData(id uint64, off int, data []byte) error {
	if err := t.raw.writeHeld(); err != nil {
		return explainTLS(err, false)
	}
	m := proto.Msg{Type: proto.TData, ID: id, Ptr: uint64(off)}
	t.s.hdr = proto.AppendHeader(appendLen(t.s.hdr[:0], proto.FrameLen(&m, len(data))), &m, len(data))
	t.bw.Write(t.s.hdr)
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

// Close closes the connection under the session without a close_notify
// alert, which could wait for room to write it: the protocol's own frames
// end a session, and a cut one is an error either way.
func (t *tlsTransport) Close() error { return t.raw.Close() }
