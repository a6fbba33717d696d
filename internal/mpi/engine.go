//go:build mpi

package mpi

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
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

type op = Req

// waitSpin is how long Wait polls before it parks.
const waitSpin = 20 * time.Microsecond

// Wait waits until r completes, or abort is closed (then the operation is
// cancelled where MPI can, and ErrAborted returned).
func (r *Req) Wait(abort <-chan struct{}) error {
	for start := time.Now(); time.Since(start) < waitSpin; {
		select {
		case err := <-r.done:
			r.done <- err
			return err
		default:
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

// Engine is this process's MPI: one goroutine makes every MPI call; other
// goroutines hand it operations and wait for them. Blocking MPI calls from
// several threads at once cost milliseconds per round trip where this
// costs microseconds. The goroutine starts locked to its OS thread, which
// calls MPI_Init_thread; it asks for MPI_THREAD_SERIALIZED and, granted
// that, leaves the thread, so that it can hand its Go processor to the
// goroutines it wakes (locked, it could not, and they waited up to
// milliseconds to run); an MPI that grants only MPI_THREAD_FUNNELED keeps
// it on that thread.
type Engine struct {
	rank, size int
	locked     bool // MPI is called from its init thread only (no MPI_THREAD_SERIALIZED)

	mu      sync.Mutex
	work    []*op
	cancels []*op
	tags    []int
	listen  func(r *Req)
	err     error
	finish  chan error
	efd     int         // an eventfd that wakes a nap
	napping atomic.Bool // the progress goroutine naps

	// The progress goroutine's own.
	reqs      []request
	live      []*op
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
		efd, _, errno := syscall.Syscall(syscall.SYS_EVENTFD2, 0, syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
		if errno != 0 {
			engErr = fmt.Errorf("eventfd: %w", errno)
			return
		}
		e := &Engine{efd: int(efd)}
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
	return e.post(&op{kind: opSend, rank: rank, tag: tag, buf: buf})
}

// Recv starts receiving a message from rank with tag into buf, which must
// be its exact size or larger.
func (e *Engine) Recv(rank, tag int, buf []byte) *Req {
	return e.post(&op{kind: opRecv, rank: rank, tag: tag, buf: buf})
}

func (e *Engine) post(o *op) *Req {
	o.e = e
	o.done = make(chan error, 1)
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

func (e *Engine) cancel(o *op) {
	e.mu.Lock()
	e.cancels = append(e.cancels, o)
	e.mu.Unlock()
	e.poke()
}

func (e *Engine) poke() {
	if e.napping.Load() {
		one := [8]byte{1}
		syscall.Write(e.efd, one[:])
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

// How the progress goroutine waits. MPI has no way to sleep until either a
// message comes or another goroutine hands it work, so it polls: without a
// pause for spinFor after anything happened (yielding the CPU between
// polls, so that ranks sharing cores still run), then with naps on the
// thread itself, which work handed to it cuts short, growing to napMax, and
// after idleAfter without activity, naps of idleNap.
const (
	spinFor   = 200 * time.Microsecond
	napMax    = 50 * time.Microsecond
	idleAfter = 100 * time.Millisecond
	idleNap   = 2 * time.Millisecond
)

// progress is the goroutine that makes every MPI call.
func (e *Engine) progress(ready chan<- error) {
	runtime.LockOSThread() // MPI_Init_thread is called on this thread
	rank, size, serialized, err := cInit()
	if err != nil {
		ready <- err
		return
	}
	if serialized {
		// MPI may be called from any thread, one call at a time: this
		// goroutine alone calls it, and may move between threads.
		runtime.UnlockOSThread()
	}
	e.locked = !serialized
	e.rank, e.size = rank, size
	ready <- nil
	last, nap := time.Now(), time.Duration(0)
	var finishing time.Time
	for {
		e.mu.Lock()
		work, cancels, tags, listen, finish := e.work, e.cancels, e.tags, e.listen, e.finish
		e.work, e.cancels = nil, nil
		if finish != nil && e.err == nil {
			e.err = ErrFinalized
		}
		e.mu.Unlock()
		busy := len(work) > 0
		for _, o := range work {
			e.start(o)
		}
		for _, o := range cancels {
			for i, l := range e.live {
				if l == o {
					cCancel(&e.reqs[i])
				}
			}
		}
		if e.test() {
			busy = true
		}
		if listen != nil && finish == nil {
			for _, tag := range tags {
				for range 64 {
					var req request
					o, err := cProbe(tag, &req)
					if err != nil {
						e.failAll(err)
						break
					}
					if o == nil {
						break
					}
					busy = true
					o.done = make(chan error, 1)
					o.Src, o.Tag, o.Buf = o.rank, o.tag, o.buf
					e.reqs, e.live = append(e.reqs, req), append(e.live, o)
					listen(o)
				}
			}
		}
		if finish != nil {
			if finishing.IsZero() {
				finishing = time.Now()
			}
			if len(e.live) == 0 || time.Since(finishing) > 2*time.Second {
				for i := range e.live {
					cCancel(&e.reqs[i])
				}
				e.test()
				e.failAll(ErrFinalized)
				finish <- cFinalize()
				return
			}
		}
		now := time.Now()
		if busy {
			last, nap = now, 0
			if !e.locked {
				// Let the goroutines just readied run on this P now
				// (they sit in its run queue, where another P may not
				// look for them for a while).
				runtime.Gosched()
			}
			continue
		}
		idle := now.Sub(last)
		switch {
		case idle < spinFor:
			if e.locked {
				yield()
			} else {
				runtime.Gosched()
			}
		case idle < idleAfter || len(e.live) > 0:
			nap = min(max(2*nap, 5*time.Microsecond), napMax)
			e.nap(nap)
		default:
			e.nap(idleNap)
		}
	}
}

// Raw runs n rounds of a raw exchange with peer on tag, with blocking MPI
// calls on the progress goroutine (which does nothing else meanwhile): a
// ping-pong of size bytes, or with stream size bytes one way and one byte
// back. Both sides call it, one as initiator. It is a baseline for
// benchmarks, not a way to move data.
func (e *Engine) Raw(peer, tag, n, size int, stream, initiator bool) error {
	o := &op{kind: opExec, fn: func() error { return cRaw(peer, tag, n, size, stream, initiator) }}
	return e.post(o).Wait(nil)
}

// yield gives the CPU to another thread or process that wants it.
func yield() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }

// preciseSleeps makes this thread's sleeps end on time, not up to 50µs
// late (PR_SET_TIMERSLACK). nap sets it each time: unless MPI keeps it on
// one thread, the progress goroutine moves between threads.
func preciseSleeps() { syscall.Syscall(syscall.SYS_PRCTL, 29, 1000, 0) }

// nap sleeps on this thread for d at most, or until poke: an eventfd that
// poke writes to while the progress goroutine naps (Go's own timers would
// round a short sleep up to a millisecond).
func (e *Engine) nap(d time.Duration) {
	e.napping.Store(true)
	e.mu.Lock()
	pending := len(e.work) + len(e.cancels)
	e.mu.Unlock()
	if pending == 0 {
		preciseSleeps()
		ts := syscall.NsecToTimespec(d.Nanoseconds())
		fds := [1]pollFd{{fd: int32(e.efd), events: 1}} // POLLIN
		syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&fds[0])), 1, uintptr(unsafe.Pointer(&ts)), 0, 0, 0)
	}
	e.napping.Store(false)
	var b [8]byte
	syscall.Read(e.efd, b[:])
}

type pollFd struct {
	fd             int32
	events, revent int16
}

// start posts o.
func (e *Engine) start(o *op) {
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

func (o *op) what() string {
	switch o.kind {
	case opSend:
		return fmt.Sprintf("sending %d bytes to rank %d", len(o.buf), o.rank)
	case opRecv:
		return fmt.Sprintf("receiving %d bytes from rank %d", len(o.buf), o.rank)
	}
	return fmt.Sprintf("receiving a message of %d bytes from rank %d", len(o.buf), o.rank)
}

func (e *Engine) finishOp(o *op, err error) {
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
