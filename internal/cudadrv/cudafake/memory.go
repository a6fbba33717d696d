// The fake driver's memory: device allocations, pinned host memory and
// copies.

package cudafake

import (
	"sort"
	"unsafe"

	"github.com/goffload/offload/internal/cudadrv"
)

// find returns the live allocation holding p; under d.mu.
func (d *Driver) find(p cudadrv.DevPtr) *alloc {
	i := sort.Search(len(d.allocs), func(i int) bool { return d.allocs[i].base > p }) - 1
	if i < 0 {
		return nil
	}
	a := d.allocs[i]
	if p >= a.base+cudadrv.DevPtr(max(a.size, 1)) {
		return nil
	}
	return a
}

// MemAlloc is the fake cuMemAlloc.
func (d *Driver) MemAlloc(size int64) (cudadrv.DevPtr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, err := d.cur("cuMemAlloc_v2")
	if err != nil {
		return 0, err
	}
	if size <= 0 {
		return 0, fail("cuMemAlloc_v2", cudadrv.ErrInvalidValue)
	}
	if size > d.cfg.GPUs[c.gpu].Memory-c.used {
		return 0, fail("cuMemAlloc_v2", cudadrv.ErrOutOfMemory)
	}
	c.used += size
	a := &alloc{base: cudadrv.DevPtr(c.nextAddr), size: size, data: make([]byte, size), ctx: c}
	c.nextAddr += (uint64(size) + 4096 + 511) &^ 511 // a gap after each, as overruns would fault
	i := sort.Search(len(d.allocs), func(i int) bool { return d.allocs[i].base > a.base })
	d.allocs = append(d.allocs, nil)
	copy(d.allocs[i+1:], d.allocs[i:])
	d.allocs[i] = a
	return a.base, nil
}

// MemFree is the fake cuMemFree.
func (d *Driver) MemFree(p cudadrv.DevPtr) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.ready("cuMemFree_v2"); err != nil {
		return err
	}
	a := d.find(p)
	if a == nil || a.base != p {
		return fail("cuMemFree_v2", cudadrv.ErrInvalidValue)
	}
	if a.ctx.sticky != 0 {
		return fail("cuMemFree_v2", a.ctx.sticky)
	}
	a.ctx.used -= a.size
	i := sort.Search(len(d.allocs), func(i int) bool { return d.allocs[i].base >= p })
	d.allocs = append(d.allocs[:i], d.allocs[i+1:]...)
	return nil
}

// MemHostAlloc is the fake cuMemHostAlloc.
func (d *Driver) MemHostAlloc(size int64, flags uint32) (unsafe.Pointer, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.cur("cuMemHostAlloc"); err != nil {
		return nil, err
	}
	if size <= 0 {
		return nil, fail("cuMemHostAlloc", cudadrv.ErrInvalidValue)
	}
	b := make([]byte, size)
	p := unsafe.Pointer(&b[0])
	d.host[uintptr(p)] = b
	return p, nil
}

// MemFreeHost is the fake cuMemFreeHost.
func (d *Driver) MemFreeHost(p unsafe.Pointer) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.ready("cuMemFreeHost"); err != nil {
		return err
	}
	if _, ok := d.host[uintptr(p)]; !ok {
		return fail("cuMemFreeHost", cudadrv.ErrInvalidValue)
	}
	delete(d.host, uintptr(p))
	return nil
}

// pinned reports whether [p, p+n) lies in one MemHostAlloc allocation;
// under d.mu.
func (d *Driver) pinned(p unsafe.Pointer, n int64) bool {
	for base, b := range d.host {
		if uintptr(p) >= base && uintptr(p)+uintptr(n) <= base+uintptr(len(b)) {
			return true
		}
	}
	return false
}

// devRange returns the device bytes [p, p+n) for fn, or an error; under
// d.mu.
func (d *Driver) devRange(fn string, p cudadrv.DevPtr, n int64) ([]byte, *context, error) {
	a := d.find(p)
	if a == nil || n < 0 || int64(p-a.base)+n > a.size {
		return nil, nil, fail(fn, cudadrv.ErrInvalidValue)
	}
	off := int64(p - a.base)
	return a.data[off : off+n], a.ctx, nil
}

// copyOp checks a copy's stream and enqueues it.
func (d *Driver) copyOp(fn string, sh cudadrv.Stream, host unsafe.Pointer, n int64, devs []cudadrv.DevPtr, run func(dev [][]byte)) error {
	d.mu.Lock()
	if err := d.ready(fn); err != nil {
		d.mu.Unlock()
		return err
	}
	s := d.streams[sh]
	if s == nil {
		d.mu.Unlock()
		return fail(fn, cudadrv.ErrInvalidHandle)
	}
	if s.ctx.sticky != 0 {
		d.mu.Unlock()
		return fail(fn, s.ctx.sticky)
	}
	var bs [][]byte
	for _, p := range devs {
		b, _, err := d.devRange(fn, p, n)
		if err != nil {
			d.mu.Unlock()
			return err
		}
		bs = append(bs, b)
	}
	if host != nil && !d.pinned(host, n) {
		d.pageable++
	}
	d.mu.Unlock()
	if n == 0 {
		return nil
	}
	s.enqueue(d, func() { run(bs) })
	return nil
}

// MemcpyHtoD is the fake cuMemcpyHtoD.
func (d *Driver) MemcpyHtoD(dst cudadrv.DevPtr, src unsafe.Pointer, n int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.cur("cuMemcpyHtoD_v2"); err != nil {
		return err
	}
	b, _, err := d.devRange("cuMemcpyHtoD_v2", dst, n)
	if err != nil {
		return err
	}
	copy(b, unsafe.Slice((*byte)(src), n))
	return nil
}

// MemcpyHtoDAsync is the fake cuMemcpyHtoDAsync.
func (d *Driver) MemcpyHtoDAsync(dst cudadrv.DevPtr, src unsafe.Pointer, n int64, s cudadrv.Stream) error {
	return d.copyOp("cuMemcpyHtoDAsync_v2", s, src, n, []cudadrv.DevPtr{dst}, func(b [][]byte) {
		copy(b[0], unsafe.Slice((*byte)(src), n))
	})
}

// MemcpyDtoHAsync is the fake cuMemcpyDtoHAsync.
func (d *Driver) MemcpyDtoHAsync(dst unsafe.Pointer, src cudadrv.DevPtr, n int64, s cudadrv.Stream) error {
	return d.copyOp("cuMemcpyDtoHAsync_v2", s, dst, n, []cudadrv.DevPtr{src}, func(b [][]byte) {
		copy(unsafe.Slice((*byte)(dst), n), b[0])
	})
}

// MemcpyDtoDAsync is the fake cuMemcpyDtoDAsync.
func (d *Driver) MemcpyDtoDAsync(dst, src cudadrv.DevPtr, n int64, s cudadrv.Stream) error {
	return d.copyOp("cuMemcpyDtoDAsync_v2", s, nil, n, []cudadrv.DevPtr{dst, src}, func(b [][]byte) {
		copy(b[0], b[1])
	})
}

// MemcpyPeerAsync is the fake cuMemcpyPeerAsync.
func (d *Driver) MemcpyPeerAsync(dst cudadrv.DevPtr, dstCtx cudadrv.Context, src cudadrv.DevPtr, srcCtx cudadrv.Context, n int64, s cudadrv.Stream) error {
	const fn = "cuMemcpyPeerAsync"
	d.mu.Lock()
	_, dc, err1 := d.devRange(fn, dst, n)
	_, sc, err2 := d.devRange(fn, src, n)
	ok := err1 == nil && err2 == nil && dc.handle == dstCtx && sc.handle == srcCtx
	if ok && dc != sc {
		direct := 0
		if dc.peers[sc] || sc.peers[dc] {
			direct = 1
		}
		d.peerCopies[direct]++
	}
	d.mu.Unlock()
	if !ok {
		return fail(fn, cudadrv.ErrInvalidValue)
	}
	return d.copyOp(fn, s, nil, n, []cudadrv.DevPtr{dst, src}, func(b [][]byte) {
		copy(b[0], b[1])
	})
}
