// How a kernel body runs: its context (KernelCtx, with the worker pool its
// loops split over), and the runner goroutines that call it.

package plugin

import (
	"reflect"
	"runtime/debug"
	"sync"

	"github.com/goffload/offload/internal/workpool"
)

// KernelCtx is the context a kernel body receives as its first parameter
// (through an interface such as offload.Ctx).
type KernelCtx struct {
	device int
	pool   *workpool.Pool
	stop   *StopSignal // see WithStop; nil: never asked to stop
}

// Pool is a set of worker goroutines that a kernel's parallel loops
// (ctx.For) split over: one per core of the device. A CPU device kind makes
// one per device with NewPool, gives it to the kernels' contexts
// (NewKernelCtx), and closes it with the device: closing it also forgets
// the device's declare target bindings. Its methods (its type is internal, so they are listed here):
//
//	Workers() int                                 // the cores loops split over: what Info.Cores should say
//	Close()                                       // stops the workers once their chunks are done; loops after it run on the caller alone
//	For(n int, body func(lo, hi int))             // what KernelCtx.For runs
//	ForChunks(n int, body func(Chunk))            // what KernelCtx.ForChunks runs
//	Chunks(n int) int                             // min(n, Workers()), 0 when n <= 0
type Pool = workpool.Pool

// NewPool returns a pool of the given number of workers: at least 1, and
// more than max(64, 4 × the machine's CPUs), or 4096, are cut to that
// (Workers says how many it has).
func NewPool(workers int) *Pool {
	p := workpool.New(workers)
	p.OnClose(func() { DropGlobals(p) }) // the device's declare target bindings go with it
	return p
}

// NewKernelCtx returns the context for a kernel running on device number
// device with pool's workers.
func NewKernelCtx(device int, pool *Pool) *KernelCtx {
	return &KernelCtx{device: device, pool: pool}
}

// Device is the number of the device the kernel runs on.
func (c *KernelCtx) Device() int { return c.device }

// Cores is the number of cores the device splits loops over.
func (c *KernelCtx) Cores() int { return c.pool.Workers() }

// For runs body over [0, n) split into contiguous chunks across the device's
// cores, and returns when every chunk is done.
func (c *KernelCtx) For(n int, body func(lo, hi int)) { c.pool.For(n, body) }

// Call runs k with ctx and args, which must match k's parameters: a slice
// argument is a reflect slice value of the element type (made with
// reflect.SliceAt over device memory), a scalar is a value of the parameter's
// type. A panic in the body or in its loop chunks is returned as an error
// wrapping ErrKernelFailed, with the panic value and stack; so is a call to
// runtime.Goexit, which cannot end the caller's goroutine: the body runs on a
// runner goroutine (see runner).
func (k *Kernel) Call(ctx *KernelCtx, args []reflect.Value) error {
	args = k.Assemble(args)
	in := args
	if k.HasCtx {
		in = make([]reflect.Value, 0, len(args)+1)
		in = append(in, reflect.ValueOf(ctx))
		in = append(in, args...)
	}
	return k.onRunner(job{k: k, in: in})
}

// onRunner runs j on a runner and returns what became of it.
func (k *Kernel) onRunner(j job) error {
	r := getRunner()
	r.jobs <- j
	res := <-r.done
	if !res.exited {
		putRunner(r)
	}
	return res.err
}

// A runner is a goroutine that runs kernel bodies, so that a body calling
// runtime.Goexit (which nothing can stop) ends the runner, not the caller:
// the host's goroutine on the initial device, or a device queue's. Idle
// runners wait for work, which costs less than a goroutine per call; one that
// a Goexit ends is not reused.
type runner struct {
	jobs chan job
	done chan result
}

type job struct {
	k    *Kernel
	in   []reflect.Value
	call func() // the body with its arguments bound (Direct); in is unused then
}

type result struct {
	err    error
	exited bool // the runner ended (runtime.Goexit)
}

// maxIdleRunners bounds the runners kept waiting; more end when they finish.
const maxIdleRunners = 64

var runners struct {
	sync.Mutex
	idle []*runner
}

func getRunner() *runner {
	runners.Lock()
	if n := len(runners.idle); n > 0 {
		r := runners.idle[n-1]
		runners.idle[n-1] = nil
		runners.idle = runners.idle[:n-1]
		runners.Unlock()
		return r
	}
	runners.Unlock()
	r := &runner{jobs: make(chan job), done: make(chan result, 1)}
	go r.loop()
	return r
}

func putRunner(r *runner) {
	runners.Lock()
	if len(runners.idle) < maxIdleRunners {
		runners.idle = append(runners.idle, r)
		runners.Unlock()
		return
	}
	runners.Unlock()
	close(r.jobs)
}

func (r *runner) loop() {
	for j := range r.jobs {
		j.k.run(j.in, j.call, r.done)
	}
}

// run calls the body and sends what became of it on done: nil, or an error
// for a panic or a runtime.Goexit (which a deferred function sees as a
// return with nothing to recover).
func (k *Kernel) run(in []reflect.Value, call func(), done chan<- result) {
	returned := false
	defer func() {
		if returned {
			done <- result{}
			return
		}
		// A *KernelPanic: one line of text, the trimmed stack in its Stack.
		r := recover()
		switch pe, _ := r.(*workpool.PanicError); {
		case r == nil: // the stack still holds the frame that called Goexit
			done <- result{exited: true, err: NewKernelPanic(k.Name, nil, true, false, debug.Stack())}
		case pe != nil:
			done <- result{err: NewKernelPanic(k.Name, pe.Value, pe.Goexit, true, pe.Stack)}
		default:
			done <- result{err: NewKernelPanic(k.Name, r, false, false, debug.Stack())}
		}
	}()
	if call != nil {
		call()
	} else {
		k.Fn.Call(in)
	}
	returned = true
}
