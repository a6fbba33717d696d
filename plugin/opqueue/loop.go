package opqueue

import (
	"fmt"
	"sync"

	"github.com/goffload/offload/plugin"
)

// Loop is the in-order loop under a [Queue], for a kind whose operations are
// not Go functions. A GPU kind is one: a goroutine locked to its OS thread
// issues its operations to a stream. Such a kind runs them on a Loop of its
// own operation type T.
//
// A Loop holds the operations enqueued, the queue's error state and whether
// the queue is closed. It runs the operations one at a time, in order,
// through the [Runner] given to [Loop.Init]. They run on a goroutine of its
// own while it has work; an idle Loop holds no goroutine. An operation runs
// on the goroutine that enqueues it instead when the Loop is idle and inline
// ([Loop.SetInline]), or when asked ([Here], [HereOnly]). What is enqueued
// while an operation runs on its caller goes to the Loop's goroutine when it
// ends, after it. Nothing is left behind or run ahead.
//
// A Loop is a value to embed (or hold) in the kind's queue, made ready by
// Init. The zero Loop is not ready for use. A Loop must not be copied after
// Init. Its methods are safe for concurrent use.
type Loop[T any] struct {
	mu      sync.Mutex
	idle    sync.Cond // running became false
	ops     ring[T]
	running bool // an operation runs, or the goroutine is about to take one
	closed  bool
	inline  bool  // see SetInline
	err     error // first failure since the error state was last taken
	r       Runner[T]
	b       Binder // r's, if it is one
	// start is l.loop, made once. A go statement that calls a func value
	// without arguments allocates nothing for the call.
	start func()
}

type entry[T any] struct {
	o     T
	clear bool
}

// ring is a FIFO of entries whose storage is reused. Once it has grown to a
// backlog's size, enqueueing allocates and copies nothing. (A slice taken
// from the front would be copied whole each time it is full.)
type ring[T any] struct {
	buf  []entry[T]
	head int // the first entry
	n    int
	peak int // the most entries since the ring was last idle
}

// keptRing is the most entries an idle ring keeps room for.
const keptRing = 1024

func (r *ring[T]) len() int { return r.n }

func (r *ring[T]) push(e entry[T]) {
	if r.n == len(r.buf) {
		nb := make([]entry[T], max(8, 2*len(r.buf)))
		k := copy(nb, r.buf[r.head:])
		copy(nb[k:], r.buf[:r.head])
		r.buf, r.head = nb, 0
	}
	i := r.head + r.n
	if i >= len(r.buf) {
		i -= len(r.buf)
	}
	r.buf[i] = e
	r.n++
	r.peak = max(r.peak, r.n)
}

// pop takes the first entry; the ring is not empty.
func (r *ring[T]) pop() entry[T] {
	e := r.buf[r.head]
	r.buf[r.head] = entry[T]{}
	r.n--
	if r.head++; r.head == len(r.buf) || r.n == 0 {
		r.head = 0
	}
	return e
}

// idle drops the room of a ring that grew large and is now empty. It keeps it
// if the work since the ring was last idle filled a quarter of it. So a queue
// that takes a replayed task graph's operations at once (thousands) keeps its
// room. It does not grow it again by doubling, copying and zeroing on every
// replay. Once its work is smaller, its next idle drops it.
func (r *ring[T]) idle() {
	if len(r.buf) > keptRing && r.peak < len(r.buf)/4 {
		r.buf = nil
	}
	r.head, r.peak = 0, 0
}

// Runner runs the operations of a [Loop]. Run runs o with failed, the Loop's
// error state (nil if none). It decides what o does in that state: a normal
// operation is skipped, and an event's record fires with the error. An error
// it returns puts the Loop in the error state, unless it is in it already.
//
// The Loop calls Run for one operation at a time, in order. It calls it on
// its own goroutine or on an enqueuing one. Run must not call its own Loop's
// Synchronize, and must not panic.
type Runner[T any] interface {
	Run(o T, failed error) error
}

// Binder is implemented by a [Runner] whose operations need their goroutine
// set up first. A GPU kind locks it to its OS thread and makes its device's
// context current. The Loop calls Bind on a goroutine before it runs one or
// more operations there in a row. On its own goroutine it binds once for all
// it runs. It calls Unbind after them, on the same goroutine.
type Binder interface {
	Bind()
	Unbind()
}

// Where says where [Loop.Put] runs an operation.
type Where uint8

const (
	// Queued runs the operation on the Loop's goroutine, after everything
	// enqueued before it. While the Loop is idle and inline (SetInline), it
	// runs it on the caller's goroutine before Put returns.
	Queued Where = iota
	// Here runs the operation on the caller's goroutine before Put
	// returns if the Loop is idle, and as Queued otherwise.
	Here
	// HereOnly runs the operation on the caller's goroutine before Put
	// returns if the Loop is idle. Otherwise it leaves it: Put reports false
	// and the caller enqueues it another way.
	HereOnly
	// HereDrain is HereOnly whose caller, once the operation is done, also
	// runs the operations enqueued meanwhile. It runs them as the Loop's
	// goroutine would, until the Loop is idle. It does not hand them to a new
	// goroutine, a hand-off that wakes a sleeping thread first after a long
	// operation. It is for a caller with nothing else to do. An example is a
	// device process's reader whose role a standby took over while it ran a
	// kernel.
	HereDrain
	// Own runs the operation on the Loop's goroutine, after everything
	// enqueued before it, also while the Loop is inline. It is for an
	// operation that may end its goroutine (runtime.Goexit, a kernel
	// called on it): the Loop then fails with an error wrapping
	// plugin.ErrKernelFailed, unless Run put it in the error state first,
	// and goes on with the operations after it on a new goroutine.
	Own
)

// Init makes the Loop ready to run operations with r: empty, idle, open
// and not inline. It is called once, before any other method.
func (l *Loop[T]) Init(r Runner[T]) {
	l.idle.L = &l.mu
	l.r = r
	l.b, _ = r.(Binder)
	l.start = l.loop
}

// Put enqueues o, or runs it on the caller, as w says. With clear set, o
// takes the error state: Run gets it, and it is cleared for the operations
// after o. Put reports whether o ran on the caller. It fails only on a closed
// Loop, with an error wrapping plugin.ErrBadHandle.
//
// An operation run on the caller may end the caller's goroutine
// (runtime.Goexit, a kernel run there). The Loop then fails with an error
// wrapping plugin.ErrKernelFailed, unless Run put it in the error state
// first. It goes on with the operations after o on its own goroutine.
func (l *Loop[T]) Put(o T, w Where, clear bool) (bool, error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return false, fmt.Errorf("%w: queue is closed", plugin.ErrBadHandle)
	}
	if (w == Here || w == HereOnly || w == HereDrain || w == Queued && l.inline) && !l.running {
		// Nothing is queued or running: run o here, as the Loop's
		// goroutine would, with the Loop marked running meanwhile.
		l.running = true
		failed := l.take(clear)
		l.mu.Unlock()
		l.here(o, failed, w == HereDrain)
		return true, nil
	}
	if w == HereOnly || w == HereDrain {
		l.mu.Unlock()
		return false, nil
	}
	l.ops.push(entry[T]{o, clear})
	if !l.running {
		l.running = true
		go l.start()
	}
	l.mu.Unlock()
	return false, nil
}

// here runs o on the caller's goroutine, which has made the Loop running. It
// hands the Loop on when o is done, or when o ended the goroutine. With
// drain, if o returned, it runs what was enqueued meanwhile itself
// (HereDrain).
func (l *Loop[T]) here(o T, failed error, drain bool) {
	ran := false
	defer func() {
		l.mu.Lock()
		if !ran && l.err == nil {
			l.err = fmt.Errorf("%w: an operation ended its goroutine (runtime.Goexit)", plugin.ErrKernelFailed)
		}
		if drain && ran && l.ops.len() > 0 && l.drains(o) {
			l.mu.Unlock()
			l.loop() // the Loop stays running; loop makes it idle
			return
		}
		l.handOn()
		l.mu.Unlock()
	}()
	if l.b != nil {
		l.b.Bind()
		defer l.b.Unbind()
	}
	if err := l.r.Run(o, failed); err != nil {
		l.Fail(err)
	}
	ran = true
}

// drains says whether o's caller runs what was enqueued while o ran
// (HereDrain). The Runner says, if it is a Drainer; else it does.
func (l *Loop[T]) drains(o T) bool {
	d, ok := l.r.(Drainer[T])
	return !ok || d.Drain(o)
}

// Drainer is implemented by a [Runner] that decides per operation run with
// [HereDrain]. Drain(o) true: its caller goes on with the operations enqueued
// meanwhile. False: it hands them to the Loop's goroutine.
type Drainer[T any] interface {
	Drain(o T) bool
}

// handOn ends an operation run on a caller's goroutine. What was enqueued
// meanwhile (by it, or by another goroutine) goes to the Loop's goroutine,
// which stays running. Else the Loop is idle. Under l.mu.
func (l *Loop[T]) handOn() {
	if l.ops.len() > 0 {
		go l.start()
	} else {
		l.running = false
		l.idle.Broadcast()
	}
}

// take returns the error state an operation runs with. It clears it if the
// operation clears it. Under l.mu.
func (l *Loop[T]) take(clear bool) error {
	failed := l.err
	if clear {
		l.err = nil
	}
	return failed
}

// loop runs the Loop's operations until there are none. An operation that
// ends the goroutine (Own) fails the Loop, which goes on on another one.
func (l *Loop[T]) loop() {
	if l.b != nil {
		l.b.Bind()
		defer l.b.Unbind()
	}
	exited := true
	defer func() {
		if exited {
			l.mu.Lock()
			if l.err == nil {
				l.err = fmt.Errorf("%w: an operation ended its goroutine (runtime.Goexit)", plugin.ErrKernelFailed)
			}
			l.handOn()
			l.mu.Unlock()
		}
	}()
	for {
		l.mu.Lock()
		if l.ops.len() == 0 {
			l.running = false
			l.ops.idle()
			l.idle.Broadcast()
			l.mu.Unlock()
			exited = false
			return
		}
		e := l.ops.pop()
		failed := l.take(e.clear)
		l.mu.Unlock()
		// Run is called here and in here, not through a function of
		// their own: a frame less to copy when an operation grows the
		// goroutine's stack (a kernel's reflection does).
		if err := l.r.Run(e.o, failed); err != nil {
			l.Fail(err)
		}
	}
}

// Fail puts the Loop in the error state with err, unless it is in it.
func (l *Loop[T]) Fail(err error) {
	l.mu.Lock()
	if l.err == nil {
		l.err = err
	}
	l.mu.Unlock()
}

// SetInline makes operations Put as [Queued] while the Loop is idle run on
// the caller's goroutine, before Put returns. It is for a caller that waits
// for the queue right after anyway, as plugin.InlineQueue describes.
// Operations enqueued while earlier ones run still go to the Loop's
// goroutine.
func (l *Loop[T]) SetInline(on bool) {
	l.mu.Lock()
	l.inline = on
	l.mu.Unlock()
}

// Synchronize waits until every operation enqueued so far has run. It returns
// (and clears) the error state. An operation of the Loop must not call it: it
// would wait for itself.
func (l *Loop[T]) Synchronize() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.running {
		l.idle.Wait()
	}
	return l.take(true)
}

// Query reports whether the Loop is idle (nothing queued or running), and
// if so returns (and clears) its error state.
func (l *Loop[T]) Query() (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.running {
		return false, nil
	}
	return true, l.take(true)
}

// Idle reports whether nothing is queued or running. Unlike Query it leaves
// the error state alone. That is for a kind whose queue is done only once its
// device is done too (a GPU's stream), which it asks next.
func (l *Loop[T]) Idle() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.running
}

// TakeErr returns (and clears) the error state.
func (l *Loop[T]) TakeErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.take(true)
}

// Closed reports whether Close was called. It is for a kind that refuses work
// for a closed queue before it checks the work's arguments.
func (l *Loop[T]) Closed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// Close refuses further operations: Put fails with an error wrapping
// plugin.ErrBadHandle. What was enqueued before still runs (Synchronize waits
// for it). Close reports whether the Loop was open. A second Close reports
// false.
func (l *Loop[T]) Close() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	was := !l.closed
	l.closed = true
	return was
}
