// The context a kernel body runs with (KernelCtx), and the worker pool its
// loops split over.

package plugin

import "github.com/goffload/offload/internal/workpool"

// KernelCtx is the context a kernel body receives as its first parameter
// (through an interface such as offload.Ctx). A CPU kind makes one per
// device in Load with NewKernelCtx and passes it to Kernel.Launch.
type KernelCtx struct {
	device int
	pool   *workpool.Pool
	stop   *StopSignal // see WithStop; nil: never asked to stop
}

// Pool is a set of worker goroutines that a kernel's parallel loops
// (ctx.For) split over: one per core of the device. A CPU device kind makes
// one per device with NewPool, gives it to the kernels' contexts
// (NewKernelCtx), and closes it with the device: closing it also forgets
// what the runtime kept for the device in this process (its declare target
// bindings). Its methods (its type is internal, so they are listed here):
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
func NewPool(workers int) *Pool { return workpool.New(workers) }

// NewKernelCtx returns the context for a kernel running on device number
// device with pool's workers.
func NewKernelCtx(device int, pool *Pool) *KernelCtx {
	return &KernelCtx{device: device, pool: pool}
}

// Device is the number of the device the kernel runs on.
func (c *KernelCtx) Device() int { return c.device }

// Pool is the pool the context's loops split over (nil for a context made
// without one).
func (c *KernelCtx) Pool() *Pool { return c.pool }

// Cores is the number of cores the device splits loops over.
func (c *KernelCtx) Cores() int { return c.pool.Workers() }

// For runs body over [0, n) split into contiguous chunks across the device's
// cores, and returns when every chunk is done.
func (c *KernelCtx) For(n int, body func(lo, hi int)) { c.pool.For(n, body) }
