package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/goffload/offload/internal/waitpoll"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/opqueue"
	"github.com/goffload/offload/plugins/remote/proto"
	"github.com/goffload/offload/plugins/remote/transport"
)

// queue is a remote queue. Operations are queued on the link at once, in
// order. They go out together when the queue records an event or sends a
// mark. They run in order on the device. Synchronize sends a mark and waits
// for it to come back.
type queue struct {
	d      *Device
	id     uint32
	closed bool
	tag    uint64 // the tag the device has for the queue (see Tag)
	// dirty says operations were sent since the last mark. query is the mark
	// a Query sent, if it has not been answered. held is an error a mark
	// answered that is not reported yet.
	dirty bool
	// rec is the event of the queue's last Record, if nothing was queued
	// after it. Once it fired without error, every operation sent on the
	// queue is done. A Synchronize then needs no mark.
	rec   *event
	query chan proto.Reply
	held  error
	// waited says a wait or a retrieve was sent since the last Synchronize.
	// Submits are then pulled: they read host memory when the queue reaches
	// them, not now. That is after the wait, and after the retrieve's data is
	// in host memory.
	waited bool
	// xfers are the transfers queued since the last record or mark. They are
	// over (done, or skipped after a failure) once it comes back.
	xfers []uint64
	// waitedOn are other devices' events this queue waited on since its last
	// mark or record. Once it is past them, they fired. That holds whether or
	// not their own device's word has reached the host yet.
	waitedOn []*event
	// stops are the bindings of launches to their stop signals (LaunchStop).
	// They are released once a mark is answered: the device forgets the
	// launches' numbers then.
	stops []func()
}

// pastWaits fires, on the host's side, the events q waited on. q got past
// them on its device, so they fired. Their own device's message may still be
// on its way.
func pastWaits(evs []*event) {
	for _, ev := range evs {
		ev.ev.Fire(nil) // the first firing counts; the device's own comes later
	}
}

// enqueue queues f, an operation of q, for the device under d.mu, without
// waking the link's writer. It does so after reg, if set. reg registers what
// f's answer needs, and may number f.
func (q *queue) enqueue(f proto.Frame, reg func(d *Device)) error {
	if q.closed {
		return fmt.Errorf("%s: %w: queue is closed", q.d.name(), plugin.ErrBadHandle)
	}
	d := q.d
	d.mu.Lock()
	if err := d.st.Alive(); err != nil {
		d.mu.Unlock()
		return err
	}
	err := d.putClosing()
	if reg != nil && err == nil {
		reg(d)
	}
	if err == nil {
		err = d.l.put(f)
	}
	d.mu.Unlock()
	if err != nil {
		return d.linkLost(err)
	}
	q.dirty, q.rec = true, nil
	return nil
}

// xfer numbers a transfer of q, under d.mu.
func (q *queue) xfer(d *Device) uint64 {
	id := d.st.ID()
	q.xfers = append(q.xfers, id)
	return id
}

func (q *queue) Submit(dst plugin.Ptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	if len(src) <= proto.MaxInline && !q.waited {
		return q.enqueue(&proto.Submit{Queue: q.id, Dst: uint64(dst), Data: src}, nil)
	}
	if q.idle() {
		// Every earlier operation of the queue is done, and host memory may
		// be read now. The data follows the frame at once, and the device
		// reads it straight into place.
		f := &proto.SubmitPushed{Queue: q.id, Dst: uint64(dst), Size: uint64(len(src))}
		if err := q.enqueue(f, func(d *Device) { f.Xfer = q.xfer(d) }); err != nil {
			return err
		}
		q.d.l.stream(f.Xfer, src, false, func(uint64, error) {}) // a failure is the link's, seen by the reader
		return nil
	}
	// Pulled when the device's queue reaches it.
	f := &proto.SubmitPulled{Queue: q.id, Dst: uint64(dst), Size: uint64(len(src))}
	return q.enqueue(f, func(d *Device) {
		f.Xfer = q.xfer(d)
		d.st.Push(f.Xfer, src)
	})
}

// idle reports whether every operation sent on q is known done, and q waited
// on nothing since. A Synchronize (or a Query that said done) was the last
// word, and nothing was queued after it.
func (q *queue) idle() bool { return !q.dirty && !q.waited && q.query == nil && q.held == nil }

func (q *queue) Retrieve(dst []byte, src plugin.Ptr) error {
	if len(dst) == 0 {
		return nil
	}
	f := &proto.Retrieve{Queue: q.id, Src: uint64(src), Size: uint64(len(dst))}
	q.waited = true // a later submit may read what this writes
	return q.enqueue(f, func(d *Device) {
		f.Xfer = q.xfer(d)
		d.st.Expect(f.Xfer, &incoming{dst: dst, size: len(dst)})
	})
}

func (q *queue) Exchange(dst plugin.Device, dstPtr, src plugin.Ptr, size int64) error {
	other, ok := dst.(*Device)
	if !ok {
		return fmt.Errorf("%s: exchange to a %s device: %w", q.d.name(), dst.Info().Kind, plugin.ErrUnsupported)
	}
	if size < 0 {
		return fmt.Errorf("%s: %w: exchange of %d bytes", q.d.name(), plugin.ErrBadPointer, size)
	}
	if other != q.d {
		if err := introduce(q.d, other); err != nil {
			return fmt.Errorf("%s: %w", q.d.name(), err)
		}
		if err := other.seeAllocs(); err != nil {
			return fmt.Errorf("%s: exchange to %s: %w", q.d.name(), other.name(), err)
		}
	}
	return q.enqueue(&proto.Exchange{Queue: q.id, Src: uint64(src), Dst: uint64(dstPtr), Size: uint64(size), Peer: uint32(other.num)}, nil)
}

func (q *queue) Launch(k plugin.Kernel, args []plugin.Arg) error { return q.LaunchStop(k, args, nil) }

// LaunchStop is Launch whose kernel's Ctx.Done closes when stop stops
// (plugin.StopLauncher). The launch is numbered. When stop stops, a
// StopLaunch frame with its number goes to the device. That holds until the
// queue's next mark is answered.
func (q *queue) LaunchStop(k plugin.Kernel, args []plugin.Arg, stop *plugin.StopSignal) error {
	if k == nil || k.Index() < 0 {
		return fmt.Errorf("%s: %w: not a kernel of the image", q.d.name(), plugin.ErrBadKernel)
	}
	if k.Index() >= q.d.count {
		return fmt.Errorf("%s: %w: kernel %q was registered after the device process started (it has %d kernels); register kernels at package init",
			q.d.name(), plugin.ErrBadKernel, k.Name(), q.d.count)
	}
	b, err := proto.AppendArgs(nil, k, args)
	if err != nil {
		return fmt.Errorf("%s: %w", q.d.name(), err)
	}
	if len(b) > proto.MaxInline {
		return fmt.Errorf("%s: %w: kernel %q arguments take %d bytes, more than %d", q.d.name(), plugin.ErrBadKernel, k.Name(), len(b), proto.MaxInline)
	}
	f := &proto.Launch{Queue: q.id, Kernel: uint32(k.Index()), Args: b}
	if stop == nil {
		return q.enqueue(f, nil)
	}
	if err := q.enqueue(f, func(d *Device) { f.Stop = d.st.ID() }); err != nil {
		return err
	}
	l, id := q.d.l, f.Stop
	q.stops = append(q.stops, stop.OnStop(func() { l.sendSoon(&proto.StopLaunch{Stop: id}) }))
	return nil
}

func (q *queue) Record(e plugin.Event) error {
	ev, ok := e.(*event)
	if err := q.d.life.Mine("record", e, ok && ev.d == q.d); err != nil {
		return err
	}
	if q.closed {
		return fmt.Errorf("%s: %w: queue is closed", q.d.name(), plugin.ErrBadHandle)
	}
	if err := ev.ev.Arm(); err != nil {
		return fmt.Errorf("%s: %w", q.d.name(), err)
	}
	err := q.enqueue(&proto.Record{Queue: q.id, Event: ev.id}, func(d *Device) {
		d.st.Record(ev.id, q.waitedOn, q.xfers)
		q.waitedOn, q.xfers = nil, nil
	})
	if err != nil {
		ev.ev.Fire(err) // recorded, and will never fire otherwise
		return err
	}
	q.rec = ev
	q.d.l.flush() // the writer's: several tasks' frames go out together
	return nil
}

func (q *queue) Wait(e plugin.Event) error {
	ev, ok := e.(*event)
	if err := q.d.life.Waitable(e, ok && q.d.CanWait(e)); err != nil {
		return err
	}
	if !ev.ev.Recorded() {
		return fmt.Errorf("%s: wait: %w", q.d.name(), plugin.ErrNotRecorded)
	}
	if q.closed {
		return fmt.Errorf("%s: %w: queue is closed", q.d.name(), plugin.ErrBadHandle)
	}
	if ev.d == q.d {
		d := q.d
		d.mu.Lock()
		defer d.mu.Unlock()
		fired, firedErr := ev.ev.Query()
		f, skip, err := d.st.Wait(q.id, ev.id, fired, firedErr)
		if skip || err != nil {
			return err
		}
		q.waited, q.dirty, q.rec = true, true, nil
		// Queued under d.mu after the check: the batch that makes the device
		// forget the event goes out after this wait.
		return d.l.put(f)
	}
	// Another device process's event tells ours over their peer link when it
	// fires. The host is not in between.
	if err := introduce(q.d, ev.d); err != nil {
		return fmt.Errorf("%s: %w", q.d.name(), err)
	}
	o := ev.d
	o.mu.Lock()
	if err := o.st.Alive(); err != nil {
		o.mu.Unlock()
		return fmt.Errorf("%s: wait on %s: %w", q.d.name(), o.name(), err)
	}
	fired, firedErr := ev.ev.Query()
	if skip, err := o.st.Settled(ev.id, fired, firedErr); skip || err != nil {
		o.mu.Unlock()
		return err
	}
	wait := o.st.ID()
	err := o.l.send(&proto.Notify{Event: ev.id, Wait: wait, Peer: uint32(q.d.num)})
	o.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%s: wait on %s: %w: %w", q.d.name(), o.name(), plugin.ErrDeviceLost, err)
	}
	q.waitedOn = append(q.waitedOn, ev)
	q.waited = true
	return q.enqueue(&proto.WaitPeer{Queue: q.id, Peer: uint32(o.num), Wait: wait}, nil)
}

// mark sends a sync mark and returns the channel its answer comes on.
func (q *queue) mark() (chan proto.Reply, error) {
	if q.closed {
		return nil, fmt.Errorf("%s: %w: queue is closed", q.d.name(), plugin.ErrBadHandle)
	}
	ch, err := q.d.request(func(seq uint64) proto.Frame { return &proto.Sync{Queue: q.id, Seq: seq} }, q.xfers)
	if err != nil {
		return nil, err
	}
	q.xfers = nil
	q.dirty, q.rec = false, nil
	return ch, nil
}

// pastRecord clears q.dirty if q's last operation was a Record whose event
// the device said fired, without error. The device did everything before it.
// What it sent before (a retrieve's data) is in, so a mark would say only
// that. (An event fired early, because another queue got past it, does not
// count. Its device's data may still be on its way.) A queue the core pooled
// after its task is done then closes without a round trip. Launches bound to
// stop signals still need the mark, which makes the device forget their
// numbers.
func (q *queue) pastRecord() {
	if !q.dirty || q.rec == nil || len(q.stops) > 0 {
		return
	}
	if fired, err := q.rec.ev.Query(); !fired || err != nil {
		return
	}
	d := q.d
	d.mu.Lock()
	heard := d.st.HeardOf(q.rec.id)
	d.mu.Unlock()
	if heard {
		q.dirty, q.rec = false, nil
	}
}

// releaseStops ends the bindings of the launches before the mark just
// answered. They are done, and the device forgot their numbers.
func (q *queue) releaseStops() {
	for _, r := range q.stops {
		r()
	}
	q.stops = nil
}

func (q *queue) hold(err error) {
	if q.held == nil {
		q.held = err
	}
}

func answer(r proto.Reply) error { return r.Status.Err() }

func (q *queue) Synchronize() error {
	if q.query != nil { // a Query's mark is out: its answer comes first
		q.hold(answer(q.d.await(q.query)))
		q.query = nil
	}
	q.pastRecord()
	if q.dirty {
		waited := q.waitedOn
		q.waitedOn = nil
		ch, err := q.mark()
		if err != nil {
			return err
		}
		err = answer(q.d.await(ch))
		if err == nil {
			pastWaits(waited)
		}
		q.hold(err)
	}
	q.releaseStops()
	err := q.held
	q.held = nil
	q.waited = false
	return err
}

func (q *queue) Query() (bool, error) {
	if q.query != nil {
		select {
		case m := <-q.query:
			q.query = nil
			q.hold(answer(m))
		default:
			return false, nil
		}
	}
	q.pastRecord()
	if q.dirty {
		ch, err := q.mark()
		if err != nil {
			return true, err
		}
		q.query = ch
		return false, nil
	}
	q.releaseStops()
	err := q.held
	q.held = nil
	q.waited = false
	return true, err
}

func (q *queue) Close() error {
	if q.closed {
		return nil
	}
	err := q.Synchronize()
	q.d.mu.Lock()
	if q.d.st.Alive() == nil {
		// Said before the device's next operation, if it has one
		// (device.closing).
		q.d.closing = append(q.d.closing, q.id)
	} else if errors.Is(err, plugin.ErrDeviceLost) {
		err = nil // the loss was reported by the operations it failed
	}
	q.d.mu.Unlock()
	q.closed = true
	return err
}

// unstoppable is a queue of a proxied device whose kind cannot stop one
// launch; its queues are no plugin.StopLauncher. It is *queue without
// LaunchStop, so that the core stops its kernels by other means.
type unstoppable struct{ q *queue }

func (u unstoppable) Submit(dst plugin.Ptr, src []byte) error         { return u.q.Submit(dst, src) }
func (u unstoppable) Retrieve(dst []byte, src plugin.Ptr) error       { return u.q.Retrieve(dst, src) }
func (u unstoppable) Launch(k plugin.Kernel, args []plugin.Arg) error { return u.q.Launch(k, args) }
func (u unstoppable) Record(e plugin.Event) error                     { return u.q.Record(e) }
func (u unstoppable) Wait(e plugin.Event) error                       { return u.q.Wait(e) }
func (u unstoppable) Synchronize() error                              { return u.q.Synchronize() }
func (u unstoppable) Query() (bool, error)                            { return u.q.Query() }
func (u unstoppable) Close() error                                    { return u.q.Close() }
func (u unstoppable) Tag(tag uint64)                                  { u.q.Tag(tag) }
func (u unstoppable) Exchange(dst plugin.Device, dstPtr, src plugin.Ptr, size int64) error {
	return u.q.Exchange(dst, dstPtr, src, size)
}

// event is a remote event: the device fires it and says so. What else the
// host knows of it is in its device's table (state.Host).
type event struct {
	d  *Device
	id uint64
	ev *opqueue.Event
}

func (e *event) Synchronize() error {
	err := e.ev.Synchronize()
	if err == plugin.ErrNotRecorded {
		return plugin.ErrNotRecorded
	}
	return err
}

// OnFire runs f when the event fires, or the device is lost
// (plugin.FireNotifier).
func (e *event) OnFire(f func()) { e.ev.OnFire(f) }

func (e *event) Query() (bool, error) {
	fired, err := e.ev.Query()
	if err == plugin.ErrNotRecorded {
		return false, plugin.ErrNotRecorded
	}
	return fired, err
}

func (e *event) Close() error {
	if err := e.ev.Close(); err != nil {
		return fmt.Errorf("%s: %w", e.d.name(), err)
	}
	d := e.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if forget := d.st.Close(e.id); forget != nil {
		d.l.send(forget) // under d.mu: after every wait queued for these events; a failure is the link's, seen by the reader
	}
	return nil
}

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
