// Package opqueue is an in-order queue of operations that runs on a goroutine
// of its own while it has work, with one-shot events that mark points in
// queues. The host device's queues and a remote device server's queues are
// built on it.
//
// An operation that fails puts the queue in an error state: the operations
// after it are skipped, until a mark (Synchronize, or Mark with clear) takes
// the error and clears it. Events recorded meanwhile fire with the error.
package opqueue

import (
	"fmt"
	"sync"
	"time"

	"github.com/goffload/offload/plugin"
)

// Errors, as the plugin contract names them.
var (
	// ErrClosed is wrapped for work given to a closed queue or event.
	ErrClosed = plugin.ErrBadHandle
	// ErrNotRecorded is returned by an event that was never recorded.
	ErrNotRecorded = plugin.ErrNotRecorded
)

type op struct {
	run    func() error      // a normal operation, skipped after a failure
	mark   func(error) error // runs whatever happened before; gets the error state
	clear  bool              // the mark clears the error state
	wait   *Event
	record *Event
	// timed, if set, is told when a run or wait operation ran, and how
	// it ended (skipped operations are not told).
	timed func(start, end time.Time, err error)
}

// Queue runs operations in order.
type Queue struct {
	mu      sync.Mutex
	idle    *sync.Cond
	ops     []op
	running bool
	closed  bool
	inline  bool  // see SetInline
	err     error // first failure since the last clearing mark
}

// New returns an empty queue.
func New() *Queue {
	q := &Queue{}
	q.idle = sync.NewCond(&q.mu)
	return q
}

func (q *Queue) enqueue(o op) error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return fmt.Errorf("%w: queue is closed", ErrClosed)
	}
	if q.inline && !q.running {
		// Nothing is queued or running: run o here, as the queue's
		// goroutine would, with the queue marked running meanwhile.
		q.running = true
		failed := q.take(o)
		q.mu.Unlock()
		q.exec(o, failed)
		q.mu.Lock()
		q.running = false
		q.idle.Broadcast()
		q.mu.Unlock()
		return nil
	}
	q.ops = append(q.ops, o)
	if !q.running {
		q.running = true
		go q.loop()
	}
	q.mu.Unlock()
	return nil
}

// SetInline makes operations enqueued while the queue is idle run on the
// enqueueing goroutine, before the enqueueing call returns (a wait then
// blocks it): for a caller that waits for the queue right after anyway.
// Operations enqueued while earlier ones run still go to the queue's
// goroutine.
func (q *Queue) SetInline(on bool) {
	q.mu.Lock()
	q.inline = on
	q.mu.Unlock()
}

// take returns the error state o runs with, clearing it if o clears it;
// under q.mu.
func (q *Queue) take(o op) error {
	failed := q.err
	if o.clear {
		q.err = nil
	}
	return failed
}

func (q *Queue) loop() {
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
		failed := q.take(o)
		q.mu.Unlock()
		q.exec(o, failed)
	}
}

// exec runs o with the error state failed, and sets the state if o fails.
func (q *Queue) exec(o op, failed error) {
	var err error
	var start time.Time
	if o.timed != nil {
		start = time.Now()
	}
	switch {
	case o.record != nil:
		o.record.Fire(failed)
	case o.wait != nil:
		<-o.wait.done
		if o.wait.err != nil && failed == nil {
			err = fmt.Errorf("waited-for event failed: %w", o.wait.err)
		}
		if o.timed != nil {
			o.timed(start, time.Now(), err)
		}
	case o.mark != nil:
		err = o.mark(failed)
	case failed == nil:
		err = o.run()
		if o.timed != nil {
			o.timed(start, time.Now(), err)
		}
	}
	if err != nil {
		q.mu.Lock()
		if q.err == nil {
			q.err = err
		}
		q.mu.Unlock()
	}
}

// Do enqueues fn. It runs after everything enqueued before it, unless one of
// those failed since the last clearing mark; its error puts the queue in the
// error state.
func (q *Queue) Do(fn func() error) error { return q.enqueue(op{run: fn}) }

// DoTimed is Do that tells timed when fn started and ended, and its error,
// on the queue's goroutine right after fn returns (not if fn is skipped).
// A nil timed is Do.
func (q *Queue) DoTimed(fn func() error, timed func(start, end time.Time, err error)) error {
	return q.enqueue(op{run: fn, timed: timed})
}

// Mark enqueues fn to run in order even after a failure: it receives the
// first error since the last clearing mark (nil if none), and clears it if
// clear is set. An error fn returns puts the queue in the error state.
func (q *Queue) Mark(clear bool, fn func(failed error) error) error {
	return q.enqueue(op{mark: fn, clear: clear})
}

// Record makes ev fire, with the queue's error if any, when everything
// enqueued before it is done.
func (q *Queue) Record(ev *Event) error {
	if err := ev.arm(); err != nil {
		return err
	}
	if err := q.enqueue(op{record: ev}); err != nil {
		ev.disarm() // never enqueued: it would never fire
		return err
	}
	return nil
}

// Wait holds back everything enqueued after it until ev has fired; if ev
// carries an error the queue enters the error state with it.
func (q *Queue) Wait(ev *Event) error { return q.WaitTimed(ev, nil) }

// WaitTimed is Wait that tells timed how long the queue waited (see
// DoTimed).
func (q *Queue) WaitTimed(ev *Event, timed func(start, end time.Time, err error)) error {
	if !ev.Recorded() {
		return fmt.Errorf("wait: %w", ErrNotRecorded)
	}
	return q.enqueue(op{wait: ev, timed: timed})
}

// Synchronize waits for everything enqueued so far and returns (and clears)
// the first error since the last clearing mark.
func (q *Queue) Synchronize() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	for q.running {
		q.idle.Wait()
	}
	err := q.err
	q.err = nil
	return err
}

// Query reports whether the queue is idle, and if so returns (and clears)
// its error state.
func (q *Queue) Query() (bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.running {
		return false, nil
	}
	err := q.err
	q.err = nil
	return true, err
}

// Close synchronizes, then refuses further work.
func (q *Queue) Close() error {
	err := q.Synchronize()
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	return err
}

// Event fires once, with an error or none.
type Event struct {
	mu     sync.Mutex
	armed  bool
	closed bool
	done   chan struct{}
	err    error    // written before done is closed
	then   []func() // run when it fires (OnFire)
}

// NewEvent returns an event that is not recorded yet.
func NewEvent() *Event { return &Event{done: make(chan struct{})} }

func (e *Event) arm() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return fmt.Errorf("%w: event is closed", ErrClosed)
	}
	if e.armed {
		return fmt.Errorf("%w: event is already recorded (events fire once; create another)", ErrClosed)
	}
	e.armed = true
	return nil
}

func (e *Event) disarm() {
	e.mu.Lock()
	e.armed = false
	e.mu.Unlock()
}

// Arm marks the event recorded by something other than a queue (a remote
// device that will fire it); it fails if it was recorded already.
func (e *Event) Arm() error { return e.arm() }

// Recorded reports whether the event was recorded.
func (e *Event) Recorded() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.armed
}

// Fire fires the event with err. Only the first call counts.
func (e *Event) Fire(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	select {
	case <-e.done:
		return
	default:
	}
	e.armed = true
	e.err = err
	close(e.done)
	then := e.then
	e.then = nil
	e.mu.Unlock()
	for _, f := range then {
		f()
	}
	e.mu.Lock() // for the deferred unlock
}

// OnFire makes f run when the event fires, on the goroutine that fires it,
// or at once on the caller's if it has fired. f must not block.
func (e *Event) OnFire(f func()) {
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

// Done is closed when the event fires.
func (e *Event) Done() <-chan struct{} { return e.done }

// Synchronize waits for the event and returns its error.
func (e *Event) Synchronize() error {
	if !e.Recorded() {
		return ErrNotRecorded
	}
	<-e.done
	return e.err
}

// Query reports whether the event fired, and its error.
func (e *Event) Query() (bool, error) {
	if !e.Recorded() {
		return false, ErrNotRecorded
	}
	select {
	case <-e.done:
		return true, e.err
	default:
		return false, nil
	}
}

// Close releases the event; waits already enqueued still see it fire.
func (e *Event) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return fmt.Errorf("%w: event closed twice", ErrClosed)
	}
	e.closed = true
	return nil
}
