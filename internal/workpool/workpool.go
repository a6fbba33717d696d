// Package workpool holds the worker pool that a CPU device splits a kernel's
// loop over: a fixed set of goroutines, one per core, that run chunks of a
// parallel loop, with the calling goroutine taking part so that nested or
// concurrent loops never deadlock.
package workpool

import (
	"fmt"
	"runtime/debug"
	"sync"
)

// Pool is a fixed set of worker goroutines.
type Pool struct {
	workers int
	jobs    chan func()
	quit    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

// New starts a pool with the given number of workers (at least one).
func New(workers int) *Pool {
	if workers < 1 {
		workers = 1
	}
	p := &Pool{workers: workers, jobs: make(chan func()), quit: make(chan struct{})}
	// The caller of For runs one chunk itself, so workers-1 helpers suffice.
	for i := 0; i < workers-1; i++ {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for {
				select {
				case job := <-p.jobs:
					job()
				case <-p.quit:
					return
				}
			}
		}()
	}
	return p
}

// Workers is the number of cores the pool splits loops over.
func (p *Pool) Workers() int { return p.workers }

// Close stops the workers once the chunks they run are done. Loops started
// after Close still work, on the calling goroutine alone.
func (p *Pool) Close() {
	p.once.Do(func() { close(p.quit) })
	p.wg.Wait()
}

// PanicError is what For returns (as a panic value re-raised in the caller)
// when a chunk of the loop panicked: the value and the stack of the goroutine
// that panicked.
type PanicError struct {
	Value any
	Stack []byte
}

// Error shows the panic value and stack.
func (e *PanicError) Error() string {
	return fmt.Sprintf("panic: %v\n\n%s", e.Value, e.Stack)
}

// For runs body over [0, n) split into contiguous chunks, one per worker,
// and returns when all chunks are done. Chunks that find no idle worker run
// on the calling goroutine. A panic in any chunk is re-raised in the caller
// as a *PanicError once every chunk has finished.
func (p *Pool) For(n int, body func(lo, hi int)) {
	if n <= 0 {
		return
	}
	chunks := p.workers
	if chunks > n {
		chunks = n
	}
	if chunks == 1 {
		body(0, n)
		return
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		panicked *PanicError
	)
	run := func(lo, hi int) {
		defer func() {
			if r := recover(); r != nil {
				mu.Lock()
				if panicked == nil {
					if pe, ok := r.(*PanicError); ok {
						panicked = pe
					} else {
						panicked = &PanicError{Value: r, Stack: debug.Stack()}
					}
				}
				mu.Unlock()
			}
		}()
		body(lo, hi)
	}
	wg.Add(chunks)
	for c := 1; c < chunks; c++ {
		lo, hi := c*n/chunks, (c+1)*n/chunks
		job := func() { defer wg.Done(); run(lo, hi) }
		select {
		case p.jobs <- job:
		default:
			job()
		}
	}
	func() { defer wg.Done(); run(0, n/chunks) }()
	wg.Wait()
	if panicked != nil {
		panic(panicked)
	}
}
