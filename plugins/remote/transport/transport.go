// Package transport is the contract between the remote engine and what
// carries its frames. It holds the Transport interface and the optional
// capabilities the engine finds by type assertion (as database/sql/driver's).
// It holds a Stream's framing over any byte stream. And it says how every
// transport's reader waits (wait.go).
//
// A transport promises the interface's ordering and goroutine rules. The
// engine promises to call it from its link's one writer and one reader. The
// transports are packages of their own: stream (sockets, TCP and TLS), shm
// (shared-memory rings) and mpi (an MPI job's ranks).
package transport

import (
	"bufio"
	"io"
	"net"

	"github.com/goffload/offload/plugins/remote/proto"
)

// Transport carries one link's frames between two processes. They are ordered
// control frames, and bulk data in fragments. Fragments are written from, and
// read into, the transfer's own memory. The engine above it (link, device,
// session, peers) is the same whatever carries the frames.
//
// A link uses its transport from exactly two goroutines. Its writer calls the
// Write methods, and its reader the Read methods. Frames arrive in the order
// they were written, data fragments included.
type Transport interface {
	// WriteFrames writes encoded control frames (proto.AppendFrame), in
	// order; frames may be several, concatenated.
	WriteFrames(frames []byte) error
	// WriteData writes one fragment of bulk transfer id. That is the bytes at
	// offset off of the transfer, written straight from data.
	WriteData(id uint64, off int, data []byte) error
	// ReadMsg reads the next frame. A payload of at most proto.MaxInline
	// bytes comes in m.Payload, valid until the next ReadMsg. A larger one
	// must be read with ReadPayload, or skipped with Discard, before the next
	// ReadMsg.
	ReadMsg() (*proto.Msg, error)
	// ReadPayload reads m's payload into dst, which is m.PayloadLen bytes.
	ReadPayload(m *proto.Msg, dst []byte) error
	// Discard skips m's payload.
	Discard(m *proto.Msg) error
	// Close ends the transport: blocked reads and writes return errors.
	Close() error
}

// FragmentSizer is a Transport that asks for data fragments of another
// size than proto.Fragment.
type FragmentSizer interface {
	// FragmentSize is the largest data fragment the link should write.
	FragmentSize() int
}

// TryWriter is a Transport that can write frames without blocking. It writes
// as many bytes as the other side has room for now, possibly none. A link
// uses it to write from any goroutine, its reader included, without waking
// its writer. A transport without it has every frame written by the link's
// writer.
type TryWriter interface {
	// TryWriteFrames writes a prefix of frames without waiting and returns
	// its length. What is left must be written after it, before anything
	// else.
	TryWriteFrames(frames []byte) (int, error)
}

// Holder is a TryWriter whose TryWriteFrames may take frames whole but hold
// back some of their bytes. An example is a TLS record that the socket had no
// room for all of. The link's writer writes them, with WriteFrames, before
// anything else.
type Holder interface {
	// Held reports whether the transport holds bytes back for the writer.
	Held() bool
}

// Buffered is a Transport that can tell whether its next ReadMsg returns
// without waiting: it read frames already. Only its reader calls it.
type Buffered interface {
	// Buffered reports whether bytes were read already that the next
	// ReadMsg reads first.
	Buffered() bool
}

// Kicker is a Transport whose reader, parked waiting for a frame, can be made
// to poll for its spin budget again. That is when a kernel of this process
// ended, and the other side's next frame is likely on its way.
type Kicker interface {
	// Kick wakes the reader if it parked, to poll again; it does not wait.
	Kick()
}

// Poller is a Transport whose waiting side can be polled by any goroutine. So
// a caller waiting for its answer reads it itself instead of waking the
// link's reader. (That is a shared-memory link: the engine's await.) Its
// reader waits between frames with AwaitReadable, holding nothing. One
// goroutine at a time reads, as for every transport.
type Poller interface {
	Kicker
	// Readable reports whether a read would return without waiting: data
	// came, or the link ended.
	Readable() bool
	// SetPolled says whether a goroutine of this side polls for frames. While
	// one does, the other side rings no doorbell for the parked reader.
	// Whoever clears it reads what came meanwhile, or leaves it to a reader
	// that is not parked.
	SetPolled(on bool)
	// SetPollOnly makes reads poll instead of parking while they wait for the
	// rest of a frame. A polling caller sets it when it reads while the
	// link's reader may be parked.
	SetPollOnly(on bool)
	// AwaitReadable waits as a read waits until the link is readable,
	// without reading. While quiet reports true it parks at once rather
	// than poll beside another poller. A Kick makes it return even if
	// nothing came.
	AwaitReadable(quiet func() bool)
}

// Stream is a Transport over a byte stream (a socket, a shared-memory ring
// pair, a TLS session). Frames are length-prefixed. A data fragment is its
// header and payload in one write. Transports of byte streams embed it and
// add the capabilities their stream has.
type Stream struct {
	conn io.ReadWriteCloser
	*proto.Reader
	br  *bufio.Reader // under Reader
	hdr []byte
}

// NewStream frames conn, reading it through r. If r is nil, it reads conn
// itself. (r is a reader that waits in its own way, such as SpinReader's.)
// The read buffer is small. So the payload of a large fragment is read
// straight into place rather than through it.
func NewStream(conn io.ReadWriteCloser, r io.Reader) *Stream {
	if r == nil {
		r = conn
	}
	br := bufio.NewReaderSize(r, 16<<10)
	return &Stream{conn: conn, br: br, Reader: proto.NewReader(br)}
}

// Buffered reports whether bytes were read already that the next ReadMsg
// reads first.
func (t *Stream) Buffered() bool { return t.br.Buffered() > 0 }

// WriteFrames writes frames to the stream.
func (t *Stream) WriteFrames(frames []byte) error {
	_, err := t.conn.Write(frames)
	return err
}

// WriteData writes a fragment's header and data in one writev.
func (t *Stream) WriteData(id uint64, off int, data []byte) error {
	t.hdr = AppendDataHeader(t.hdr[:0], id, off, len(data))
	bufs := net.Buffers{t.hdr, data}
	_, err := bufs.WriteTo(t.conn)
	return err
}

// Close closes the stream.
func (t *Stream) Close() error { return t.conn.Close() }

// AppendDataHeader appends the stream framing of a data fragment of n bytes
// at offset off of transfer id, up to its payload.
func AppendDataHeader(b []byte, id uint64, off, n int) []byte {
	m := proto.Msg{Type: proto.TData, ID: id, Ptr: uint64(off)}
	l := proto.FrameLen(&m, n)
	b = append(b, byte(l), byte(l>>8), byte(l>>16), byte(l>>24))
	return proto.AppendHeader(b, &m, n)
}
