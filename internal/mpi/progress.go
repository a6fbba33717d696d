//go:build mpi

package mpi

import (
	"runtime"
	"syscall"
	"time"
)

// How the progress goroutine waits. MPI has no way to sleep until either a
// message comes or another goroutine hands it work, so it polls: without a
// pause for spinFor after anything happened (yielding the CPU between
// polls, so that ranks sharing cores still run), then with naps, parked
// (nap.go: a napping goroutine holds no P), which work handed to it cuts
// short, growing to napMax, and after idleAfter without activity, naps of
// idleNap. While another
// goroutine polls (Poll), it naps and leaves MPI to that one.
const (
	spinFor   = 200 * time.Microsecond
	napMax    = 50 * time.Microsecond
	idleAfter = 100 * time.Millisecond
	idleNap   = 2 * time.Millisecond
)

// Poll makes MPI progress on the calling goroutine until done reports true
// or d has passed, and reports whether done did. It returns false at once
// if another goroutine polls already (that one hands this one what comes
// for it), or if MPI may be called from its first thread only. done must
// not block; it is called often.
func (e *Engine) Poll(d time.Duration, done func() bool) bool {
	if done() {
		return true
	}
	if e.locked || !e.poller.CompareAndSwap(false, true) {
		return false
	}
	start := time.Now()
	yield := true // what this goroutine readied before polling runs first
	for {
		if yield {
			// A goroutine readied by this one waits in this P's run
			// queue, where another P may not look for it for a while:
			// let it run now. (Yielding on every round instead wakes
			// an idle P's thread each time, for nothing.)
			runtime.Gosched()
			yield = false
		}
		if e.role.TryLock() {
			busy := !e.final && e.step()
			e.role.Unlock()
			if busy {
				e.active.Store(time.Now().UnixNano())
				yield = true
			}
		}
		ok := done()
		if ok || time.Since(start) >= d {
			e.poller.Store(false)
			e.poke() // the progress goroutine's turn again, at once
			return ok
		}
	}
}

// step makes one round of MPI calls, with the role held: it starts the
// operations handed over, cancels those abandoned, receives the messages
// listened for that have come (handing each to the listener) and completes
// what it can. It reports whether anything happened.
func (e *Engine) step() bool {
	e.mu.Lock()
	work, cancels, tags, listen, finishing := e.work, e.cancels, e.tags, e.listen, e.finish != nil
	e.work, e.cancels = nil, nil
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
	if listen != nil && !finishing {
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
	// After the probes: a message just matched is most often complete.
	if e.test() {
		busy = true
	}
	return busy
}

// progress is the goroutine that makes MPI's progress when no other does.
func (e *Engine) progress(ready chan<- error) {
	runtime.LockOSThread() // MPI_Init_thread is called on this thread
	rank, size, serialized, err := cInit()
	if err != nil {
		ready <- err
		return
	}
	if serialized {
		// MPI may be called from any thread, one call at a time: any
		// goroutine that holds the role, this one included, on whatever
		// thread it runs.
		runtime.UnlockOSThread()
	}
	e.locked = !serialized
	e.rank, e.size = rank, size
	ready <- nil
	e.active.Store(time.Now().UnixNano())
	nap := time.Duration(0)
	var finishing time.Time
	for {
		e.mu.Lock()
		finish := e.finish
		if finish != nil && e.err == nil {
			e.err = ErrFinalized
		}
		e.mu.Unlock()
		if finish == nil && e.poller.Load() {
			// Another goroutine polls: spinning here too would take
			// the role from it, and a core. It pokes when it stops.
			e.nap(napMax, true)
			continue
		}
		e.role.Lock()
		busy := e.step()
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
				e.final = true
				err := cFinalize()
				e.role.Unlock()
				finish <- err
				return
			}
		}
		e.role.Unlock()
		now := time.Now()
		if busy {
			e.active.Store(now.UnixNano())
			nap = 0
			if !e.locked {
				// Let the goroutines just readied run on this P now
				// (they sit in its run queue, where another P may not
				// look for them for a while).
				runtime.Gosched()
			}
			continue
		}
		idle := now.Sub(time.Unix(0, e.active.Load()))
		switch {
		case idle < spinFor && e.spinOK():
			if e.locked {
				yield()
			} else {
				runtime.Gosched()
			}
		case idle < idleAfter || e.liveCount() > 0:
			nap = min(max(2*nap, 5*time.Microsecond), napMax)
			e.nap(nap, false)
		default:
			e.nap(idleNap, false)
		}
	}
}

// liveCount is the number of operations under way.
func (e *Engine) liveCount() int {
	e.role.Lock()
	defer e.role.Unlock()
	return len(e.live)
}

// Raw runs n rounds of a raw exchange with peer on tag, with blocking MPI
// calls on the progress goroutine (which does nothing else meanwhile): a
// ping-pong of size bytes, or with stream size bytes one way and one byte
// back. Both sides call it, one as initiator. It is a baseline for
// benchmarks, not a way to move data.
func (e *Engine) Raw(peer, tag, n, size int, stream, initiator bool) error {
	o := &Req{kind: opExec, fn: func() error { return cRaw(peer, tag, n, size, stream, initiator) }}
	return e.post(o).Wait(nil)
}

// yield gives the CPU to another thread or process that wants it.
func yield() { syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }

// nap parks the progress goroutine for d at most, or until poke (napper).
// With always set it naps even with work handed over (a poller takes it).
func (e *Engine) nap(d time.Duration, always bool) {
	e.napper.clear()
	e.napper.arm(d)
	e.napping.Store(true)
	e.mu.Lock()
	pending := len(e.work) + len(e.cancels)
	if e.finish != nil {
		pending++
	}
	e.mu.Unlock()
	if pending == 0 || always {
		e.napper.wait()
	}
	e.napping.Store(false)
}
