package workpool

// Workers that poll for their next chunk. A worker parked on the jobs
// channel is woken by the loop that hands it a chunk: on a virtual machine
// whose other CPU sleeps, that wake-up takes 0.1–0.7 ms before the chunk
// starts, and the loop waits for its slowest chunk. A kernel's loops follow
// each other within microseconds where nothing waits between them (a
// replayed graph's kernels on a device process), so a worker that has just
// run a chunk polls for the next one, for a while, before it parks: the
// loop hands it the chunk through its hand with no wake-up.
//
// Polling takes a core. A process polls only while SetSpinWhile's test
// holds: a device process sets it to "a replayed graph's kernel runs in
// this process", a time its link readers do not poll
// (plugins/remote/serve.go), so that the process has one polling role at a
// time and its workers poll only on the cores its kernels have anyway.

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/goffload/offload/internal/waitpoll"
)

// spinWhile is SetSpinWhile's test; nil: workers never poll.
var spinWhile atomic.Pointer[func() bool]

// SetSpinWhile makes the workers of every pool of this process poll for
// their next chunk after running one, if f reports true then: for
// waitpoll.Linger and on while f reports true (SpinFor at most), instead
// of parking at once; and a loop poll for its chunks' ends while f reports
// true. nil turns it off, the default.
func SetSpinWhile(f func() bool) {
	if f == nil {
		spinWhile.Store(nil)
		return
	}
	spinWhile.Store(&f)
}

// SpinFor is the longest a worker polls without finding a chunk.
const SpinFor = time.Millisecond

// A hand is a worker's place to take a chunk while it polls. Its state goes
// handIdle → handPolling (the worker polls) → handClaimed (a loop took it,
// job not yet there) → handFull (job set) → handIdle (the worker took the
// job), or handPolling → handIdle when the worker stops polling. Only the
// worker moves it out of handPolling to handIdle and out of handFull; only
// a loop moves it from handPolling to handClaimed and on to handFull. So a
// chunk handed to a hand is run by its worker, never lost.
type hand struct {
	state atomic.Int32
	job   func() // set between handClaimed and handFull
}

const (
	handIdle int32 = iota
	handPolling
	handClaimed
	handFull
)

// giveToPolling hands job to a worker that polls, reporting whether one
// took it.
func (p *Pool) giveToPolling(job func()) bool {
	if p.polling.Load() == 0 {
		return false
	}
	for _, h := range p.hands {
		if h.state.CompareAndSwap(handPolling, handClaimed) {
			h.job = job
			h.state.Store(handFull)
			p.handed.Add(1)
			return true
		}
	}
	return false
}

// poll is a worker's wait for its next chunk through h, if the process's
// test holds as it begins: up to SpinFor, and past waitpoll.Linger only
// while the test holds. It returns the chunk, or nil when the worker is to
// park. (Between two kernels of a replay the test is false for a few
// microseconds.)
func (p *Pool) poll(h *hand) func() {
	f := spinWhile.Load()
	if f == nil || !(*f)() {
		return nil
	}
	h.state.Store(handPolling)
	p.polling.Add(1)
	defer p.polling.Add(-1)
	start := time.Now()
	for i := 0; ; i++ {
		if job := p.take(h); job != nil {
			return job
		}
		if i%16 == 15 {
			if d := time.Since(start); d > SpinFor || d > waitpoll.Linger && !(*f)() || p.closing() {
				if h.state.CompareAndSwap(handPolling, handIdle) {
					return nil
				}
				return p.take(h) // a loop claimed the hand meanwhile
			}
		}
		waitpoll.Pause(i)
	}
}

// awaitChunks is a loop's wait for its chunks that workers run (pending
// of them): while the process's test holds, it polls for up to SpinFor
// before the loop parks in its WaitGroup, so that the last chunk's end
// wakes no one.
func awaitChunks(pending *atomic.Int32) {
	f := spinWhile.Load()
	if f == nil || pending.Load() == 0 {
		return
	}
	var start time.Time
	for i := 0; pending.Load() != 0; i++ {
		if i%16 == 15 {
			if start.IsZero() {
				start = time.Now()
			} else if time.Since(start) > SpinFor || !(*f)() {
				return
			}
		}
		waitpoll.Pause(i)
	}
}

// take returns h's job if a loop has handed one, waiting for it once a
// loop has claimed the hand, and sets h idle again; nil if none has.
func (p *Pool) take(h *hand) func() {
	for {
		switch h.state.Load() {
		case handFull:
			job := h.job
			h.job = nil
			h.state.Store(handIdle)
			return job
		case handClaimed:
			runtime.Gosched() // the loop stores the job next
		default:
			return nil
		}
	}
}

// closing reports whether Close was called.
func (p *Pool) closing() bool {
	select {
	case <-p.quit:
		return true
	default:
		return false
	}
}
