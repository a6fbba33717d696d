package plugin

import "github.com/goffload/offload/internal/workpool"

// Chunks is how many chunks For and ForChunks split a loop over [0, n)
// into: min(n, Cores()), or 0 when n <= 0.
func (c *KernelCtx) Chunks(n int) int { return c.pool.Chunks(n) }

// ForChunks runs body once for each chunk of [0, n), concurrently, with the
// chunk's number and range (see workpool.Bounds), and returns when every
// chunk is done.
func (c *KernelCtx) ForChunks(n int, body func(workpool.Chunk)) { c.pool.ForChunks(n, body) }
