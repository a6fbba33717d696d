package engine

// The device side of copies: submits (inline, pulled, pushed), retrieves,
// and the host's acknowledgements of retrieves that tells to peers wait for.

import (
	"fmt"
	"sync"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/remote/proto"
	"github.com/goffload/offload/plugins/remote/state"
)

// tell sends peers the word that state.Session says is due. It never
// blocks.
func (s *Session) tell(now []state.Tell) {
	for _, t := range now {
		s.peers.tell(t.Peer, t.Wait, t.Err)
	}
}

// ack counts an acknowledgement from the host and sends the tells that
// waited for it, on the reader (peers.tell never blocks): no goroutine to
// wake.
func (s *Session) ack() {
	s.emu.Lock()
	now := s.evs.Acked()
	s.emu.Unlock()
	s.tell(now)
}

// submitInline copies a submit's data, carried in its frame.
func (s *Session) submitInline(f *proto.Submit) error {
	q, dst, size := s.queue(f.Queue), plugin.Ptr(f.Dst), int64(len(f.Data))
	timed := s.timer(f.Queue, plugin.OpSubmit, 0, size)
	copyFrom := func(data []byte) func() error {
		return func() error {
			b, err := s.mem.Bytes(dst, size)
			if err != nil {
				return err
			}
			copy(b, data)
			return nil
		}
	}
	// On an idle queue the reader copies the payload straight into
	// device memory.
	if ran, err := q.RunHere(copyFrom(f.Data), timed); ran || err != nil {
		return nil
	}
	// Otherwise the data waits for its turn in a buffer of the pool: a
	// fresh allocation each time costs page faults once the heap is
	// large.
	buf := inlineBufs.Get().(*[]byte)
	data := append((*buf)[:0], f.Data...)
	run := copyFrom(data)
	return q.DoTimed(func() error {
		defer inlineBufs.Put(buf) // not if the copy is skipped: the buffer is garbage then
		return run()
	}, timed)
}

// submitPulled asks for a submit's data when its queue reaches it, and
// reads it straight into device memory.
func (s *Session) submitPulled(f *proto.SubmitPulled) error {
	q, qid, id, dst, size := s.queue(f.Queue), f.Queue, f.Xfer, plugin.Ptr(f.Dst), int64(f.Size)
	timed := s.timer(f.Queue, plugin.OpSubmit, 0, size)
	return q.DoTimed(func() error {
		b, err := s.mem.Bytes(dst, size)
		if err != nil {
			return err
		}
		p := &incoming{dst: b, size: len(b), done: make(chan struct{})}
		s.mu.Lock()
		s.pulls[id] = p
		s.mu.Unlock()
		if err := s.l.sendNow(&proto.Pull{Queue: qid, Xfer: id}); err != nil { // a queue's goroutine
			return err
		}
		return p.wait()
	}, timed)
}

// submitPushed takes a submit whose data follows at once: the reader reads
// it straight into device memory as it comes (the host sends it so only
// when the queue has nothing before it), and the queue's operation ends
// when all of it is in. A submit to memory that is not the device's is
// skipped on arrival and fails in the queue.
func (s *Session) submitPushed(f *proto.SubmitPushed) error {
	q, dst, size := s.queue(f.Queue), plugin.Ptr(f.Dst), int64(f.Size)
	timed := s.timer(f.Queue, plugin.OpSubmit, 0, size)
	p := &incoming{size: int(size), done: make(chan struct{})}
	p.dst, p.err = s.mem.Bytes(dst, size)
	s.mu.Lock()
	if s.pulls[f.Xfer] != nil {
		s.mu.Unlock()
		return fmt.Errorf("%w: submit reuses transfer %d", proto.ErrFrame, f.Xfer)
	}
	s.pulls[f.Xfer] = p
	s.mu.Unlock()
	if size == 0 { // no data comes
		take(&s.mu, s.pulls, f.Xfer)
		close(p.done)
	}
	return q.DoTimed(p.wait, timed)
}

// retrieve sends size bytes at src as transfer id, numbered among the
// counted transfers (the order the host acknowledges them in): in one
// frame written at once if now (link.sendDataSoon), else streamed by the
// writer.
func (s *Session) retrieve(id uint64, src plugin.Ptr, size int64, now bool) error {
	b, err := s.mem.Bytes(src, size)
	if err != nil {
		return err
	}
	var seq uint64
	if now {
		seq, err = s.l.sendDataSoon(id, b)
	} else {
		seq, err = s.l.sendData(id, b, true)
	}
	if err != nil {
		return err
	}
	s.emu.Lock()
	s.evs.Sent(seq)
	s.emu.Unlock()
	return nil
}

// inlineBufs holds the buffers inline submits wait in, proto.MaxInline
// bytes each.
var inlineBufs = sync.Pool{New: func() any { b := make([]byte, proto.MaxInline); return &b }}

// data reads a fragment of a pulled submit straight into device memory.
func (s *Session) data(m *proto.Msg) error {
	in, err := receive(&s.mu, s.pulls, s.l, m)
	if in != nil {
		close(in.done)
	}
	return err
}
