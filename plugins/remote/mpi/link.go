//go:build mpi

package mpi

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	cmpi "github.com/goffload/offload/internal/mpi"
	"github.com/goffload/offload/plugins/remote/proto"
)

// Link is a transport.Transport between this rank and another: see
// the package doc for the layout.
type Link struct {
	w          *World
	rank       int
	ctrl, data int // tags
	closed     chan struct{}
	once       sync.Once

	mu     sync.Mutex
	inbox  []*cmpi.Req // control messages, in the order MPI matched them
	queued atomic.Int64
	more   chan struct{}

	smu  sync.Mutex
	soon []*cmpi.Req // sends of TryWriteFrames under way

	cur     []byte // the reader's: the rest of the message being read
	scratch []byte // the reader's: discarded payloads
	hdr     []byte // the writer's
}

func (t *Link) push(r *cmpi.Req) {
	t.mu.Lock()
	t.inbox = append(t.inbox, r)
	t.queued.Add(1)
	t.mu.Unlock()
	select {
	case t.more <- struct{}{}:
	default:
	}
}

// next waits for the next control message. It does not poll MPI itself while
// it waits. The progress goroutine does, and hands it each message. (This was
// tried, with the reader taking the engine's poller role as Req.Wait does. A
// synchronous launch took 20–30 µs instead of 14, with three to four times
// the context switches. Some machines have fewer cores than processes that
// want to spin. There the poller that must give way is the one that just got
// its message. The progress goroutine's naps then preempt it.)
func (t *Link) next() ([]byte, error) {
	for {
		if t.queued.Load() > 0 {
			t.mu.Lock()
			r := t.inbox[0]
			t.inbox[0] = nil
			t.inbox = t.inbox[1:]
			t.queued.Add(-1)
			t.mu.Unlock()
			if err := r.Wait(t.closed); err != nil {
				return nil, t.wrap(err)
			}
			return r.Buf, nil
		}
		select {
		case <-t.more:
		case <-t.closed:
			return nil, net.ErrClosed
		}
	}
}

func (t *Link) wrap(err error) error {
	if errors.Is(err, cmpi.ErrAborted) {
		return net.ErrClosed
	}
	if err != nil {
		return fmt.Errorf("MPI rank %d: %w", t.rank, err)
	}
	return nil
}

// Buffered reports whether the next ReadMsg returns without waiting. It does
// if the rest of a message is left, or another has come.
func (t *Link) Buffered() bool { return len(t.cur) > 0 || t.queued.Load() > 0 }

// ReadMsg reads the next frame (transport.Transport).
func (t *Link) ReadMsg() (*proto.Msg, error) {
	for len(t.cur) == 0 {
		b, err := t.next()
		if err != nil {
			return nil, err
		}
		t.cur = b
	}
	m, n, err := parseFrame(t.cur)
	if err != nil {
		t.cur = nil
		return nil, err
	}
	t.cur = t.cur[n:]
	return m, nil
}

// ReadPayload reads m's payload into dst. It reads it from its control
// message, or from the data message that follows a large fragment's header.
func (t *Link) ReadPayload(m *proto.Msg, dst []byte) error {
	if len(dst) != m.PayloadLen {
		return fmt.Errorf("%w: payload of %d bytes into %d", proto.ErrFrame, m.PayloadLen, len(dst))
	}
	if !outOfBand(m) {
		copy(dst, m.Payload)
		return nil
	}
	return t.wrap(t.w.e.Recv(t.rank, t.data, dst).Wait(t.closed))
}

// Discard skips m's payload.
func (t *Link) Discard(m *proto.Msg) error {
	if !outOfBand(m) {
		return nil
	}
	if cap(t.scratch) < m.PayloadLen {
		t.scratch = make([]byte, m.PayloadLen)
	}
	return t.ReadPayload(m, t.scratch[:m.PayloadLen])
}

// WriteFrames sends frames as one control message and waits for the send.
func (t *Link) WriteFrames(frames []byte) error {
	if err := t.reap(); err != nil {
		return err
	}
	return t.wrap(t.w.e.Send(t.rank, t.ctrl, frames).Wait(t.closed))
}

// TryWriteFrames sends frames in one message if this goroutine can make the
// MPI call now (mpi.Engine.TrySend). It sends from a copy, as the link may
// reuse frames once it returns. The send completes later. It returns 0 if it
// cannot; the link's writer then sends them.
func (t *Link) TryWriteFrames(frames []byte) (int, error) {
	if err := t.reap(); err != nil {
		return 0, err
	}
	r := t.w.e.TrySend(t.rank, t.ctrl, bytes.Clone(frames))
	if r == nil {
		return 0, nil
	}
	if !r.Done() {
		t.smu.Lock()
		t.soon = append(t.soon, r)
		t.smu.Unlock()
		return len(frames), nil
	}
	return len(frames), t.wrap(r.Wait(nil))
}

// reap forgets the sends of TryWriteFrames that completed. It returns the
// first error among them.
func (t *Link) reap() error {
	t.smu.Lock()
	defer t.smu.Unlock()
	var err error
	k := 0
	for _, r := range t.soon {
		if !r.Done() {
			t.soon[k] = r
			k++
		} else if rerr := r.Wait(nil); err == nil && rerr != nil {
			err = t.wrap(rerr)
		}
	}
	clear(t.soon[k:])
	t.soon = t.soon[:k]
	return err
}

// WriteData sends a data fragment. It goes inline in a control message. Or
// its header goes there and its payload as a message on the data tag.
func (t *Link) WriteData(id uint64, off int, data []byte) error {
	var oob bool
	t.hdr, oob = appendData(t.hdr[:0], id, off, data)
	if !oob {
		return t.WriteFrames(t.hdr)
	}
	h := t.w.e.Send(t.rank, t.ctrl, t.hdr)
	d := t.w.e.Send(t.rank, t.data, data)
	err := h.Wait(t.closed)
	if derr := d.Wait(t.closed); err == nil {
		err = derr
	}
	return t.wrap(err)
}

// FragmentSize is the largest data fragment the link should write.
func (t *Link) FragmentSize() int { return fragment }

// Close ends the link: blocked reads and writes return errors.
func (t *Link) Close() error {
	t.once.Do(func() { close(t.closed) })
	return nil
}
