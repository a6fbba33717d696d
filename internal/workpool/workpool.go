// Package workpool holds the worker pool that a CPU device splits a kernel's
// loop over: a fixed set of goroutines, one per core, that run chunks of a
// parallel loop, with the calling goroutine taking part so that nested or
// concurrent loops never deadlock.
package workpool

import (
	"fmt"
	"reflect"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// MaxWorkers is the most workers a pool may have (a device's cores):
// 4 × the machine's CPUs, at least 64 (to try more workers than cores on a
// small machine), at most 4096. Each worker is a goroutine; a million of
// them took 24 s and 2.8 GB to start.
func MaxWorkers() int { return min(4096, max(64, 4*runtime.NumCPU())) }

// ParseWorkers parses the value s of the environment variable name as a
// number of workers, from 1 to MaxWorkers. The error names the variable, the
// value and the range.
func ParseWorkers(name, s string) (int, error) {
	v, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || v < 1 || v > MaxWorkers() {
		return 0, fmt.Errorf("%s=%q: want a number of cores from 1 to %d (4 × this machine's %d CPUs, at least 64, at most 4096)",
			name, s, MaxWorkers(), runtime.NumCPU())
	}
	return v, nil
}

// Pool is a fixed set of worker goroutines.
type Pool struct {
	workers int
	jobs    chan func()
	quit    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
	started func() // tests: called as each worker starts

	closeMu  sync.Mutex
	onClose  []func() // run once by the first Close, after the workers end
	closedUp bool

	slots atomic.Pointer[chan struct{}] // kernel slots (slots.go); nil: no bound

	hands   []*hand      // one a worker, for the chunks handed while it polls (spin.go)
	free    chan *hand   // the hands no worker holds
	polling atomic.Int32 // workers that poll now
	handed  atomic.Int64 // chunks handed to workers that polled (tests)
}

// New starts a pool with the given number of workers (at least one, at most
// MaxWorkers).
func New(workers int) *Pool { return newPool(workers, nil) }

func newPool(workers int, started func()) *Pool {
	workers = min(max(workers, 1), MaxWorkers())
	p := &Pool{workers: workers, jobs: make(chan func()), quit: make(chan struct{}), started: started}
	// The caller of For runs one chunk itself, so workers-1 helpers suffice.
	p.free = make(chan *hand, workers-1)
	for range workers - 1 {
		h := new(hand)
		p.hands = append(p.hands, h)
		p.free <- h
	}
	p.wg.Add(workers - 1)
	for i := 0; i < workers-1; i++ {
		go p.worker()
	}
	return p
}

// worker runs jobs until the pool closes. A job whose body calls
// runtime.Goexit ends the goroutine (nothing can stop a Goexit): the job
// starts the worker's replacement on its way out, which takes over its count
// in wg, so the pool keeps its size.
func (p *Pool) worker() {
	// A replacement takes the hand of the worker it replaces once that
	// one's goroutine has ended.
	h := <-p.free
	defer func() { p.free <- h }()
	if p.started != nil {
		p.started()
	}
	for {
		if job := p.poll(h); job != nil {
			job()
			continue
		}
		select {
		case job := <-p.jobs:
			job()
		case <-p.quit:
			p.wg.Done()
			return
		}
	}
}

// Workers is the number of cores the pool splits loops over.
func (p *Pool) Workers() int { return p.workers }

// Close stops the workers once the chunks they run are done. Loops started
// after Close still work, on the calling goroutine alone.
func (p *Pool) Close() {
	p.once.Do(func() { close(p.quit) })
	p.wg.Wait()
	p.closeMu.Lock()
	hooks := p.onClose
	p.onClose, p.closedUp = nil, true
	p.closeMu.Unlock()
	for _, f := range hooks {
		f()
	}
}

// OnClose makes the first Close call f once the workers have ended (at once
// if the pool is closed already): what goes with the pool's device, such as
// its declare target bindings.
func (p *Pool) OnClose(f func()) {
	p.closeMu.Lock()
	if !p.closedUp {
		p.onClose = append(p.onClose, f)
		p.closeMu.Unlock()
		return
	}
	p.closeMu.Unlock()
	f()
}

// PanicError is what For returns (as a panic value re-raised in the caller)
// when a chunk of the loop panicked or called runtime.Goexit: the value and
// the stack of the goroutine that panicked, or Goexit set and the stack of
// the chunk that called it.
type PanicError struct {
	Value  any
	Stack  []byte
	Goexit bool
}

// Error shows the panic value and stack.
func (e *PanicError) Error() string {
	if e.Goexit {
		return fmt.Sprintf("runtime.Goexit in a loop chunk\n\n%s", e.Stack)
	}
	return fmt.Sprintf("panic: %v\n\n%s", e.Value, e.Stack)
}

// Chunk is one part of a parallel loop over [0, n): the half-open range
// [Lo, Hi), which is chunk number Index of the Count chunks the loop makes.
type Chunk struct {
	Index, Count int
	Lo, Hi       int
}

// Chunks is how many chunks For and ForChunks split a loop over [0, n) into:
// min(n, Workers()), or 0 when n <= 0.
func (p *Pool) Chunks(n int) int {
	if n <= 0 {
		return 0
	}
	return min(n, p.workers)
}

// Bounds returns chunk c of the k chunks a loop over [0, n) is split into,
// the way OpenMP's schedule(static) without a chunk size splits it: the
// chunks are contiguous and in order, and the first n mod k of them have one
// more element than the others (n/k + 1 against n/k). 0 <= c < k <= n.
func Bounds(n, k, c int) Chunk {
	q, r := n/k, n%k
	lo := c*q + min(c, r)
	hi := lo + q
	if c < r {
		hi++
	}
	return Chunk{Index: c, Count: k, Lo: lo, Hi: hi}
}

// For runs body over [0, n) split into contiguous chunks, one per worker
// (see ForChunks), and returns when all chunks are done.
func (p *Pool) For(n int, body func(lo, hi int)) {
	p.ForChunks(n, func(c Chunk) { body(c.Lo, c.Hi) })
}

// ForChunks runs body once for each of the Chunks(n) chunks of [0, n) (see
// Bounds), concurrently, and returns when all are done: which chunk gets
// which range depends only on n and the number of workers, never on which
// goroutine runs it. Chunks that find no idle worker run on the calling
// goroutine. A panic in any chunk, or a runtime.Goexit in a chunk that a
// worker ran, is re-raised in the caller as a *PanicError once every chunk
// has finished. A Goexit in a chunk the caller runs ends the caller's
// goroutine (as it would without the pool) once the chunks handed to
// workers have finished; the chunks not handed out yet never start.
func (p *Pool) ForChunks(n int, body func(c Chunk)) {
	chunks := p.Chunks(n)
	if chunks == 0 {
		return
	}
	if chunks == 1 {
		body(Chunk{Index: 0, Count: 1, Lo: 0, Hi: n})
		return
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		panicked *PanicError
	)
	run := func(c Chunk) {
		returned := false
		defer func() {
			if returned {
				return
			}
			r := recover()
			mu.Lock()
			if panicked == nil {
				switch pe, _ := r.(*PanicError); {
				case r == nil:
					panicked = &PanicError{Goexit: true, Stack: debug.Stack()}
				case pe != nil:
					panicked = pe
				default:
					panicked = &PanicError{Value: r, Stack: debug.Stack()}
				}
			}
			mu.Unlock()
		}()
		body(c)
		returned = true
	}
	handed := false
	// A Goexit in a chunk the caller runs still waits for the chunks handed
	// to workers: they use memory the caller's kernel gives back when it
	// ends.
	returned := false
	defer func() {
		if !returned {
			wg.Wait()
		}
	}()
	var pending atomic.Int32 // the chunks handed to workers, not done
	for i := 1; i < chunks; i++ {
		c := Bounds(n, chunks, i)
		wg.Add(1)
		pending.Add(1)
		job := func() {
			returned := false
			defer func() {
				if !returned {
					go p.worker() // this worker is ending: replace it before the loop ends
				}
				wg.Done()
				pending.Add(-1)
			}()
			run(c)
			returned = true
		}
		if p.giveToPolling(job) {
			continue // a worker that polls runs it now, on its own core
		}
		select {
		case p.jobs <- job:
			handed = true
		default: // no idle worker: run it here
			wg.Done()
			pending.Add(-1)
			run(c)
		}
	}
	if handed {
		// The worker last handed a chunk waits in this goroutine's P as
		// the next to run there, where another P takes it only after a
		// while, if at all: on a 2-core machine the loop ran no faster
		// than on one core. Yield, so that it runs now, here, and this
		// goroutine goes where an idle P finds it.
		runtime.Gosched()
	}
	run(Bounds(n, chunks, 0))
	awaitChunks(&pending)
	wg.Wait()
	returned = true
	if panicked != nil {
		panic(panicked)
	}
}

// WorkerFrame names the function the pool's workers run chunks under: a
// chunk of a kernel's loop is inside the kernel (the core's InTask looks
// for it on the stack).
func WorkerFrame() string {
	return runtime.FuncForPC(reflect.ValueOf((*Pool).worker).Pointer()).Name()
}
