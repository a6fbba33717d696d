package offload

import (
	"reflect"
	"sync"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
)

// kernelCtx is the Ctx a kernel body gets: the device kind's context,
// with ForChunks's chunks as this package's Chunk. It holds one pointer,
// so making a Ctx of it allocates nothing.
type kernelCtx struct{ c *plugin.KernelCtx }

// useKernelCtx makes kernel bodies get a kernelCtx: at init, and again
// (once for all) from NewKernel in case a package-level kernel of this
// package is registered before init runs.
func useKernelCtx() {
	setCtx.Do(func() {
		entries.SetContext(reflect.TypeFor[kernelCtx](), func(c *plugin.KernelCtx) reflect.Value {
			return reflect.ValueOf(kernelCtx{c})
		})
	})
}

var setCtx sync.Once

func init() { useKernelCtx() }

func (k kernelCtx) Device() int                      { return k.c.Device() }
func (k kernelCtx) Cores() int                       { return k.c.Cores() }
func (k kernelCtx) For(n int, body func(lo, hi int)) { k.c.For(n, body) }
func (k kernelCtx) Chunks(n int) int                 { return k.c.Chunks(n) }
func (k kernelCtx) Done() <-chan struct{}            { return k.c.Done() }
func (k kernelCtx) Err() error                       { return k.c.Err() }

// ForChunks runs body over the kind's chunks, each as a Chunk.
func (k kernelCtx) ForChunks(n int, body func(Chunk)) {
	k.c.ForChunks(n, func(c plugin.Chunk) { body(Chunk(c)) })
}

// kindCtx is the kind's context behind a kernel's ctx, or nil if ctx is
// not one a kernel received.
func kindCtx(ctx Ctx) *plugin.KernelCtx {
	if c, ok := ctx.(kernelCtx); ok {
		return c.c
	}
	return nil
}
