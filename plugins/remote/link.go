package remote

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/goffload/offload/internal/plugin"
	"github.com/goffload/offload/plugins/remote/proto"
)

// link is one framed connection. Frames are written by the goroutine that
// sends them, under a lock; a bulk transfer takes the lock once per fragment,
// so a small frame waits for at most one fragment, never for a whole
// transfer. Reading is left to the owner's read loop.
type link struct {
	conn net.Conn
	r    *proto.Reader

	wmu  sync.Mutex
	wbuf []byte

	once   sync.Once
	closed chan struct{}
	err    error // why the link failed; set before closed is closed
}

// newLink frames conn. Its reader spins briefly before parking (spin.go);
// the buffer is small, so that the payload of a large fragment is read
// straight into place rather than through it.
func newLink(conn net.Conn) *link {
	return &link{conn: conn, r: proto.NewReader(bufio.NewReaderSize(spinning(conn), 16<<10)), closed: make(chan struct{})}
}

// send writes one frame with its payload.
func (l *link) send(m *proto.Msg, payload []byte) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.failed(); err != nil {
		return err
	}
	l.wbuf = proto.AppendFrame(l.wbuf[:0], m, payload)
	if _, err := l.conn.Write(l.wbuf); err != nil {
		return l.fail(fmt.Errorf("write: %w", err))
	}
	return nil
}

// write writes encoded frames.
func (l *link) write(frames []byte) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.failed(); err != nil {
		return err
	}
	if _, err := l.conn.Write(frames); err != nil {
		return l.fail(fmt.Errorf("write: %w", err))
	}
	return nil
}

// sendData streams data as TData fragments of transfer id, each written
// straight from data (header and fragment in one writev).
func (l *link) sendData(id uint64, data []byte) error {
	for off := 0; off < len(data); off += proto.Fragment {
		if err := l.sendFragment(id, off, data[off:min(off+proto.Fragment, len(data))]); err != nil {
			return err
		}
	}
	return nil
}

func (l *link) sendFragment(id uint64, off int, frag []byte) error {
	m := proto.Msg{Type: proto.TData, ID: id, Ptr: uint64(off)}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if err := l.failed(); err != nil {
		return err
	}
	hdr := proto.AppendHeader(appendLen(l.wbuf[:0], proto.FrameLen(&m, len(frag))), &m, len(frag))
	l.wbuf = hdr
	bufs := net.Buffers{hdr, frag}
	if _, err := bufs.WriteTo(l.conn); err != nil {
		return l.fail(fmt.Errorf("write: %w", err))
	}
	return nil
}

// incoming is a transfer arriving in fragments straight into dst: a pulled
// submit (device side), a retrieve (host side), an exchange (peer side).
type incoming struct {
	dst  []byte
	got  int
	done chan struct{} // closed when complete, if the receiver waits on it
	err  error         // the data is refused (peer exchanges)
}

// take reads fragment m into place. Fragments must come in order and stay
// inside the transfer; it reports whether the transfer is complete.
func (in *incoming) take(r *proto.Reader, m *proto.Msg) (complete bool, err error) {
	if m.Ptr != uint64(in.got) || m.Ptr+uint64(m.PayloadLen) > uint64(len(in.dst)) {
		return false, fmt.Errorf("%w: fragment [%d, +%d) of a %d-byte transfer at %d", proto.ErrFrame, m.Ptr, m.PayloadLen, len(in.dst), in.got)
	}
	dst := in.dst[m.Ptr : m.Ptr+uint64(m.PayloadLen)]
	if m.Payload != nil {
		copy(dst, m.Payload)
	} else if err := r.ReadPayload(m, dst); err != nil {
		return false, err
	}
	in.got += m.PayloadLen
	return in.got == len(in.dst), nil
}

// receive reads fragment m of its transfer, one of pending (guarded by mu),
// straight into place. It returns the transfer once it is complete, and
// removes it from pending; nil before.
func receive(mu *sync.Mutex, pending map[uint64]*incoming, r *proto.Reader, m *proto.Msg) (*incoming, error) {
	mu.Lock()
	in := pending[m.ID]
	mu.Unlock()
	if in == nil {
		return nil, fmt.Errorf("%w: data for unknown transfer %d", proto.ErrFrame, m.ID)
	}
	complete, err := in.take(r, m)
	if !complete || err != nil {
		return nil, err
	}
	take(mu, pending, m.ID)
	return in, nil
}

// take removes and returns m[id], under mu.
func take[V any](mu *sync.Mutex, m map[uint64]V, id uint64) (V, bool) {
	mu.Lock()
	defer mu.Unlock()
	v, ok := m[id]
	delete(m, id)
	return v, ok
}

func appendLen(b []byte, n int) []byte {
	return append(b, byte(n), byte(n>>8), byte(n>>16), byte(n>>24))
}

// fail marks the link broken with cause (the first cause wins), closes the
// connection and returns the link's error.
func (l *link) fail(cause error) error {
	l.once.Do(func() {
		l.err = cause
		close(l.closed)
		l.conn.Close()
	})
	return l.failed()
}

// failed returns the link's error once it has failed, else nil.
func (l *link) failed() error {
	select {
	case <-l.closed:
		return l.err
	default:
		return nil
	}
}

// isClosedErr reports whether err is the normal end of a connection.
func isClosedErr(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}

// Error codes carry plugin errors across the wire so errors.Is works on the
// other side.
var codes = []error{
	nil,
	plugin.ErrKernel,
	plugin.ErrBadPointer,
	plugin.ErrBadKernel,
	plugin.ErrOutOfMemory,
	plugin.ErrBadHandle,
	plugin.ErrUnsupported,
	plugin.ErrNotRecorded,
	plugin.ErrDeviceLost,
	proto.ErrFrame,
	ErrMismatch,
	ErrAuth,
}

const codeOther = 255

func errCode(err error) uint8 {
	if err == nil {
		return 0
	}
	for i, c := range codes {
		if c != nil && errors.Is(err, c) {
			return uint8(i)
		}
	}
	return codeOther
}

// wireError is an error that came from the other side of a link.
type wireError struct {
	text  string
	cause error
}

func (e *wireError) Error() string { return e.text }
func (e *wireError) Unwrap() error { return e.cause }

func decodeErr(code uint8, text string) error {
	if code == 0 {
		return nil
	}
	var cause error
	if int(code) < len(codes) {
		cause = codes[code]
	}
	return &wireError{text: text, cause: cause}
}

// withErr fills m's code and text from err.
func withErr(m *proto.Msg, err error) *proto.Msg {
	if err != nil {
		m.Code = errCode(err)
		m.Text = err.Error()
		if len(m.Text) > proto.MaxText {
			m.Text = m.Text[:proto.MaxText]
		}
	}
	return m
}
