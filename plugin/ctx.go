// The context a kernel body runs with (KernelCtx).

package plugin

// KernelCtx is the context a kernel body receives as its first parameter
// (through an interface such as offload.Ctx). A CPU kind makes one per
// device in Load with NewKernelCtx and passes it to Kernel.Launch.
type KernelCtx struct {
	device int
	pool   *Pool
	stop   *StopSignal // see WithStop; nil: never asked to stop
}

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

// Chunks is how many chunks For and ForChunks split a loop over [0, n)
// into: min(n, Cores()), or 0 when n <= 0.
func (c *KernelCtx) Chunks(n int) int { return c.pool.Chunks(n) }

// ForChunks runs body once for each chunk of [0, n), concurrently, and
// returns when every chunk is done. body gets the chunk's number and range
// (see Chunk).
func (c *KernelCtx) ForChunks(n int, body func(Chunk)) { c.pool.ForChunks(n, body) }
