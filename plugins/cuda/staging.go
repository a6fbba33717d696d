package cuda

import (
	"errors"
	"runtime"
	"sync"
	"unsafe"

	"github.com/goffload/offload/internal/cudadrv"
	"github.com/goffload/offload/plugin"
)

// Host memory goes to and from the GPU through pinned staging buffers. The
// driver copies asynchronously only from and to page-locked memory. And the
// program's Go memory must never be handed to it: the garbage collector could
// free it while a copy is pending. A copy is cut into chunks of chunkSize.
// Two buffers alternate, so that the host's copy of one chunk overlaps the
// DMA of the other.

// chunkSize is the size of a staging buffer.
const chunkSize = 4 << 20

// maxIdleStaging bounds the staging buffers a device keeps for reuse.
const maxIdleStaging = 8

// stagingBuf is a pinned buffer and the event recorded after the last copy
// that used it.
type stagingBuf struct {
	p       unsafe.Pointer
	b       []byte
	ev      cudadrv.Event
	pending bool // ev was recorded after a copy that may not be done
}

// stagingPool holds a device's idle staging buffers, oldest first.
type stagingPool struct {
	mu   sync.Mutex
	free []*stagingBuf
}

// get returns a staging buffer whose last copy is done; the device's
// context must be current.
func (sp *stagingPool) get(d *device) (*stagingBuf, error) {
	sp.mu.Lock()
	var s *stagingBuf
	for i, c := range sp.free { // prefer a buffer that is done
		if !c.pending || d.drv.EventQuery(c.ev) == nil {
			c.pending = false
			s = c
			sp.free = append(sp.free[:i], sp.free[i+1:]...)
			break
		}
	}
	if s == nil && len(sp.free) == maxIdleStaging {
		s = sp.free[0]
		sp.free = sp.free[1:]
	}
	sp.mu.Unlock()
	if s != nil {
		return s, s.wait(d)
	}
	p, err := d.drv.MemHostAlloc(chunkSize, cudadrv.MemHostAllocPortable)
	if err != nil {
		return nil, err
	}
	ev, err := d.drv.EventCreate(cudadrv.EventDisableTiming)
	if err != nil {
		d.drv.MemFreeHost(p)
		return nil, err
	}
	return &stagingBuf{p: p, b: unsafe.Slice((*byte)(p), chunkSize), ev: ev}, nil
}

// wait waits until the last copy that used s is done.
func (s *stagingBuf) wait(d *device) error {
	if !s.pending {
		return nil
	}
	if err := d.drv.EventSynchronize(s.ev); err != nil {
		return err
	}
	s.pending = false
	return nil
}

// put gives s back; the device's context must be current.
func (sp *stagingPool) put(d *device, s *stagingBuf) {
	if s == nil {
		return
	}
	sp.mu.Lock()
	if len(sp.free) < maxIdleStaging {
		sp.free = append(sp.free, s)
		sp.mu.Unlock()
		return
	}
	sp.mu.Unlock()
	s.destroy(d)
}

func (s *stagingBuf) destroy(d *device) error {
	err := s.wait(d)
	return errors.Join(err, d.drv.MemFreeHost(s.p), d.drv.EventDestroy(s.ev))
}

// close frees the idle buffers; the device's context must be current.
func (sp *stagingPool) close(d *device) error {
	sp.mu.Lock()
	free := sp.free
	sp.free = nil
	sp.mu.Unlock()
	var errs []error
	for _, s := range free {
		errs = append(errs, s.destroy(d))
	}
	return errors.Join(errs...)
}

// submit copies src to dst through staging buffers. t, if not nil, times the
// copy on the stream, from before the first chunk's DMA to after the last's.
func (q *queue) submit(dst plugin.Ptr, src []byte, t *opTiming) error {
	d := q.d
	var bufs [2]*stagingBuf
	defer func() {
		for _, b := range bufs {
			d.staging.put(d, b)
		}
	}()
	for i, off := 0, 0; off < len(src); i, off = i+1, off+chunkSize {
		n := min(chunkSize, len(src)-off)
		b := bufs[i%2]
		if b == nil {
			var err error
			if b, err = d.staging.get(d); err != nil {
				return err
			}
			bufs[i%2] = b
		} else if err := b.wait(d); err != nil { // its copy of two chunks ago
			return err
		}
		pcopy(b.b[:n], src[off:off+n])
		if err := q.dma(b, t, off+n == len(src), func() error {
			return d.drv.MemcpyHtoDAsync(cudadrv.DevPtr(dst)+cudadrv.DevPtr(off), b.p, int64(n), q.stream)
		}); err != nil {
			return err
		}
	}
	return nil
}

// retrieve copies src to dst through staging buffers, and returns once dst
// holds the data. t, if not nil, times the copy on the stream, from before
// the first chunk's DMA to after the last's. That leaves out the host's copy
// out of the staging buffer after it.
func (q *queue) retrieve(dst []byte, src plugin.Ptr, t *opTiming) error {
	d := q.d
	type part struct {
		b      *stagingBuf
		off, n int
	}
	var held []*stagingBuf
	defer func() {
		for _, b := range held {
			d.staging.put(d, b)
		}
	}()
	var parts []part // at most two in flight
	finish := func(p part) error {
		if err := p.b.wait(d); err != nil {
			return err
		}
		pcopy(dst[p.off:p.off+p.n], p.b.b[:p.n])
		return nil
	}
	for off := 0; off < len(dst); off += chunkSize {
		n := min(chunkSize, len(dst)-off)
		var b *stagingBuf
		if len(parts) == 2 {
			p := parts[0]
			parts = parts[1:]
			if err := finish(p); err != nil {
				return err
			}
			b = p.b
		} else {
			var err error
			if b, err = d.staging.get(d); err != nil {
				return err
			}
			held = append(held, b)
		}
		if err := q.dma(b, t, off+n == len(dst), func() error {
			return d.drv.MemcpyDtoHAsync(b.p, cudadrv.DevPtr(src)+cudadrv.DevPtr(off), int64(n), q.stream)
		}); err != nil {
			return err
		}
		parts = append(parts, part{b, off, n})
	}
	for _, p := range parts {
		if err := finish(p); err != nil {
			return err
		}
	}
	return nil
}

// dma issues one chunk's copy through staging buffer b on q's stream (copy).
// It records b's event after it, so that b is reused only once the copy is
// done. t, if not nil, times the copy from before the first chunk's DMA to
// after the last's.
func (q *queue) dma(b *stagingBuf, t *opTiming, last bool, copy func() error) error {
	t.begin(q)
	if err := copy(); err != nil {
		return err
	}
	if last {
		t.finish(q)
	}
	if err := q.d.drv.EventRecord(b.ev, q.stream); err != nil {
		return err
	}
	b.pending = true
	return nil
}

// pcopyPiece is the smallest part of a copy pcopy gives a goroutine.
const pcopyPiece = 512 << 10

// pcopy copies src to dst (of the same length). It splits a large copy over
// up to GOMAXPROCS goroutines, at most 8 and at least 2. One core's memory
// copy is slower than a PCIe 5 DMA (about 50 GB/s). A server's memory reaches
// that with several cores.
func pcopy(dst, src []byte) {
	n := len(src)
	parts := min(n/pcopyPiece, max(2, min(runtime.GOMAXPROCS(0), 8)))
	if parts < 2 {
		copy(dst, src)
		return
	}
	var wg sync.WaitGroup
	for i := range parts {
		lo, hi := i*n/parts, (i+1)*n/parts
		wg.Add(1)
		go func() {
			defer wg.Done()
			copy(dst[lo:hi], src[lo:hi])
		}()
	}
	wg.Wait()
}
