// Package engine is the remote device kind's protocol, the same whatever
// carries its frames. It holds the link (one writer, one reader goroutine)
// over a transport.Transport. It holds the host's side of a device (Device, a
// plugin.Device) and the device process's side (Session). It holds the peers
// that link device processes to each other, and the transfers between them.
// It uses a transport only through the interface and its optional
// capabilities, and never opens one. The kind (package remote) opens the
// transports and starts the processes. It sets the hooks Device and Session
// have for them. Frames are package proto's, and their order is package
// state's rules.
//
// Where things are: client.go and queue.go (with the waits for answers)
// are the host's side of a device. server.go, serverops.go and peer.go are
// the device process's; peer.go holds its copies and its sibling sessions
// too. served.go drives a device of another kind. link.go is the link.
// hello.go is the session's opening, the host's hello and the reader's
// role, and the heartbeat's timing. layout.go checks architectures at
// hello. tag.go times operations for traces. graph.go and graphserve.go
// are recorded graphs' parts and the signals between device processes.
package engine

import (
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/remote/proto"
	"github.com/goffload/offload/plugins/remote/transport"
)

// A link is one connection between two processes of the program (host and
// device, or two device peers), framed by a Transport. It has exactly one
// writer: a goroutine of its own that writes what the other goroutines queue.
// It writes in the order they queued it. So the order of frames is decided in
// one place, the queue. And no goroutine that reads the link ever writes to
// it. A reader that wrote could block behind a full socket while the other
// side's reader did the same: a deadlock. Control frames go out between the
// fragments of bulk transfers. So a small frame waits for one fragment at
// most, and several transfers interleave.
//
// Once the handshake is done, live starts the heartbeat. A link that has
// written nothing for a while sends a ping. The link fails when nothing at
// all came from the other side for the device timeout.
type link struct {
	t    transport.Transport
	frag int                 // the largest data fragment: proto.Fragment, or what t asks
	tw   transport.TryWriter // t, if it can write without blocking; else nil
	hw   transport.Holder    // t, if its tries may hold bytes back for the writer; else nil
	br   transport.Buffered  // t, if it can tell that it read frames ahead; else nil
	kr   transport.Kicker    // t, if its parked reader can be kicked; else nil
	r    linkReader          // reads frames, skipping pings: the reader's only way in

	mu      sync.Mutex
	wake    *sync.Cond
	ctrl    []byte      // control frames to write, in order
	bulk    []*outgoing // transfers being written, a fragment each in turn
	seq     uint64      // counted transfers written in full
	busy    bool        // a goroutine is writing: the writer, or a caller of flushNow
	holding bool        // sendSoon leaves its frames queued: the reader has more frames to handle (hold)
	ending  bool        // close: fail once everything queued is written
	err     error       // why the link failed; set before closed is closed
	closed  chan struct{}

	reads  atomic.Uint64     // frames read
	writes atomic.Uint64     // writes done
	queued [64]atomic.Uint64 // control frames queued to go out, by type
}

// outgoing is a bulk transfer on its way out.
type outgoing struct {
	id    uint64
	data  []byte
	off   int
	count bool                      // numbered among counted transfers when written in full
	done  func(seq uint64, e error) // called by the writer when it is written (or failed)
}

// startLink starts a link on t.
func startLink(t transport.Transport) *link {
	l := &link{t: t, closed: make(chan struct{}), frag: proto.Fragment}
	if f, ok := t.(transport.FragmentSizer); ok {
		l.frag = f.FragmentSize()
	}
	l.tw, _ = t.(transport.TryWriter)
	l.hw, _ = t.(transport.Holder)
	l.br, _ = t.(transport.Buffered)
	l.kr, _ = t.(transport.Kicker)
	l.r = linkReader{l}
	l.wake = sync.NewCond(&l.mu)
	go l.write()
	return l
}

// put queues f, without waking the writer. A queue's operations go out
// together when it records an event or sends a mark.
func (l *link) put(f proto.Frame) error {
	m := proto.Encode(f)
	return l.queue(m, m.Payload, false)
}

// send queues f and wakes the writer.
func (l *link) send(f proto.Frame) error {
	m := proto.Encode(f)
	return l.queue(m, m.Payload, true)
}

// queue appends m's frame to what the writer writes next. It wakes the writer
// if wake is set or the frames pile up.
func (l *link) queue(m *proto.Msg, payload []byte, wake bool) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return l.err
	}
	l.ctrl = proto.AppendFrame(l.ctrl, m, payload)
	l.queued[m.Type&63].Add(1)
	if wake || len(l.ctrl) >= 1<<20 {
		l.wake.Signal()
	}
	return nil
}

// flush wakes the writer for what put queued.
func (l *link) flush() {
	l.mu.Lock()
	l.wake.Signal()
	l.mu.Unlock()
}

// flushNow writes what is queued from the calling goroutine if no one is
// writing and no bulk transfer is under way. Otherwise it wakes the writer.
// (Waking the writer goroutine costs a hand-off that a small round trip
// feels.) Only goroutines that never read a link may call it. They must not
// hold a lock that a reader takes: the write may wait for the other side to
// read.
func (l *link) flushNow() {
	l.mu.Lock()
	if l.busy || len(l.bulk) > 0 || l.err != nil || len(l.ctrl) == 0 {
		l.wake.Signal()
		l.mu.Unlock()
		return
	}
	l.writeHere(false)
}

// writeHere writes the queued control frames on the calling goroutine. It
// writes all of them (flushNow), or without blocking as much as the other
// side has room for (try, sendSoon). The rest goes first by the writer. l.mu
// is held, no one writes and no bulk transfer is under way. writeHere unlocks
// it.
func (l *link) writeHere(try bool) {
	l.busy = true
	frames := l.ctrl
	l.ctrl = nil
	l.mu.Unlock()
	var n int
	var err error
	if try {
		n, err = l.tw.TryWriteFrames(frames)
	} else {
		n, err = len(frames), l.t.WriteFrames(frames)
	}
	if n > 0 {
		l.writes.Add(1)
	}
	l.mu.Lock()
	l.busy = false
	if n < len(frames) {
		l.ctrl = append(frames[n:len(frames):len(frames)], l.ctrl...)
		l.wake.Signal()
	} else {
		if len(l.ctrl) == 0 && cap(frames) <= 1<<20 {
			l.ctrl = frames[:0] // reuse the buffer
		}
		l.wakeIfWork() // what came meanwhile, or what the try held back
	}
	l.mu.Unlock()
	if err != nil {
		l.fail(fmt.Errorf("write: %w", err))
	}
}

// sendSoon queues f (nothing if f is nil). It writes what is queued at once,
// without blocking, if no one is writing and no bulk transfer is under way.
// Some is left to the writer: what the other side has no room for yet.
// Everything is, when the transport cannot write without blocking. Any
// goroutine may call it, a reader of the link included; it never waits for
// the other side. It may be called under any lock. It is how an answer goes
// out with no hand-off to the writer.
func (l *link) sendSoon(f proto.Frame) error {
	var m *proto.Msg
	if f != nil {
		m = proto.Encode(f)
	}
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return l.err
	}
	if m != nil {
		l.ctrl = proto.AppendFrame(l.ctrl, m, m.Payload)
		l.queued[m.Type&63].Add(1)
	}
	if l.holding {
		l.mu.Unlock()
		return nil // the reader writes it, with what follows (release)
	}
	if l.tw == nil || l.busy || len(l.bulk) > 0 || len(l.ctrl) == 0 {
		l.wake.Signal()
		l.mu.Unlock()
		return nil
	}
	l.writeHere(true)
	return nil
}

// wakeIfWork wakes the writer if it has something to do now that a caller of
// flushNow or sendSoon is done writing. (While one writes, the writer waits.)
// The work is what was queued meanwhile, or the end of the link. A writer
// woken for nothing costs a hand-off. Under l.mu.
func (l *link) wakeIfWork() {
	if len(l.ctrl) > 0 || len(l.bulk) > 0 || l.ending || l.held() {
		l.wake.Signal()
	}
}

// held reports whether the transport holds bytes back for the writer.
func (l *link) held() bool { return l.hw != nil && l.hw.Held() }

// kick makes the link's reader, if it parked waiting for a frame, poll for
// its spin budget again. It works on a transport.Kicker (a shared-memory
// link). On others it is a no-op.
func (l *link) kick() {
	if l.kr != nil {
		l.kr.Kick()
	}
}

// canTryWrite reports whether the link's transport can write without
// blocking, as sendSoon and sendDataSoon do when they can.
func (l *link) canTryWrite() bool { return l.tw != nil }

// sendDataSoon sends data (at most proto.MaxInline bytes) as the one fragment
// of transfer id, inside a control frame. It sends it as sendSoon sends a
// frame. It numbers it among counted transfers in the order it goes out (see
// stream). It is only for a link that canTryWrite. Elsewhere the data may not
// travel in a control frame.
func (l *link) sendDataSoon(id uint64, data []byte) (seq uint64, err error) {
	if len(data) > proto.MaxInline {
		return 0, fmt.Errorf("%w: %d bytes of data in a control frame", proto.ErrFrame, len(data))
	}
	l.mu.Lock()
	if l.err != nil {
		l.mu.Unlock()
		return 0, l.err
	}
	// Numbered now: it is written after every transfer numbered before it,
	// and before any numbered after. (Those are written, or their last
	// fragment is being written, and the writer writes control frames first.)
	l.seq++
	seq = l.seq
	l.ctrl = proto.AppendFrame(l.ctrl, proto.Encode(&proto.Data{Xfer: id}), data)
	l.queued[proto.TData].Add(1)
	l.mu.Unlock()
	return seq, l.sendSoon(nil)
}

// sendNow queues f and writes it at once as flushNow does.
func (l *link) sendNow(f proto.Frame) error {
	if err := l.put(f); err != nil {
		return err
	}
	l.flushNow()
	return nil
}

// stream queues data as fragments of transfer id, written straight from data.
// data must stay untouched until done is called. done runs on the writer's
// goroutine and must not block. seq numbers the counted transfers in the
// order they were written in full. It is 0 if not counted, or failed.
func (l *link) stream(id uint64, data []byte, count bool, done func(seq uint64, err error)) {
	if len(data) == 0 {
		done(0, l.failed())
		return
	}
	l.mu.Lock()
	if err := l.err; err != nil {
		l.mu.Unlock()
		done(0, err)
		return
	}
	l.bulk = append(l.bulk, &outgoing{id: id, data: data, count: count, done: done})
	l.wake.Signal()
	l.mu.Unlock()
}

// sendData streams data as transfer id and waits until it is written. seq
// numbers it among counted transfers if count is set.
func (l *link) sendData(id uint64, data []byte, count bool) (uint64, error) {
	type result struct {
		seq uint64
		err error
	}
	ch := make(chan result, 1)
	l.stream(id, data, count, func(seq uint64, err error) { ch <- result{seq, err} })
	r := <-ch
	return r.seq, r.err
}

// write is the writer. It writes the queued control frames and one fragment
// of the next transfer in turn, until the link fails.
func (l *link) write() {
	var frames []byte
	for {
		l.mu.Lock()
		for (l.busy || len(l.ctrl) == 0 && len(l.bulk) == 0 && !l.ending && !l.held()) && l.err == nil {
			l.wake.Wait()
		}
		if l.err != nil {
			l.mu.Unlock()
			return
		}
		if len(l.ctrl) == 0 && len(l.bulk) == 0 && !l.held() { // ending, all written
			l.mu.Unlock()
			l.fail(errLinkClosed)
			return
		}
		if cap(frames) > 1<<20 {
			frames = nil
		}
		frames, l.ctrl = l.ctrl, frames[:0]
		l.busy = true
		var o *outgoing
		var off int
		var frag []byte
		var seq uint64
		last := false
		if len(l.bulk) > 0 {
			o = l.bulk[0]
			copy(l.bulk, l.bulk[1:])
			l.bulk[len(l.bulk)-1] = nil
			l.bulk = l.bulk[:len(l.bulk)-1]
			off = o.off
			frag = o.data[off:min(off+l.frag, len(o.data))]
			o.off += len(frag)
			if last = o.off == len(o.data); !last {
				l.bulk = append(l.bulk, o) // the others' turn: transfers interleave
			} else if o.count {
				l.seq++
				seq = l.seq
			}
		}
		l.mu.Unlock()
		var err error
		if len(frames) > 0 || l.held() {
			err = l.t.WriteFrames(frames) // what a try held back goes first
		}
		if err == nil && o != nil {
			err = l.t.WriteData(o.id, off, frag)
		}
		l.writes.Add(1)
		l.mu.Lock()
		l.busy = false
		l.mu.Unlock()
		if err != nil {
			err = l.fail(fmt.Errorf("write: %w", err))
		}
		if last {
			if err != nil {
				seq = 0
			}
			o.done(seq, err)
		}
		if err != nil {
			return
		}
	}
}

// errLinkClosed is the error of a link closed on purpose.
var errLinkClosed = errors.New("link closed")

// close fails the link once everything queued is written, or after
// timeout.
func (l *link) close(timeout time.Duration) {
	l.mu.Lock()
	l.ending = true
	l.wake.Signal()
	l.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-l.closed:
	case <-t.C:
		l.fail(errLinkClosed)
	}
}

// fail marks the link broken with cause; the first cause wins. It closes the
// transport, fails the transfers not written yet and returns the link's
// error.
func (l *link) fail(cause error) error {
	l.mu.Lock()
	if l.err != nil {
		err := l.err
		l.mu.Unlock()
		return err
	}
	l.err = cause
	bulk := l.bulk
	l.bulk, l.ctrl = nil, nil
	close(l.closed)
	l.wake.Broadcast()
	l.mu.Unlock()
	l.t.Close()
	for _, o := range bulk {
		o.done(0, cause)
	}
	return cause
}

// failed returns the link's error once it has failed, else nil.
func (l *link) failed() error {
	select {
	case <-l.closed:
		l.mu.Lock()
		defer l.mu.Unlock()
		return l.err
	default:
		return nil
	}
}

// ErrSilent is wrapped by the error of a link on which nothing came for too
// long. That is longer than the device timeout (GOFFLOAD_DEVICE_TIMEOUT).
var ErrSilent = errors.New("stopped answering")

// live starts the heartbeat. A link that wrote nothing since the last ping
// sends one every interval. The link fails when nothing was read for timeout
// (0: never).
func (l *link) live(interval, timeout time.Duration) {
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		reads, writes := l.reads.Load(), l.writes.Load()
		heard := time.Now()
		for {
			select {
			case <-l.closed:
				return
			case now := <-t.C:
				if r := l.reads.Load(); r != reads {
					reads, heard = r, now
				} else if silent := now.Sub(heard); timeout > 0 && silent >= timeout {
					l.fail(fmt.Errorf("%w: nothing heard for %v (%s=%v)", ErrSilent, silent.Round(time.Millisecond), envTimeout, timeout))
					return
				}
				if w := l.writes.Load(); w == writes {
					l.send(&proto.Ping{})
				}
				writes = l.writes.Load()
			}
		}
	}()
}

// within fails the link with ErrSilent if stop is not called within timeout
// (0: never). It is for a phase before the heartbeat runs: a hello that does
// not come. what says what did not come ("the device's hello").
func (l *link) within(timeout time.Duration, what string) (stop func()) {
	if timeout <= 0 {
		return func() {}
	}
	t := time.AfterFunc(timeout, func() {
		l.fail(fmt.Errorf("%w: no %s within %v (%s=%v)", ErrSilent, what, timeout, envTimeout, timeout))
	})
	return func() { t.Stop() }
}

// readErr is the error of a read that failed with err. It is the link's own,
// if the link failed first (within, live). Else it is err.
func (l *link) readErr(err error) error {
	if lerr := l.failed(); lerr != nil && errors.Is(lerr, ErrSilent) {
		return lerr
	}
	return err
}

// isClosedErr reports whether err is the normal end of a connection.
func isClosedErr(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, errLinkClosed)
}

// The reading side of a link: its reader's frames, the answers it holds
// back while a batch lasts, and transfers arriving in fragments.

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
	// quiet: a peer's exchange that is not confirmed (proto.PeerPut.Quiet)
	quiet bool
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
