package engine

// A caller that waits for its answer on a shared-memory link polls for it
// and reads it itself: whoever waits polls. Waking a parked goroutine
// costs its waker a wake-up of an idle thread (a futex system call of
// 10-15 µs on a virtual machine whose other CPU sleeps), and the link's
// reader, once it had parked on the doorbell (any kernel longer than its
// spin budget), heard of a kernel's end 60-100 µs late. So the caller of a
// synchronous call (Synchronize, call) polls its answer's channel and the
// ring (internal/waitpoll's budget, parking at once when preempted), and
// when the ring holds frames it takes the read lock and reads and
// dispatches them itself, its own answer among them; the link's reader,
// which waits between frames without the lock (transport.Poller's AwaitReadable),
// parks at once meanwhile, so that one goroutine of the process polls. The
// reader is never woken for the caller: it stays parked on the doorbell,
// which the other side does not ring while the caller polls (rPolled), and
// a frame that comes when no caller polls wakes it as before.

import (
	"time"

	"github.com/goffload/offload/internal/waitpoll"
	"github.com/goffload/offload/plugins/remote/proto"
	"github.com/goffload/offload/plugins/remote/transport"
)

// await waits for the answer ch brings: on a shared-memory link by
// polling (one caller of the device at a time; the others park), else
// parked.
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

// handBack wakes the reader if the link holds frames that came while a
// caller polled (the doorbell was off for them) and that it left unread.
// Frames the caller's reads took ahead into the link's buffer it reads
// itself: the reader, parked on the ring, would not see them (no doorbell
// rings for them, and a kick only makes it look at the ring again) until
// the next frame came, a heartbeat seconds later.
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

// readIfAny reads and dispatches what the link holds, if anything and if
// no other goroutine reads, until stop reports true. If another holds the
// read lock, it kicks the reader: it may be parked inside a frame's read
// (the rest of the frame came while the doorbell was off, rPolled), and it
// polls when kicked.
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

// readHere reads and dispatches the frames the link holds now, as the
// reader would, under d.readMu, until stop reports true after a frame; its
// reads poll rather than park on the doorbell (the reader may be parked
// there).
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
// something to read: a frame read ahead, or data on a shared-memory link
// (waited for without the lock, so that a polling caller can read it).
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
// (transport.Poller: a shared-memory link), else nil.
func pollerOf(l *link) transport.Poller {
	p, _ := l.t.(transport.Poller)
	return p
}
