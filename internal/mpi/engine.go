//go:build mpi

package mpi

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
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
	done chan error // gets the outcome, once
	fn   func() error // opExec's
	// Src, Tag and Buf are the sender, tag and data of a message handed to
	// a listener: Buf is filled once Wait returns nil.
	Src, Tag int
	Buf      []byte
}

type op = Req

// Wait waits until r completes, or abort is closed (then the operation is
// cancelled where MPI can, and ErrAborted returned).
func (r *Req) Wait(abort <-chan struct{}) error {
	select {
	case err := <-r.done:
		r.done <- err // a second Wait sees it too
		return err
	case <-abort:
		if eng != nil {
			eng.cancel(r)
		}
		return ErrAborted
	}
}

// Engine is this process's MPI: one goroutine, locked to its OS thread,
// makes every MPI call (MPI_THREAD_FUNNELED); other goroutines hand it
// operations and wait for them. Blocking MPI calls from several threads at
// once cost milliseconds per round trip where this costs microseconds.
type Engine struct {
	rank, size int
	version    string

	mu      sync.Mutex
	work    []*op
	cancels []*op
	tags    []int
	listen  func(r *Req)
	err     error
	finish  chan error
	kick    chan struct{}

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
		e := &Engine{kick: make(chan struct{}, 1)}
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

// Version is the MPI library's version string.
func (e *Engine) Version() string { return e.version }

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
	select {
	case e.kick <- struct{}{}:
	default:
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

// Abort ends every rank of the job (MPI_Abort).
func (e *Engine) Abort(code int) { cAbort(code) }

const (
	spinFor = 50 * time.Microsecond // keep polling this long after activity
	napMax  = time.Millisecond      // the longest nap when idle
	napBusy = 50 * time.Microsecond // the longest nap with operations under way
)

// progress is the goroutine that makes every MPI call.
func (e *Engine) progress(ready chan<- error) {
	runtime.LockOSThread() // for good: MPI belongs to this thread
	rank, size, err := cInit()
	if err != nil {
		ready <- err
		return
	}
	e.rank, e.size, e.version = rank, size, libraryVersion()
	ready <- nil
	timer := time.NewTimer(time.Hour)
	timer.Stop()
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
			continue
		}
		if now.Sub(last) < spinFor {
			continue
		}
		limit := napMax
		if len(e.live) > 0 {
			limit = napBusy
		}
		nap = min(max(2*nap, 10*time.Microsecond), limit)
		timer.Reset(nap)
		select {
		case <-e.kick:
			timer.Stop()
		case <-timer.C:
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
