package remote

import (
	"fmt"

	"github.com/goffload/offload/internal/opqueue"
	"github.com/goffload/offload/internal/plugin"
	"github.com/goffload/offload/plugins/remote/proto"
)

// queue is a remote queue: operations are sent at once and run in order on
// the device; Synchronize sends a mark and waits for it to come back.
type queue struct {
	d      *device
	id     uint32
	closed bool
	// dirty says operations were sent since the last mark; query is the
	// mark a Query sent, if it has not been answered; held is an error a
	// mark answered that is not reported yet.
	dirty bool
	query chan error
	held  error
	// waited says a wait was sent since the last Synchronize: submits then
	// are pulled, so they read host memory after the wait, not now.
	waited bool
	// buf holds frames not written yet.
	buf []byte
	// waitedOn are other devices' events this queue waited on since its last
	// mark or record: once it is past them, they fired, whether or not their
	// own device's word has reached the host yet.
	waitedOn []*event
}

// pastWaits fires, on the host's side, the events q waited on: q got past
// them on its device, so they fired (their own device's message may still be
// on its way).
func pastWaits(evs []*event) {
	for _, ev := range evs {
		ev.ev.Fire(nil) // the first firing counts; the device's own comes later
	}
}

func (q *queue) send(m *proto.Msg, payload []byte) error {
	if q.closed {
		return fmt.Errorf("%s: %w: queue is closed", q.d.name, plugin.ErrBadHandle)
	}
	if err := q.d.alive(); err != nil {
		return err
	}
	m.Queue = q.id
	q.dirty = true
	q.buf = proto.AppendFrame(q.buf, m, payload)
	if len(q.buf) >= 64<<10 {
		return q.flush()
	}
	return nil
}

// flush writes the frames the queue holds back. A queue sends its frames in
// one write when it records an event or sends a mark — the end of a task's
// or a construct's operations — instead of one write each.
func (q *queue) flush() error {
	if len(q.buf) == 0 {
		return nil
	}
	err := q.d.l.write(q.buf)
	q.buf = q.buf[:0]
	if err != nil {
		q.d.lose(err)
		return q.d.alive()
	}
	return nil
}

func (q *queue) Submit(dst plugin.Ptr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	m := &proto.Msg{Type: proto.TSubmit, ID: q.d.id(), Ptr: uint64(dst), Size: uint64(len(src))}
	if len(src) <= proto.MaxInline && !q.waited {
		return q.send(m, src)
	}
	m.Ptr2 = 1 // pulled
	q.d.mu.Lock()
	q.d.pushes[m.ID] = src
	q.d.mu.Unlock()
	return q.send(m, nil)
}

func (q *queue) Retrieve(dst []byte, src plugin.Ptr) error {
	if len(dst) == 0 {
		return nil
	}
	m := &proto.Msg{Type: proto.TRetrieve, ID: q.d.id(), Ptr: uint64(src), Size: uint64(len(dst))}
	q.d.mu.Lock()
	q.d.pulls[m.ID] = &incoming{dst: dst}
	q.d.mu.Unlock()
	return q.send(m, nil)
}

func (q *queue) Exchange(dst plugin.Device, dstPtr, src plugin.Ptr, size int64) error {
	other, ok := dst.(*device)
	if !ok {
		return fmt.Errorf("%s: exchange to a %s device: %w", q.d.name, dst.Info().Kind, plugin.ErrUnsupported)
	}
	if other != q.d {
		if err := introduce(q.d, other); err != nil {
			return fmt.Errorf("%s: %w", q.d.name, err)
		}
	}
	return q.send(&proto.Msg{Type: proto.TExchange, ID: q.d.id(), Ptr: uint64(src), Ptr2: uint64(dstPtr), Size: uint64(size), Kernel: uint32(other.num)}, nil)
}

func (q *queue) Launch(k *plugin.Kernel, args []plugin.Arg) error {
	if k == nil || k.Index < 0 {
		return fmt.Errorf("%s: %w: not a kernel of the image", q.d.name, plugin.ErrBadKernel)
	}
	if k.Index >= q.d.count {
		return fmt.Errorf("%s: %w: kernel %q was registered after the device process started (it has %d kernels); register kernels at package init",
			q.d.name, plugin.ErrBadKernel, k.Name, q.d.count)
	}
	b, err := proto.AppendArgs(nil, k, args)
	if err != nil {
		return fmt.Errorf("%s: %w", q.d.name, err)
	}
	if len(b) > proto.MaxInline {
		return fmt.Errorf("%s: %w: kernel %q arguments take %d bytes, more than %d", q.d.name, plugin.ErrBadKernel, k.Name, len(b), proto.MaxInline)
	}
	return q.send(&proto.Msg{Type: proto.TLaunch, Kernel: uint32(k.Index)}, b)
}

func (q *queue) Record(e plugin.Event) error {
	ev, ok := e.(*event)
	if !ok || ev.d != q.d {
		return fmt.Errorf("%s: %w: event %T is not of this device", q.d.name, plugin.ErrBadHandle, e)
	}
	if q.closed {
		return fmt.Errorf("%s: %w: queue is closed", q.d.name, plugin.ErrBadHandle)
	}
	if err := ev.ev.Arm(); err != nil {
		return fmt.Errorf("%s: %w", q.d.name, err)
	}
	q.d.mu.Lock()
	ev.implies, q.waitedOn = q.waitedOn, nil
	q.d.mu.Unlock()
	if err := q.send(&proto.Msg{Type: proto.TRecord, ID: ev.id}, nil); err != nil {
		return err
	}
	return q.flush()
}

func (q *queue) Wait(e plugin.Event) error {
	ev, ok := e.(*event)
	if !ok || !q.d.CanWait(e) {
		return fmt.Errorf("%s: wait on a %T: %w", q.d.name, e, plugin.ErrUnsupported)
	}
	if !ev.ev.Recorded() {
		return fmt.Errorf("%s: wait: %w", q.d.name, plugin.ErrNotRecorded)
	}
	if q.closed {
		return fmt.Errorf("%s: %w: queue is closed", q.d.name, plugin.ErrBadHandle)
	}
	if fired, err := ev.ev.Query(); fired && err == nil {
		return nil // nothing to wait for (and the device may have forgotten it)
	}
	q.waited = true
	if ev.d == q.d {
		return q.send(&proto.Msg{Type: proto.TWait, ID: ev.id}, nil)
	}
	// Another device process's event: it tells ours over their peer link
	// when it fires, and the host is not in between.
	q.waitedOn = append(q.waitedOn, ev)
	if err := introduce(q.d, ev.d); err != nil {
		return fmt.Errorf("%s: %w", q.d.name, err)
	}
	wait := q.d.id()
	if err := ev.d.l.send(&proto.Msg{Type: proto.TNotify, ID: ev.id, Ptr: wait, Kernel: uint32(q.d.num)}, nil); err != nil {
		ev.d.lose(err)
		return fmt.Errorf("%s: wait on %s: %w", q.d.name, ev.d.name, ev.d.alive())
	}
	return q.send(&proto.Msg{Type: proto.TWait, Ptr2: 1, Kernel: uint32(ev.d.num), Ptr: wait}, nil)
}

// mark sends a sync mark and returns the channel its answer comes on.
func (q *queue) mark() (chan error, error) {
	ch := make(chan error, 1)
	m := &proto.Msg{Type: proto.TSync, ID: q.d.id()}
	q.d.mu.Lock()
	q.d.syncs[m.ID] = ch
	q.d.mu.Unlock()
	err := q.send(m, nil)
	if err == nil {
		err = q.flush()
	}
	if err != nil {
		q.d.mu.Lock()
		delete(q.d.syncs, m.ID)
		q.d.mu.Unlock()
		return nil, err
	}
	q.dirty = false
	return ch, nil
}

func (q *queue) hold(err error) {
	if q.held == nil {
		q.held = err
	}
}

func (q *queue) Synchronize() error {
	if q.query != nil { // a Query's mark is out: its answer comes first
		q.hold(<-q.query)
		q.query = nil
	}
	if q.dirty {
		waited := q.waitedOn
		q.waitedOn = nil
		ch, err := q.mark()
		if err != nil {
			return err
		}
		err = <-ch
		if err == nil {
			pastWaits(waited)
		}
		q.hold(err)
	}
	err := q.held
	q.held = nil
	q.waited = false
	return err
}

func (q *queue) Query() (bool, error) {
	if q.query != nil {
		select {
		case err := <-q.query:
			q.query = nil
			q.hold(err)
		default:
			return false, nil
		}
	}
	if q.dirty {
		ch, err := q.mark()
		if err != nil {
			return true, err
		}
		q.query = ch
		return false, nil
	}
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
	q.send(&proto.Msg{Type: proto.TCloseQueue}, nil)
	q.flush()
	q.closed = true
	return err
}

// event is a remote event: the device fires it and says so.
type event struct {
	d  *device
	id uint64
	ev *opqueue.Event
	// Guarded by d.mu: closed by the host; heard from the device that it
	// fired; implies are other devices' events the recording queue waited
	// on before this one (if this one fires without error, they fired).
	closed  bool
	heard   bool
	implies []*event
}

func (e *event) Synchronize() error {
	err := e.ev.Synchronize()
	if err == opqueue.ErrNotRecorded {
		return plugin.ErrNotRecorded
	}
	return err
}

func (e *event) Query() (bool, error) {
	fired, err := e.ev.Query()
	if err == opqueue.ErrNotRecorded {
		return false, plugin.ErrNotRecorded
	}
	return fired, err
}

func (e *event) Close() error {
	if err := e.ev.Close(); err != nil {
		return fmt.Errorf("%s: %w", e.d.name, err)
	}
	e.d.mu.Lock()
	e.closed = true
	heard := e.heard
	if heard || !e.ev.Recorded() { // no word from the device is to come
		delete(e.d.events, e.id)
	}
	e.d.mu.Unlock()
	if heard {
		e.d.forget(e.id)
	}
	return nil
}
