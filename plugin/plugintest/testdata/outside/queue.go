package outside

import (
	"errors"
	"fmt"
	"sync"

	"github.com/goffload/offload/plugin"
)

// op is one queued operation: run (skipped once the queue failed), or the
// recording of an event, or a wait for one.
type op struct {
	run    func() error
	record *event
	wait   *event
}

// queue runs its operations in order on a goroutine that lives while it
// has work. Device memory is resolved, and checked, when an operation is
// enqueued; host memory is read and written when it runs.
type queue struct {
	d *device

	mu      sync.Mutex
	idle    *sync.Cond // broadcast when running turns false
	ops     []op
	running bool
	closed  bool
	err     error // the first failure since the last Synchronize or Query
}

// enqueue appends o, or refuses it if the queue or its device is closed;
// arm, if set, runs under the queue's lock once the queue accepts o (an
// event is recorded only if its Record is).
func (q *queue) enqueue(o op, arm func() error) error {
	if err := q.d.alive(); err != nil {
		return err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return fmt.Errorf("%s: %w: queue is closed", q.d.label(), plugin.ErrBadHandle)
	}
	if arm != nil {
		if err := arm(); err != nil {
			return err
		}
	}
	q.ops = append(q.ops, o)
	if !q.running {
		q.running = true
		go q.loop()
	}
	return nil
}

func (q *queue) loop() {
	for {
		q.mu.Lock()
		if len(q.ops) == 0 {
			q.running = false
			q.idle.Broadcast()
			q.mu.Unlock()
			return
		}
		o := q.ops[0]
		q.ops[0] = op{}
		q.ops = q.ops[1:]
		failed := q.err
		q.mu.Unlock()

		var err error
		switch {
		case o.record != nil:
			o.record.fire(failed)
		case o.wait != nil:
			<-o.wait.done
			if o.wait.err != nil && failed == nil {
				err = fmt.Errorf("%s: waited-for event failed: %w", q.d.label(), o.wait.err)
			}
		case failed == nil:
			err = o.run()
		}
		if err != nil {
			q.mu.Lock()
			if q.err == nil {
				q.err = err
			}
			q.mu.Unlock()
		}
	}
}

func (q *queue) Submit(dst plugin.Ptr, src []byte) error {
	b, err := q.d.bytes(dst, int64(len(src)))
	if err != nil {
		return fmt.Errorf("submit of %d bytes: %w", len(src), err)
	}
	return q.enqueue(op{run: func() error { copy(b, src); return nil }}, nil)
}

func (q *queue) Retrieve(dst []byte, src plugin.Ptr) error {
	b, err := q.d.bytes(src, int64(len(dst)))
	if err != nil {
		return fmt.Errorf("retrieve of %d bytes: %w", len(dst), err)
	}
	return q.enqueue(op{run: func() error { copy(dst, b); return nil }}, nil)
}

// Exchange copies between outside devices directly (they share the
// process); any other kind's device is plugin.ErrUnsupported, and the core
// stages the copy through host memory.
func (q *queue) Exchange(dst plugin.Device, dstPtr, src plugin.Ptr, size int64) error {
	other, ok := dst.(*device)
	if !ok {
		return fmt.Errorf("%s: exchange to a %s device: %w", q.d.label(), dst.Info().Kind, plugin.ErrUnsupported)
	}
	s, err := q.d.bytes(src, size)
	if err != nil {
		return fmt.Errorf("exchange source: %w", err)
	}
	t, err := other.bytes(dstPtr, size)
	if err != nil {
		return fmt.Errorf("exchange destination: %w", err)
	}
	return q.enqueue(op{run: func() error { copy(t, s); return nil }}, nil)
}

func (q *queue) Launch(k *plugin.Kernel, args []plugin.Arg) error {
	ctx, err := q.d.kernelCtx(k)
	if err != nil {
		return err
	}
	return q.enqueue(op{run: func() error {
		if err := k.Launch(ctx, args, q.d.mem); err != nil {
			return fmt.Errorf("%s: %w", q.d.label(), err)
		}
		return nil
	}}, nil)
}

func (q *queue) Record(e plugin.Event) error {
	ev, ok := e.(*event)
	if !ok || ev.d != q.d {
		return fmt.Errorf("%s: %w: event %T is not of this device", q.d.label(), plugin.ErrBadHandle, e)
	}
	return q.enqueue(op{record: ev}, ev.arm)
}

func (q *queue) Wait(e plugin.Event) error {
	ev, ok := e.(*event)
	if !ok || !q.d.CanWait(e) {
		return fmt.Errorf("%s: wait on a %T: %w", q.d.label(), e, plugin.ErrUnsupported)
	}
	if !ev.recorded() {
		return fmt.Errorf("%s: wait: %w", q.d.label(), plugin.ErrNotRecorded)
	}
	return q.enqueue(op{wait: ev}, nil)
}

func (q *queue) Synchronize() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.running {
		q.idle.Wait()
	}
	err := q.err
	q.err = nil
	return err
}

func (q *queue) Query() (bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.running {
		return false, nil
	}
	err := q.err
	q.err = nil
	return true, err
}

func (q *queue) Close() error {
	err := q.Synchronize()
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	return err
}

// event fires once, when the queue it was recorded on reaches it, with
// the queue's error state then.
type event struct {
	d *device

	mu     sync.Mutex
	armed  bool // recorded
	closed bool
	done   chan struct{}
	err    error    // written before done is closed
	then   []func() // run when it fires (OnFire)
}

var errRecordedTwice = errors.New("event is already recorded (events fire once; create another)")

func (e *event) arm() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return fmt.Errorf("%s: %w: event is closed", e.d.label(), plugin.ErrBadHandle)
	}
	if e.armed {
		return fmt.Errorf("%s: %w: %w", e.d.label(), plugin.ErrBadHandle, errRecordedTwice)
	}
	e.armed = true
	return nil
}

func (e *event) recorded() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.armed
}

func (e *event) fire(err error) {
	e.mu.Lock()
	e.err = err
	close(e.done)
	then := e.then
	e.then = nil
	e.mu.Unlock()
	for _, f := range then {
		f()
	}
}

func (e *event) Synchronize() error {
	if !e.recorded() {
		return plugin.ErrNotRecorded
	}
	<-e.done
	return e.err
}

func (e *event) Query() (bool, error) {
	if !e.recorded() {
		return false, plugin.ErrNotRecorded
	}
	select {
	case <-e.done:
		return true, e.err
	default:
		return false, nil
	}
}

func (e *event) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return fmt.Errorf("%s: %w: event closed twice", e.d.label(), plugin.ErrBadHandle)
	}
	e.closed = true
	return nil
}

// OnFire runs f when the event fires, or at once if it has
// (plugin.FireNotifier).
func (e *event) OnFire(f func()) {
	e.mu.Lock()
	select {
	case <-e.done:
		e.mu.Unlock()
		f()
		return
	default:
	}
	e.then = append(e.then, f)
	e.mu.Unlock()
}
