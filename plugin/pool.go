// The worker pool a CPU device splits its kernels' loops over, and the
// chunks a loop is split into.

package plugin

import "github.com/goffload/offload/internal/workpool"

// Pool is a set of worker goroutines, one per core of the device, that a
// kernel's parallel loops (KernelCtx.For, KernelCtx.ForChunks) split over.
//
// A CPU device kind makes one per device with NewPool. It gives the pool to
// its kernels' contexts (NewKernelCtx) and says Workers in Info.Cores.
// It closes the pool with the device, once no kernel of the device runs any
// more.
//
// The pool promises that a loop's chunks depend only on the loop's length
// and Workers, never on which goroutine runs them. It promises that a loop
// returns once every chunk is done. Closing the pool stops its workers.
// It also forgets what the runtime kept for the device in this process:
// its declare target bindings.
//
// A Pool is safe for concurrent use: loops of several kernels may share
// it.
type Pool workpool.Pool

// NewPool returns a pool of the given number of workers, at least 1.
// More than max(64, 4 × the machine's CPUs), or 4096, are cut to that.
// Workers says how many it has.
func NewPool(workers int) *Pool { return (*Pool)(workpool.New(workers)) }

func (p *Pool) wp() *workpool.Pool { return (*workpool.Pool)(p) }

// SetKernelLimit bounds how many kernels run at once on the pool's device.
// Kernel.Launch waits for one of n slots. n <= 0 sets no bound, the
// default. A kind sets it before its kernels run, from plugin.TaskLimiter.
func (p *Pool) SetKernelLimit(n int) { p.wp().SetKernelLimit(n) }

// KernelLimit is the bound SetKernelLimit set, 0 for none.
func (p *Pool) KernelLimit() int { return p.wp().KernelLimit() }

// KernelSlot waits for a slot of the bound SetKernelLimit set, and returns
// what gives the slot back. If stop closes first, ok is false and nothing
// is held. Kernel.Launch calls it. Without a bound it returns at once.
func (p *Pool) KernelSlot(stop <-chan struct{}) (release func(), ok bool) {
	return p.wp().KernelSlot(stop)
}

// Workers is the number of cores the pool splits loops over.
// The device's Info.Cores should say the same.
func (p *Pool) Workers() int { return p.wp().Workers() }

// Close stops the workers once the chunks they run are done, and forgets
// what the runtime kept for the pool's device in this process. Loops
// started after Close still work, on the calling goroutine alone. A
// second Close does nothing.
func (p *Pool) Close() { p.wp().Close() }

// Chunks is how many chunks For and ForChunks split a loop over [0, n)
// into: min(n, Workers()), or 0 when n <= 0.
func (p *Pool) Chunks(n int) int { return p.wp().Chunks(n) }

// For runs body over [0, n) split into contiguous chunks, one per worker
// (see ForChunks), and returns when every chunk is done.
func (p *Pool) For(n int, body func(lo, hi int)) { p.wp().For(n, body) }

// ForChunks runs body once for each of the Chunks(n) chunks of [0, n)
// (see Chunk), concurrently, and returns when every chunk is done.
// Chunks that find no idle worker run on the calling goroutine.
// A panic in a chunk is raised again in the caller once every chunk has
// finished. Kernel.Launch reports it as a KernelPanic, with the chunk's
// stack.
func (p *Pool) ForChunks(n int, body func(Chunk)) {
	p.wp().ForChunks(n, func(c workpool.Chunk) { body(Chunk(c)) })
}

// Chunk is one part of a parallel loop over [0, n) that ForChunks splits.
// It is the half-open range [Lo, Hi), chunk number Index of the Count
// chunks the loop makes. offload.Chunk has the same fields.
// The chunks are contiguous and in order, as OpenMP's schedule(static)
// without a chunk size makes them. The first n mod Count have one element
// more than the others.
type Chunk struct {
	Index, Count int
	Lo, Hi       int
}
