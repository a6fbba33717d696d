//go:build mpi

package mpi

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// ErrFinalized is returned by operations after Finalize.
var ErrFinalized = errors.New("MPI finalized")

// ErrAborted is returned by a Wait that its abort channel ended.
var ErrAborted = errors.New("MPI operation abandoned")

type opKind uint8

const (
	opSend opKind = iota
	opRecv
	opProbed
	opExec
)

// Req is one non-blocking operation: a send, a receive, or a message that a
// listener was handed. Wait for it with Wait.
type Req struct {
	kind opKind
	rank int // the other side
	tag  int
	buf  []byte
	pin  runtime.Pinner
	e    *Engine
	done chan error   // gets the outcome, once
	fn   func() error // opExec's
	// Src, Tag and Buf are the sender, tag and data of a message handed to
	// a listener: Buf is filled once Wait returns nil.
	Src, Tag int
	Buf      []byte
}

// waitSpin is how long Wait polls before it parks.
const waitSpin = 20 * time.Microsecond

// Wait waits until r completes, or abort is closed (then the operation is
// cancelled where MPI can, and ErrAborted returned). While it waits it
// makes MPI's progress itself if no other goroutine does (Engine.Poll), so
// that a send or receive completes with no hand-off between goroutines.
func (r *Req) Wait(abort <-chan struct{}) error {
	for start := time.Now(); time.Since(start) < waitSpin; {
		if r.Done() {
			break
		}
		if r.e == nil || !r.e.Poll(waitSpin-time.Since(start), r.Done) {
			runtime.Gosched()
		}
	}
	select {
	case err := <-r.done:
		r.done <- err // a second Wait sees it too
		return err
	case <-abort:
		if r.e != nil {
			r.e.cancel(r)
		}
		return ErrAborted
	}
}

// Done reports whether r has completed (Wait then returns at once).
func (r *Req) Done() bool { return len(r.done) > 0 }

// Engine is this process's MPI. Under MPI_THREAD_SERIALIZED (which it
// asks for) any goroutine may make the MPI calls, one at a time: the one
// that holds the role. A goroutine that starts a send or a receive makes
// its MPI call itself when the role is free (Send, Recv, TrySend), and a
// goroutine that waits for its operation makes MPI's progress itself while
// it waits (Req.Wait, Poll): a small send is done before Send returns, and
// a large one completes on the goroutine that waits for it, with no
// hand-off. At most one goroutine polls at a time; the others wait for it.
//
// The progress goroutine makes progress when no one else does: for
// operations whose goroutines parked, and for the messages listeners get. It starts locked to its OS thread, which calls MPI_Init_thread;
// granted MPI_THREAD_SERIALIZED it leaves the thread, so that it can hand
// its Go processor to the goroutines it wakes (locked, it could not, and
// they waited up to milliseconds to run). An MPI that grants only
// MPI_THREAD_FUNNELED keeps it on that thread, and it alone calls MPI:
// other goroutines hand it their operations, as every goroutine did before
// the role.
type Engine struct {
	rank, size int
	locked     bool // MPI is called from its init thread only (no MPI_THREAD_SERIALIZED)

	// role is held by the goroutine making MPI calls; it guards the
	// role's own fields below. Lock order: role, then mu; a listener runs
	// with role held.
	role   sync.Mutex
	poller atomic.Bool                 // a goroutine other than the progress goroutine polls (Poll)
	active atomic.Int64                // when an MPI call last completed something (UnixNano)
	quiet  atomic.Pointer[func() bool] // SetQuiet's

	mu      sync.Mutex
	work    []*Req
	cancels []*Req
	tags    []int
	listen  func(r *Req)
	err     error
	finish  chan error
	napper  *napper     // how the progress goroutine naps; poke wakes it
	napping atomic.Bool // the progress goroutine naps

	// The role's own.
	final     bool // MPI_Finalize was called
	reqs      []request
	live      []*Req
	idx, errs []cint
}

var (
	once   sync.Once
	eng    *Engine
	engErr error
)

// Init starts MPI (once per process; later calls return the same engine).
func Init() (*Engine, error) {
	once.Do(func() {
		// This engine yields and naps itself; OpenMPI's own yielding in
		// every progress call (its default when a node is oversubscribed)
		// made each round trip ten times slower on top of it.
		os.Setenv("OMPI_MCA_mpi_yield_when_idle", "0")
		n, err := newNapper()
		if err != nil {
			engErr = err
			return
		}
		e := &Engine{napper: n}
		ready := make(chan error)
		go e.progress(ready)
		if err := <-ready; err != nil {
			engErr = err
			return
		}
		eng = e
	})
	return eng, engErr
}

// Rank is this process's rank in MPI_COMM_WORLD.
func (e *Engine) Rank() int { return e.rank }

// Size is the number of ranks in MPI_COMM_WORLD.
func (e *Engine) Size() int { return e.size }

// SetQuiet makes the progress goroutine nap instead of spinning while
// quiet reports true: for a process whose cores are computing, where a
// spinning poller would take one from the work.
func (e *Engine) SetQuiet(quiet func() bool) { e.quiet.Store(&quiet) }

// spinOK reports whether the progress goroutine may spin now.
func (e *Engine) spinOK() bool {
	q := e.quiet.Load()
	return q == nil || !(*q)()
}

// Listen hands fn every message with one of tags, from any rank, in the
// order MPI matches them (per sender, the order they were sent): fn runs on
// the progress goroutine and must not block; the message's data is there
// once its Wait returns.
func (e *Engine) Listen(fn func(r *Req), tags ...int) {
	e.mu.Lock()
	e.listen, e.tags = fn, tags
	e.mu.Unlock()
	e.poke()
}

// Send starts sending buf to rank with tag; buf must stay untouched until
// the send completes.
func (e *Engine) Send(rank, tag int, buf []byte) *Req {
	return e.post(&Req{kind: opSend, rank: rank, tag: tag, buf: buf})
}

// TrySend starts sending buf to rank with tag if the calling goroutine can
// make the MPI call now, without waiting for the role; it returns nil if it
// cannot (nothing was sent). buf must stay untouched until the send
// completes. Sends keep their order whichever way they start.
func (e *Engine) TrySend(rank, tag int, buf []byte) *Req {
	o := &Req{kind: opSend, rank: rank, tag: tag, buf: buf, e: e, done: make(chan error, 1)}
	if !e.startHere(o) {
		return nil
	}
	return o
}

// Recv starts receiving a message from rank with tag into buf, which must
// be its exact size or larger.
func (e *Engine) Recv(rank, tag int, buf []byte) *Req {
	return e.post(&Req{kind: opRecv, rank: rank, tag: tag, buf: buf})
}

// post starts o: on the calling goroutine if the role is free (startHere),
// else by handing it to whoever makes MPI calls next.
func (e *Engine) post(o *Req) *Req {
	o.e = e
	o.done = make(chan error, 1)
	if e.startHere(o) {
		return o
	}
	e.mu.Lock()
	if e.err != nil {
		err := e.err
		e.mu.Unlock()
		o.done <- err
		return o
	}
	e.work = append(e.work, o)
	e.mu.Unlock()
	e.poke()
	return o
}

// startHere starts o on the calling goroutine, and completes what it can,
// if the role is free; it reports whether it did. What other goroutines
// handed over is started first: MPI keeps sends from one rank to another
// on a tag in the order they started.
func (e *Engine) startHere(o *Req) bool {
	if e.locked || !e.role.TryLock() {
		return false
	}
	defer e.role.Unlock()
	e.mu.Lock()
	err, work := e.err, e.work
	e.work = nil
	e.mu.Unlock()
	if e.final {
		err = ErrFinalized
	}
	for _, w := range work {
		if e.final {
			e.finishOp(w, err)
		} else {
			e.start(w)
		}
	}
	if err != nil {
		o.done <- err
		return true
	}
	e.start(o)
	if o.kind != opExec && e.test() {
		e.active.Store(time.Now().UnixNano())
	}
	return true
}

func (e *Engine) cancel(o *Req) {
	e.mu.Lock()
	e.cancels = append(e.cancels, o)
	e.mu.Unlock()
	e.poke()
}

func (e *Engine) poke() {
	if e.napping.Load() {
		e.napper.arm(0)
	}
}

// Finalize waits a while for the operations under way, cancels the rest
// and ends MPI; later operations fail with ErrFinalized.
func (e *Engine) Finalize() error {
	e.mu.Lock()
	if e.finish != nil {
		e.mu.Unlock()
		return fmt.Errorf("%w twice", ErrFinalized)
	}
	ch := make(chan error, 1)
	e.finish = ch
	e.mu.Unlock()
	e.poke()
	return <-ch
}

// start posts o.
func (e *Engine) start(o *Req) {
	if o.kind == opExec {
		o.done <- o.fn()
		return
	}
	if len(o.buf) > 0 {
		o.pin.Pin(unsafe.SliceData(o.buf))
	}
	if len(o.buf) > maxCount {
		e.finishOp(o, fmt.Errorf("MPI message of %d bytes: more than %d", len(o.buf), maxCount))
		return
	}
	var req request
	var err error
	if o.kind == opSend {
		err = cIsend(o, &req)
	} else {
		err = cIrecv(o, &req)
	}
	if err != nil {
		e.finishOp(o, err)
		return
	}
	e.reqs, e.live = append(e.reqs, req), append(e.live, o)
}

// maxCount is the largest message: MPI counts are C ints. Callers chunk.
const maxCount = 1<<31 - 1

// test completes what it can of the live operations; it reports whether
// any completed.
func (e *Engine) test() bool {
	n := len(e.reqs)
	if n == 0 {
		return false
	}
	if cap(e.idx) < n {
		e.idx, e.errs = make([]cint, 2*n), make([]cint, 2*n)
	}
	out, err := cTestsome(e.reqs, e.idx[:n], e.errs[:n])
	if err != nil {
		e.failAll(err)
		return true
	}
	if out == 0 {
		return false
	}
	for i := 0; i < out; i++ {
		j := int(e.idx[i])
		o := e.live[j]
		var err error
		if !cSuccess(e.errs[i]) {
			err = mpiErr(o.what(), e.errs[i])
		}
		e.finishOp(o, err)
		e.live[j] = nil
	}
	// Keep the rest in order, so that the oldest are tested first.
	k := 0
	for j, o := range e.live {
		if o != nil {
			e.live[k], e.reqs[k] = o, e.reqs[j]
			k++
		}
	}
	clear(e.live[k:])
	e.live, e.reqs = e.live[:k], e.reqs[:k]
	return true
}

func (o *Req) what() string {
	switch o.kind {
	case opSend:
		return fmt.Sprintf("sending %d bytes to rank %d", len(o.buf), o.rank)
	case opRecv:
		return fmt.Sprintf("receiving %d bytes from rank %d", len(o.buf), o.rank)
	}
	return fmt.Sprintf("receiving a message of %d bytes from rank %d", len(o.buf), o.rank)
}

func (e *Engine) finishOp(o *Req, err error) {
	o.pin.Unpin()
	o.done <- err
}

// failAll fails every live operation: MPI itself failed.
func (e *Engine) failAll(err error) {
	e.mu.Lock()
	if e.err == nil || e.err == ErrFinalized {
		e.err = err
	}
	work := e.work
	e.work = nil
	e.mu.Unlock()
	for _, o := range e.live {
		e.finishOp(o, err)
	}
	for _, o := range work {
		e.finishOp(o, err)
	}
	e.live, e.reqs = e.live[:0], e.reqs[:0]
}
