package engine

// The reading side of a link: its reader's frames, the answers it holds
// back while a batch lasts, and transfers arriving in fragments.

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/remote/proto"
)

// linkReader reads a link's frames for its one reader goroutine. Pings are
// counted as signs of life and skipped.
type linkReader struct{ l *link }

// ReadMsg reads the next frame that is not a ping. The transport may hold
// more frames read already. Meanwhile what sendSoon is asked to write waits
// for the reader to reach the end of them. Then it goes out in one write (see
// hold). So a batch of launches is answered by a batch of completions.
func (r linkReader) ReadMsg() (*proto.Msg, error) {
	b := r.l.br
	for {
		if b == nil || !b.Buffered() {
			r.l.release()
		}
		m, err := r.l.t.ReadMsg()
		if err != nil {
			return nil, err
		}
		r.l.reads.Add(1)
		if b != nil && b.Buffered() {
			r.l.hold()
		}
		if m.Type != proto.TPing {
			return m, nil
		}
	}
}

// hold makes sendSoon leave what it is asked to write queued, until release.
// The link's reader calls it while it has more frames to handle.
func (l *link) hold() {
	l.mu.Lock()
	l.holding = true
	l.mu.Unlock()
}

// release ends hold and writes what it held back, as sendSoon does. The
// link's reader calls it before it may wait for frames.
func (l *link) release() {
	l.mu.Lock()
	if !l.holding {
		l.mu.Unlock()
		return
	}
	l.holding = false
	l.mu.Unlock()
	l.sendSoon(nil)
}

// ReadPayload reads m's payload into dst.
func (r linkReader) ReadPayload(m *proto.Msg, dst []byte) error { return r.l.t.ReadPayload(m, dst) }

// incoming is a transfer arriving in fragments straight into dst. It is a
// pulled submit (device side), a retrieve (host side), or an exchange (peer
// side).
type incoming struct {
	dst  []byte
	size int // bytes expected: len(dst), or the size of a refused transfer
	got  int
	done chan struct{} // closed when complete, if the receiver waits on it
	err  error         // the data is refused and skipped (peer exchanges)
	at   plugin.Ptr    // where a peer's exchange goes (on a served device)
	// prog, if set, hears of each fragment as it is in; a served device's
	// submit passes each part on as it comes. avail says how many bytes are
	// in.
	prog  chan struct{}
	avail atomic.Int64
}

// take reads fragment m into place, or skips it for a refused transfer.
// Fragments must come in order and stay inside the transfer. It reports
// whether the transfer is complete.
func (in *incoming) take(l *link, m *proto.Msg) (complete bool, err error) {
	if m.Ptr != uint64(in.got) || m.Ptr+uint64(m.PayloadLen) > uint64(in.size) {
		return false, fmt.Errorf("%w: fragment [%d, +%d) of a %d-byte transfer at %d", proto.ErrFrame, m.Ptr, m.PayloadLen, in.size, in.got)
	}
	switch {
	case in.err != nil:
		if m.Payload == nil {
			if err := l.t.Discard(m); err != nil {
				return false, err
			}
		}
	case m.Payload != nil:
		copy(in.dst[m.Ptr:], m.Payload)
	default:
		if err := l.t.ReadPayload(m, in.dst[m.Ptr:m.Ptr+uint64(m.PayloadLen)]); err != nil {
			return false, err
		}
	}
	in.got += m.PayloadLen
	if in.prog != nil {
		in.avail.Store(int64(in.got))
		select {
		case in.prog <- struct{}{}:
		default:
		}
	}
	return in.got == in.size, nil
}

// receive reads fragment m of its transfer, one of pending (guarded by mu),
// straight into place. Once the transfer is complete, it returns it and
// removes it from pending. Before, it returns nil.
func receive(mu *sync.Mutex, pending map[uint64]*incoming, l *link, m *proto.Msg) (*incoming, error) {
	mu.Lock()
	in := pending[m.ID]
	mu.Unlock()
	if in == nil {
		return nil, fmt.Errorf("%w: data for unknown transfer %d", proto.ErrFrame, m.ID)
	}
	complete, err := in.take(l, m)
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
