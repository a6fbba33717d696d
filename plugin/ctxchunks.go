package plugin

import "github.com/goffload/offload/internal/workpool"

// Chunk is one part of a parallel loop over [0, n) that ForChunks splits:
// the half-open range [Lo, Hi), chunk number Index of the Count chunks the
// loop makes (offload.Chunk has the same fields). The chunks are contiguous
// and in order, as OpenMP's schedule(static) without a chunk size makes
// them: the first n mod Count have one element more than the others.
type Chunk = workpool.Chunk

// Chunks is how many chunks For and ForChunks split a loop over [0, n)
// into: min(n, Cores()), or 0 when n <= 0.
func (c *KernelCtx) Chunks(n int) int { return c.pool.Chunks(n) }

// ForChunks runs body once for each chunk of [0, n), concurrently, with the
// chunk's number and range (see Chunk), and returns when every chunk is
// done.
func (c *KernelCtx) ForChunks(n int, body func(Chunk)) { c.pool.ForChunks(n, body) }
