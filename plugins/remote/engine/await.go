package engine

// A caller that waits for its answer on a shared-memory link polls for it and
// reads it itself: whoever waits polls. Waking a parked goroutine costs its
// waker a wake-up of an idle thread. That is a futex system call of 10-15 µs
// on a virtual machine whose other CPU sleeps. And the link's reader, once it
// had parked on the doorbell, heard of a kernel's end 60-100 µs late. (It
// parks for any kernel longer than its spin budget.)
//
// So the caller of a synchronous call (Synchronize, call) polls its answer's
// channel and the ring. It polls on internal/waitpoll's budget, parking at
// once when preempted. When the ring holds frames, it takes the read lock and
// reads and dispatches them itself, its own answer among them. The link's
// reader waits between frames without the lock (transport.Poller's
// AwaitReadable). It parks at once meanwhile, so that one goroutine of the
// process polls.
//
// The reader is never woken for the caller. It stays parked on the doorbell,
// which the other side does not ring while the caller polls (rPolled). A
// frame that comes when no caller polls wakes it as before.

import (
	"time"

	"github.com/goffload/offload/internal/waitpoll"
	"github.com/goffload/offload/plugins/remote/proto"
	"github.com/goffload/offload/plugins/remote/transport"
)

// await waits for the answer ch brings. On a shared-memory link it polls (one
// caller of the device at a time; the others park). Else it parks.
func (d *Device) await(ch chan proto.Reply) proto.Reply {
	sc := d.sc
	if sc == nil || !d.polling.CompareAndSwap(false, true) {
		return <-ch
	}
	sc.SetPolled(true)
	var r proto.Reply
	// The caller reads until its own answer is in (ch has room for one),
	// not until the link is drained: behind it may come a bulk transfer's
	// fragments, which are the reader's (TestSmallMessagesPassBulk).
	answered := func() bool { return len(ch) > 0 }
	got := waitpoll.Until(waitpoll.Budget, 20*time.Microsecond, 0, func() bool {
		select {
		case r = <-ch:
			return true
		default:
		}
		d.readIfAny(answered)
		select {
		case r = <-ch:
			return true
		default:
			return false
		}
	})
	// The doorbell rings again for frames written from now on; what came
	// before, unrung, is the reader's: it is woken for it.
	sc.SetPolled(false)
	d.polling.Store(false)
	if !got {
		d.readIfAny(answered)
		r = <-ch
	}
	d.handBack()
	return r
}

// handBack wakes the reader if the link holds frames that came while a caller
// polled and that it left unread. (The doorbell was off for them.) Frames the
// caller's reads took ahead into the link's buffer, it reads itself. The
// reader, parked on the ring, would not see them until the next frame came, a
// heartbeat seconds later. No doorbell rings for them, and a kick only makes
// it look at the ring again.
func (d *Device) handBack() {
	if d.readMu.TryLock() {
		if d.l.br.Buffered() {
			d.readHere(func() bool { return !d.l.br.Buffered() })
		}
		left := d.sc.Readable()
		d.readMu.Unlock()
		if !left {
			return
		}
	}
	d.sc.Kick()
}

// readIfAny reads and dispatches what the link holds, if anything and if no
// other goroutine reads. It stops when stop reports true. If another holds
// the read lock, it kicks the reader. The reader may be parked inside a
// frame's read: the rest of the frame came while the doorbell was off
// (rPolled). It polls when kicked.
func (d *Device) readIfAny(stop func() bool) {
	if !d.sc.Readable() {
		return
	}
	if !d.readMu.TryLock() {
		d.sc.Kick()
		return
	}
	d.readHere(stop)
	d.readMu.Unlock()
}

// readHere reads and dispatches the frames the link holds now, as the reader
// would, under d.readMu. It stops when stop reports true after a frame. Its
// reads poll rather than park on the doorbell, as the reader may be parked
// there.
func (d *Device) readHere(stop func() bool) {
	d.sc.SetPollOnly(true)
	defer d.sc.SetPollOnly(false)
	for d.l.br.Buffered() || d.sc.Readable() {
		m, err := d.l.r.ReadMsg()
		if err == nil {
			err = d.dispatch(m)
		}
		if err != nil {
			d.readFailed(err)
			return
		}
		if stop() {
			break
		}
	}
	d.l.release() // what the frames' handling held back goes out (linkReader.ReadMsg)
}

// readFailed fails the device for err, a read or dispatch's error, as the
// reader does when its read fails.
func (d *Device) readFailed(err error) {
	if lerr := d.l.failed(); lerr != nil && !isClosedErr(lerr) {
		err = lerr // the link failed first (silence, a write error): that is why
	}
	d.lose(err)
}

// awaitFrame returns, holding d.readMu, once the reader's next ReadMsg has
// something to read. That is a frame read ahead, or data on a shared-memory
// link. It waits for the data without the lock, so that a polling caller can
// read it.
func (d *Device) awaitFrame() {
	d.readMu.Lock()
	for d.sc != nil && !d.l.br.Buffered() && !d.sc.Readable() {
		d.l.release() // before waiting, as linkReader.ReadMsg does
		d.readMu.Unlock()
		d.sc.AwaitReadable(d.polling.Load)
		d.readMu.Lock()
	}
}

// pollerOf is l's transport if it can be polled by any goroutine
// (transport.Poller: a shared-memory link). Else it is nil.
func pollerOf(l *link) transport.Poller {
	p, _ := l.t.(transport.Poller)
	return p
}
