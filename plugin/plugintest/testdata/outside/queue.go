package outside

import (
	"fmt"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/opqueue"
)

// queue is an in-order queue of a device, on an opqueue.Queue: its
// operations run in order on a goroutine that lives while it has work.
// Device memory is resolved, and checked, when an operation is enqueued;
// host memory is read and written when it runs.
type queue struct {
	d *device
	q *opqueue.Queue
}

// do enqueues fn, or refuses it if the queue or its device is closed.
func (q *queue) do(fn func() error) error {
	if err := q.d.alive(); err != nil {
		return err
	}
	if err := q.q.Do(fn); err != nil {
		return fmt.Errorf("%s: %w", q.d.label(), err)
	}
	return nil
}

func (q *queue) Submit(dst plugin.Ptr, src []byte) error {
	b, err := q.d.bytes(dst, int64(len(src)))
	if err != nil {
		return fmt.Errorf("submit of %d bytes: %w", len(src), err)
	}
	return q.do(func() error { copy(b, src); return nil })
}

func (q *queue) Retrieve(dst []byte, src plugin.Ptr) error {
	b, err := q.d.bytes(src, int64(len(dst)))
	if err != nil {
		return fmt.Errorf("retrieve of %d bytes: %w", len(dst), err)
	}
	return q.do(func() error { copy(dst, b); return nil })
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
	return q.do(func() error { copy(t, s); return nil })
}

func (q *queue) Launch(k plugin.Kernel, args []plugin.Arg) error {
	ctx, err := q.d.kernelCtx(k)
	if err != nil {
		return err
	}
	return q.do(func() error {
		if err := k.Launch(ctx, args, q.d.mem); err != nil {
			return fmt.Errorf("%s: %w", q.d.label(), err)
		}
		return nil
	})
}

// Record records one of this device's events; opqueue refuses an event
// recorded already, or closed.
func (q *queue) Record(e plugin.Event) error {
	ev, ok := e.(*event)
	if !ok || ev.d != q.d {
		return fmt.Errorf("%s: %w: event %T is not of this device", q.d.label(), plugin.ErrBadHandle, e)
	}
	if err := q.d.alive(); err != nil {
		return err
	}
	if err := q.q.Record(ev.Event); err != nil {
		return fmt.Errorf("%s: record: %w", q.d.label(), err)
	}
	return nil
}

// Wait waits for any outside device's event (see CanWait); opqueue refuses
// one that is not recorded.
func (q *queue) Wait(e plugin.Event) error {
	ev, ok := e.(*event)
	if !ok || !q.d.CanWait(e) {
		return fmt.Errorf("%s: wait on a %T: %w", q.d.label(), e, plugin.ErrUnsupported)
	}
	if err := q.d.alive(); err != nil {
		return err
	}
	if err := q.q.Wait(ev.Event); err != nil {
		return fmt.Errorf("%s: %w", q.d.label(), err)
	}
	return nil
}

// SetInline makes operations enqueued on the idle queue run on the
// enqueueing goroutine (plugin.InlineQueue): the core sets it for
// synchronous constructs, which wait for the queue right after.
func (q *queue) SetInline(on bool) { q.q.SetInline(on) }

func (q *queue) Synchronize() error { return q.q.Synchronize() }

func (q *queue) Query() (bool, error) { return q.q.Query() }

func (q *queue) Close() error { return q.q.Close() }

// event is an opqueue.Event that knows its device. It fires once, when the
// queue it was recorded on reaches it, with the queue's error state then;
// the embedded Event gives it Synchronize, Query and Close (plugin.Event)
// and OnFire (plugin.FireNotifier).
type event struct {
	d *device
	*opqueue.Event
}
