package host

import (
	"fmt"
	"sync"

	"github.com/goffload/offload/internal/plugin"
)

// op is one queued operation: run, or fire record, or wait for wait.
type op struct {
	run    func() error
	record *event
	wait   *event
}

// queue runs its operations in order on a goroutine that exists while the
// queue has work.
type queue struct {
	d       *device
	mu      sync.Mutex
	idle    *sync.Cond
	ops     []op
	running bool
	closed  bool
	err     error // first failure since the last Synchronize
}

func newQueue(d *device) *queue {
	q := &queue{d: d}
	q.idle = sync.NewCond(&q.mu)
	return q
}

func (q *queue) enqueue(o op) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return fmt.Errorf("%w: queue is closed", plugin.ErrBadHandle)
	}
	if err := q.d.alive(); err != nil {
		return err
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
			q.ops = q.ops[:0]
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
				err = fmt.Errorf("waited-for event failed: %w", o.wait.err)
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
	b, err := q.d.mem.bytes(dst, int64(len(src)))
	if err != nil {
		return fmt.Errorf("%s: submit of %d bytes: %w", q.d.name, len(src), err)
	}
	return q.enqueue(op{run: func() error { copy(b, src); return nil }})
}

func (q *queue) Retrieve(dst []byte, src plugin.Ptr) error {
	b, err := q.d.mem.bytes(src, int64(len(dst)))
	if err != nil {
		return fmt.Errorf("%s: retrieve of %d bytes: %w", q.d.name, len(dst), err)
	}
	return q.enqueue(op{run: func() error { copy(dst, b); return nil }})
}

func (q *queue) Exchange(dst plugin.Device, dstPtr, src plugin.Ptr, size int64) error {
	other, ok := dst.(*device)
	if !ok {
		return fmt.Errorf("%s: exchange to a %s device: %w", q.d.name, dst.Info().Kind, plugin.ErrUnsupported)
	}
	s, err := q.d.mem.bytes(src, size)
	if err != nil {
		return fmt.Errorf("%s: exchange source: %w", q.d.name, err)
	}
	d, err := other.mem.bytes(dstPtr, size)
	if err != nil {
		return fmt.Errorf("%s: exchange destination: %w", other.name, err)
	}
	return q.enqueue(op{run: func() error { copy(d, s); return nil }})
}

func (q *queue) Launch(k *plugin.Kernel, args []plugin.Arg) error {
	if err := q.d.loaded(k); err != nil {
		return err
	}
	vals, err := k.ArgValues(args, q.d.mem.bytes)
	if err != nil {
		return fmt.Errorf("%s: %w", q.d.name, err)
	}
	ctx := plugin.NewKernelCtx(q.d.num, q.d.pool)
	return q.enqueue(op{run: func() error {
		if err := k.Call(ctx, vals); err != nil {
			return fmt.Errorf("%s: %w", q.d.name, err)
		}
		return nil
	}})
}

func (q *queue) Record(e plugin.Event) error {
	ev, err := q.d.ownEvent(e)
	if err != nil {
		return err
	}
	if err := ev.arm(); err != nil {
		return err
	}
	if err := q.enqueue(op{record: ev}); err != nil {
		ev.disarm() // never enqueued: it would never fire
		return err
	}
	return nil
}

func (q *queue) Wait(e plugin.Event) error {
	ev, ok := e.(*event)
	if !ok || !q.d.CanWait(e) {
		return fmt.Errorf("%s: wait on a %T: %w", q.d.name, e, plugin.ErrUnsupported)
	}
	if !ev.recorded() {
		return fmt.Errorf("%s: wait: %w", q.d.name, plugin.ErrNotRecorded)
	}
	return q.enqueue(op{wait: ev})
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

// event fires once, when the record operation runs.
type event struct {
	d      *device
	mu     sync.Mutex
	armed  bool
	done   chan struct{}
	err    error // written before done is closed
	closed bool
}

func (e *event) arm() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return fmt.Errorf("%w: event is closed", plugin.ErrBadHandle)
	}
	if e.armed {
		return fmt.Errorf("%w: event is already recorded (events fire once; create another)", plugin.ErrBadHandle)
	}
	e.armed = true
	return nil
}

// disarm undoes arm when the record operation could not be enqueued.
func (e *event) disarm() {
	e.mu.Lock()
	e.armed = false
	e.mu.Unlock()
}

func (e *event) recorded() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.armed
}

func (e *event) fire(err error) {
	e.err = err
	close(e.done)
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
		return fmt.Errorf("%w: event closed twice", plugin.ErrBadHandle)
	}
	e.closed = true
	return nil
}
