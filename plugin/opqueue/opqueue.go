// Package opqueue gives a device kind the in-order queues and one-shot events
// that the plugin contract asks for. A kind whose operations are Go functions
// need not write its own. Such a kind is a CPU kind, or the server side of a
// device process. For a kind whose operations are not Go functions, it gives
// the in-order loop under them ([Loop]). The host kind and the remote kind's
// device processes are built on it. So is the out-of-module example kind,
// plugin/plugintest/testdata/outside. The CUDA kind's queues run on a Loop.
//
// A [Queue] runs the functions enqueued on it in order, one at a time. It
// runs them on a goroutine of its own that lives while the queue has work; an
// idle queue holds no goroutine. An [Event] fires once, with an error or
// none. A queue fires it when it gets to the point where it was recorded
// ([Queue.Record]). Other queues wait for it ([Queue.Wait]), and so can the
// host ([Event.Synchronize], [Event.Query], [Event.OnFire]).
//
// An operation that returns an error puts its queue in an error state. The
// operations after it are skipped, and events recorded meanwhile fire with
// the error. This lasts until a synchronising mark takes the error and clears
// it. Such marks are [Queue.Synchronize], [Queue.Query] once the queue is
// idle, and a [Queue.Mark] with clear set. This is the error state that
// [plugin.Queue] describes.
//
// # Building a kind on it
//
// A kind's [plugin.Queue] holds a *Queue. Its Submit, Retrieve, Exchange and
// Launch check their arguments and resolve device memory when they are
// called. So a bad pointer is an error at once. They then enqueue a function
// that does the copy or runs the kernel. They enqueue it with [Queue.Do], or
// [Queue.DoTimed] to report times to a [plugin.Tracer]. Its Record and Wait
// unwrap the kind's event and call [Queue.Record] and [Queue.Wait]. Its
// Synchronize, Query and Close are the Queue's. [Queue.SetInline] gives it
// [plugin.InlineQueue].
//
// A kind's [plugin.Event] holds or embeds an *Event. The Event's Synchronize,
// Query and Close are plugin.Event's, and its OnFire is
// [plugin.FireNotifier]'s. Beside it the kind keeps what else it needs. One
// such thing is the device the event belongs to, so that a queue refuses
// another device's event:
//
//	type queue struct {
//		d *device
//		q *opqueue.Queue
//	}
//
//	func (q *queue) Submit(dst plugin.Ptr, src []byte) error {
//		b, err := q.d.bytes(dst, int64(len(src))) // checked now
//		if err != nil {
//			return err
//		}
//		return q.q.Do(func() error { copy(b, src); return nil }) // run later
//	}
//
//	func (q *queue) Synchronize() error { return q.q.Synchronize() }
//
//	type event struct {
//		d              *device
//		*opqueue.Event // Synchronize, Query, Close, OnFire
//	}
//
// plugin/plugintest/testdata/outside/queue.go is a whole kind's queue and
// event written this way, in a module of its own.
//
// Errors wrap the plugin contract's. Work for a closed queue wraps
// [plugin.ErrBadHandle]. So does an event recorded twice or after it was
// closed. A wait for an event never recorded wraps [plugin.ErrNotRecorded],
// and so do its Synchronize and Query. A kind adds its device's name.
//
// # A kind whose operations are not Go functions
//
// A [Queue] is a [Loop] of Go functions. Some kinds' operations are data that
// the kind issues itself. A GPU kind is one: it issues them to a stream from
// a goroutine locked to its OS thread. Such a kind holds a Loop of its own
// operation type and gives it a [Runner]. It may give a [Binder] too, to set
// up the goroutine that issues. It gets the same order, error state, inline
// running and hand-over as a Queue, with its own issuing. plugins/cuda's
// queue is built so.
//
// Operations run on the queue's goroutine, one after another. One that blocks
// holds up the queue. One must not call its own queue's Synchronize or Close:
// it would wait for itself. And one must not panic. [plugin.Kernel.Launch]
// turns a kernel's panic into an error; anything else that may panic must
// recover.
package opqueue

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goffload/offload/internal/waitpoll"
	"github.com/goffload/offload/plugin"
)

type op struct {
	run    func() error     // a normal operation, skipped after a failure
	call   func(Call) error // or one called with c (DoCallTimed)
	c      Call
	mark   func(error) error // runs whatever happened before; gets the error state
	wait   *Event
	record *Event
	// timed, if set, is told when a run or wait operation ran, and how it
	// ended. Skipped operations are not told.
	timed func(start, end time.Time, err error)
	// exited, if set, is why run ended its goroutine (runtime.Goexit). run
	// sets it before the goroutine unwinds (see RunHereExit).
	exited *error
	// drain, if set, says whether the goroutine that ran the operation here
	// runs what was enqueued meanwhile too (RunHereExitDrain).
	drain func() bool
}

// Queue runs operations in order, on a goroutine of its own while it has
// work. Make one with [New]: the zero Queue is not ready for use. Its methods
// are safe for concurrent use. Operations enqueued by different goroutines at
// once run in the order the queue got them.
type Queue struct {
	l Loop[op]
	// wake is where an event that the queue's wait operation waits for says
	// it fired (await). There is one channel for the queue's life, as its
	// operations run one at a time. So a wait makes no channel of the
	// event's.
	wake chan struct{}
}

// New returns an empty, idle queue.
func New() *Queue {
	q := &Queue{wake: make(chan struct{}, 1)}
	q.l.Init((*runner)(q))
	return q
}

// awaitPoll is how long a queue's wait for an event that has not fired
// polls for it before it parks: an event of another queue of the process,
// which a goroutine running on another core fires within microseconds
// where the two queues' work is small. A parked queue's goroutine is woken
// by the firing one, a wake-up of an idle thread first (5-50 µs here).
// Where the machine is crowded (waitpoll.Crowded), or the process runs on
// one processor (the firing goroutine could not run meanwhile), the queue
// parks at once.
const awaitPoll = 50 * time.Microsecond

// await waits for ev to fire, for the queue's wait operation. It returns ev's
// error.
func (q *Queue) await(ev *Event) error {
	if !ev.fired.Load() && !waitpoll.Crowded() && runtime.GOMAXPROCS(0) > 1 {
		waitpoll.Until(awaitPoll, 0, 64, ev.fired.Load)
	}
	ev.mu.Lock()
	if !ev.fired.Load() {
		ev.thenLocked(fireCall{fx: wakeUp, x: q.wake})
		ev.mu.Unlock()
		<-q.wake
		ev.mu.Lock()
	}
	defer ev.mu.Unlock()
	return ev.err
}

// wakeUp tells a queue waiting in await (x is its wake channel).
func wakeUp(x any) { x.(chan struct{}) <- struct{}{} }

// runner is the Queue as its Loop's Runner.
type runner Queue

// Run runs o with the error state failed (Runner).
func (r *runner) Run(o op, failed error) error {
	var err error
	var start time.Time
	if o.timed != nil {
		start = time.Now()
	}
	switch {
	case o.record != nil:
		o.record.Fire(failed)
	case o.wait != nil:
		if werr := (*Queue)(r).await(o.wait); werr != nil && failed == nil {
			err = fmt.Errorf("waited-for event failed: %w", werr)
		}
		if o.timed != nil {
			o.timed(start, time.Now(), err)
		}
	case o.mark != nil:
		err = o.mark(failed)
	case failed == nil:
		switch {
		case o.exited != nil:
			err = r.runExit(o)
		case o.call != nil:
			err = o.call(o.c)
		default:
			err = o.run()
		}
		if o.timed != nil {
			o.timed(start, time.Now(), err)
		}
	}
	return err
}

// Drain says whether the caller that ran o here runs the operations
// enqueued meanwhile too (Drainer).
func (r *runner) Drain(o op) bool { return o.drain != nil && o.drain() }

// runExit runs o, which may end its goroutine (RunHereExit, DoCallExit). If
// it does, the queue fails with why o says. The Loop hands the queue on.
func (r *runner) runExit(o op) error {
	ran := false
	defer func() {
		if !ran && *o.exited != nil {
			r.l.Fail(*o.exited)
		}
	}()
	var err error
	if o.call != nil {
		err = o.call(o.c)
	} else {
		err = o.run()
	}
	ran = true
	return err
}

func (q *Queue) enqueue(o op) error {
	_, err := q.l.Put(o, Queued, false)
	return err
}

// SetInline makes operations enqueued while the queue is idle run on the
// enqueueing goroutine. They run before the enqueueing call returns, so a
// wait then blocks it. It is for a caller that waits for the queue right
// after anyway, as plugin.InlineQueue describes. Operations enqueued while
// earlier ones run still go to the queue's goroutine.
func (q *Queue) SetInline(on bool) { q.l.SetInline(on) }

// Do enqueues fn. It runs after everything enqueued before it. It is skipped
// if one of those failed since the last clearing mark. An error it returns
// puts the queue in the error state. Do fails only on a closed queue.
func (q *Queue) Do(fn func() error) error { return q.enqueue(op{run: fn}) }

// DoTimed is Do that tells timed when fn started and ended, and its error. It
// tells it on the queue's goroutine right after fn returns, and not if fn is
// skipped. A nil timed is Do.
func (q *Queue) DoTimed(fn func() error, timed func(start, end time.Time, err error)) error {
	return q.enqueue(op{run: fn, timed: timed})
}

// A Call is what an operation enqueued with DoCallTimed is called with. It
// holds the values the operation needs, in the queue rather than in a
// closure.
type Call struct {
	X, Y, Z any
	Args    []plugin.Arg
	// Words are numbers the operation needs: device addresses, sizes.
	Words [3]uint64
}

// DoCallTimed is DoTimed of fn called with c. Some operations' state is
// pointers and interfaces: a kernel, its arguments, its device. Such an
// operation costs no allocation this way. fn is a function of the package
// that enqueues it, not a closure.
func (q *Queue) DoCallTimed(fn func(Call) error, c Call, timed func(start, end time.Time, err error)) error {
	return q.enqueue(op{call: fn, c: c, timed: timed})
}

// DoCallExit is DoCallTimed for an fn that may end its goroutine with
// runtime.Goexit (a kernel called on it). fn runs on the queue's own
// goroutine, also while the queue is inline. If it ends it, the queue fails
// with *exited, which fn sets in a deferred call (else with an error
// wrapping plugin.ErrKernelFailed), and goes on with its next operations
// on a new goroutine.
func (q *Queue) DoCallExit(fn func(Call) error, c Call, exited *error, timed func(start, end time.Time, err error)) error {
	_, err := q.l.Put(op{call: fn, c: c, exited: exited, timed: timed}, Own, false)
	return err
}

// RunHere runs fn on the calling goroutine, before RunHere returns, if the
// queue is idle (nothing queued or running). It runs it exactly as the
// queue's goroutine would have run it next, timed as DoTimed times it. It
// reports whether it did. If the queue is busy it does nothing, and the
// caller enqueues fn as usual (Do, DoTimed).
//
// It is for a caller that would otherwise hand short work to the queue's
// goroutine. The goroutine that has the work does it, with no hand-off. It
// may run it on data it holds only for the call. fn must not wait for
// anything that only the caller can bring about. Operations enqueued while fn
// runs go to the queue's goroutine, after fn.
func (q *Queue) RunHere(fn func() error, timed func(start, end time.Time, err error)) (bool, error) {
	return q.l.Put(op{run: fn, timed: timed}, HereOnly, false)
}

// RunHereExit is RunHere for a fn that may end the calling goroutine with
// runtime.Goexit (a kernel called on it). If it does, the queue fails with
// *exited, which fn sets in a deferred call. The queue goes on with its next
// operations on the queue's goroutine. Only RunHere's path runs fn so. A fn
// enqueued (false) must not end its goroutine.
func (q *Queue) RunHereExit(fn func() error, exited *error, timed func(start, end time.Time, err error)) (bool, error) {
	return q.l.Put(op{run: fn, timed: timed, exited: exited}, HereOnly, false)
}

// RunHereExitDrain is RunHereExit whose caller may also run the operations
// enqueued while fn ran. It does so if fn returns and drain then reports
// true, until the queue is idle ([HereDrain]). It does not hand them to a new
// goroutine. The case is a device process's reader that ran a long kernel
// while a standby took over its role. It has nothing else to do, so it
// answers the sync mark queued behind the kernel itself.
func (q *Queue) RunHereExitDrain(fn func() error, exited *error, timed func(start, end time.Time, err error), drain func() bool) (bool, error) {
	return q.l.Put(op{run: fn, timed: timed, exited: exited, drain: drain}, HereDrain, false)
}

// MarkHere is Mark that runs fn on the calling goroutine, before MarkHere
// returns, if the queue is idle (as RunHere does). Otherwise it enqueues it.
// A mark's function is the same wherever it runs.
func (q *Queue) MarkHere(clear bool, fn func(failed error) error) error {
	_, err := q.l.Put(op{mark: fn}, Here, clear)
	return err
}

// Mark enqueues fn to run in order even after a failure. fn receives the
// first error since the last clearing mark (nil if none). Mark clears it if
// clear is set. An error fn returns puts the queue in the error state. Record
// is a mark that fires an event. A device process uses Mark to answer a
// synchronize message in queue order.
func (q *Queue) Mark(clear bool, fn func(failed error) error) error {
	_, err := q.l.Put(op{mark: fn}, Queued, clear)
	return err
}

// Record makes ev fire when everything enqueued before it is done. It fires
// with the queue's error state, if any. An event is recorded once. A second
// Record of it, or one of a closed event, fails with an error wrapping
// plugin.ErrBadHandle.
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

// Wait holds back everything enqueued after it until ev has fired. If ev
// carries an error, the queue enters the error state with it. ev may be
// recorded on any queue (or armed with [Event.Arm]). One that is not yet
// recorded is refused with an error wrapping plugin.ErrNotRecorded.
func (q *Queue) Wait(ev *Event) error { return q.WaitTimed(ev, nil) }

// WaitTimed is Wait that tells timed how long the queue waited (see
// DoTimed).
func (q *Queue) WaitTimed(ev *Event, timed func(start, end time.Time, err error)) error {
	if !ev.Recorded() {
		return fmt.Errorf("wait: %w", plugin.ErrNotRecorded)
	}
	return q.enqueue(op{wait: ev, timed: timed})
}

// Synchronize waits for everything enqueued so far. It returns (and clears)
// the first error since the last clearing mark. An operation of the queue
// must not call it.
func (q *Queue) Synchronize() error { return q.l.Synchronize() }

// Query reports whether the queue is idle, and if so returns (and clears)
// its error state.
func (q *Queue) Query() (bool, error) { return q.l.Query() }

// Close synchronizes, then refuses further work with errors wrapping
// plugin.ErrBadHandle.
func (q *Queue) Close() error {
	err := q.l.Synchronize()
	q.l.Close()
	return err
}

// Event fires once, with an error or none. It is recorded (armed) before it
// fires. [Queue.Record] records it, or [Event.Arm] for an event that
// something other than a queue fires. Make one with [NewEvent], or use the
// zero Event. (As a field of a kind's own event, it needs one allocation for
// both.) Its methods are safe for concurrent use. Some events cost no
// allocation but their own. Such an event has one OnFire, and nobody waits on
// it with Done or Synchronize before it fires.
type Event struct {
	mu     sync.Mutex
	armed  bool
	closed bool
	fired  atomic.Bool   // set under mu; read without it by a wait that polls (await)
	done   chan struct{} // made by the first wait (Done), closed when it fires
	err    error         // written before fired is set
	then   []fireCall    // run when it fires (OnFire, OnFireCall)
	then1  [2]fireCall   // then's first
}

// NewEvent returns an event that is not recorded yet.
func NewEvent() *Event { return new(Event) }

func (e *Event) arm() error {
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

func (e *Event) disarm() {
	e.mu.Lock()
	e.armed = false
	e.mu.Unlock()
}

// Arm marks the event recorded without a queue. It is for an event that
// something else will fire with [Event.Fire]. An example is a device in
// another process that says when its event fired. Arm fails, as Record does,
// if the event was recorded already or is closed. The caller then owns the
// firing: an armed event that is never fired blocks its waiters for ever. A
// kind that records its events on a Queue does not need Arm.
func (e *Event) Arm() error { return e.arm() }

// Recorded reports whether the event was recorded (or armed, or fired).
func (e *Event) Recorded() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.armed
}

// Fire fires the event with err (nil: without error), and marks it recorded
// if it was not. Only the first firing counts. A queue that gets to a Record
// of an event fired already leaves it as it is. A kind that records its
// events on a Queue does not call Fire. It is for events armed with
// [Event.Arm], and for firing an event early on purpose.
func (e *Event) Fire(err error) {
	e.mu.Lock()
	if e.fired.Load() {
		e.mu.Unlock()
		return
	}
	e.armed = true
	e.err = err
	e.fired.Store(true)
	if e.done != nil {
		close(e.done)
	}
	then := e.then
	e.then = nil
	e.mu.Unlock()
	for i, c := range then {
		then[i] = fireCall{}
		c.run()
	}
}

// OnFire makes f run when the event fires, on the goroutine that fires it.
// For a recorded event, that is a queue's. If the event has fired, f runs at
// once on the caller's goroutine (plugin.FireNotifier). f must not block.
func (e *Event) OnFire(f func()) { e.onFire(fireCall{f: f}) }

// OnFireCall is OnFire of f(x). A caller whose f would be a closure over x
// passes a function and x instead. It allocates nothing (x a pointer).
func (e *Event) OnFireCall(f func(x any), x any) { e.onFire(fireCall{fx: f, x: x}) }

// fireCall is what an event runs when it fires: f, or fx(x).
type fireCall struct {
	f  func()
	fx func(any)
	x  any
}

func (c fireCall) run() {
	if c.f != nil {
		c.f()
		return
	}
	c.fx(c.x)
}

func (e *Event) onFire(c fireCall) {
	e.mu.Lock()
	if e.fired.Load() {
		e.mu.Unlock()
		c.run()
		return
	}
	e.thenLocked(c)
	e.mu.Unlock()
}

// thenLocked adds c to what runs when e fires, which it has not. e.mu is
// held.
func (e *Event) thenLocked(c fireCall) {
	if e.then == nil {
		e.then = e.then1[:0]
	}
	e.then = append(e.then, c)
}

// Done is closed when the event fires. It is never closed for an event
// that is not recorded (and not fired).
func (e *Event) Done() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done == nil {
		e.done = make(chan struct{})
		if e.fired.Load() {
			close(e.done)
		}
	}
	return e.done
}

// Synchronize waits for the event and returns its error. An event never
// recorded returns plugin.ErrNotRecorded.
func (e *Event) Synchronize() error {
	e.mu.Lock()
	armed, fired, err := e.armed, e.fired.Load(), e.err
	e.mu.Unlock()
	switch {
	case fired:
		return err
	case !armed:
		return plugin.ErrNotRecorded
	}
	return e.wait()
}

// wait waits for the event to fire, recorded or not yet. It returns its
// error.
func (e *Event) wait() error {
	<-e.Done()
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

// Query reports whether the event fired, and its error if so. An event never
// recorded returns plugin.ErrNotRecorded.
func (e *Event) Query() (bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.armed {
		return false, plugin.ErrNotRecorded
	}
	return e.fired.Load(), e.err
}

// Close releases the event: it can no longer be recorded. Closing it again
// fails with an error wrapping plugin.ErrBadHandle. Waits already enqueued,
// and a Record already enqueued, still see it fire.
func (e *Event) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return fmt.Errorf("%w: event closed twice", plugin.ErrBadHandle)
	}
	e.closed = true
	return nil
}
