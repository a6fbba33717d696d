package opencl

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/google/btree"

	"github.com/goffload/offload/internal/cldrv"
	"github.com/goffload/offload/plugin"
)

// memory is a device's allocations: SVM pointers, or buffers at addresses the
// kind makes up.
type memory struct {
	d    *device
	mu   sync.Mutex
	live *btree.BTreeG[*allocation] // by base
}

// allocation is a live allocation of size bytes at base. It is an SVM pointer
// (buf 0), or a buffer and the sub-buffers made of it for launches.
type allocation struct {
	base plugin.Ptr
	size int64
	buf  cldrv.Mem
	subs map[int64]cldrv.Mem // by origin; under memory.mu
}

// nextAddr is the next made-up address of a buffer. Made-up addresses of
// every device are distinct and far from Go's and SVM's. There is a page
// between allocations.
var nextAddr atomic.Uint64

const bufferSpace = 0x7e00_0000_0000

func (m *memory) init(d *device) {
	m.d = d
	m.live = btree.NewG(16, func(a, b *allocation) bool { return a.base < b.base })
}

// Alloc allocates size bytes: SVM, or a buffer (gpukind.Memory).
func (m *memory) Alloc(size int64) (plugin.Ptr, error) {
	d := m.d
	if size < 0 {
		return 0, fmt.Errorf("%w: allocation of %d bytes", plugin.ErrBadPointer, size)
	}
	if size > d.maxAlloc && d.maxAlloc > 0 {
		return 0, fmt.Errorf("%w: %d bytes requested, the device allocates at most %d at once (CL_DEVICE_MAX_MEM_ALLOC_SIZE)", plugin.ErrOutOfMemory, size, d.maxAlloc)
	}
	a := &allocation{size: size}
	n := max(size, 1)
	if d.svm {
		p := d.lib.SVMAlloc(d.ctx, n, 0)
		if p == 0 {
			return 0, fmt.Errorf("%w: clSVMAlloc of %d bytes failed", plugin.ErrOutOfMemory, size)
		}
		a.base = plugin.Ptr(p)
	} else {
		buf, err := d.lib.CreateBuffer(d.ctx, n)
		if err != nil {
			return 0, fmt.Errorf("%w: %w", plugin.ErrOutOfMemory, err)
		}
		a.buf = buf
		span := (uint64(n) + 2*4096 - 1) &^ 4095
		a.base = plugin.Ptr(bufferSpace + nextAddr.Add(span) - span)
	}
	m.mu.Lock()
	m.live.ReplaceOrInsert(a)
	m.mu.Unlock()
	return a.base, nil
}

// Free frees the allocation at p (gpukind.Memory).
func (m *memory) Free(p plugin.Ptr) error {
	d := m.d
	m.mu.Lock()
	a, ok := m.live.Get(&allocation{base: p})
	if ok {
		m.live.Delete(a)
	}
	m.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: free of %#x, which is not the address of a live allocation", plugin.ErrBadPointer, uint64(p))
	}
	return m.release(d, a)
}

// release gives a's memory back to the driver.
func (m *memory) release(d *device, a *allocation) error {
	if a.buf == 0 {
		d.lib.SVMFree(d.ctx, uintptr(a.base))
		return nil
	}
	var errs []error
	for _, s := range a.subs {
		errs = append(errs, d.lib.ReleaseMem(s))
	}
	errs = append(errs, d.lib.ReleaseMem(a.buf))
	return errors.Join(errs...)
}

// find returns the live allocation holding [p, p+size) and p's offset in
// it.
func (m *memory) find(p plugin.Ptr, size int64) (*allocation, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var a *allocation
	m.live.DescendLessOrEqual(&allocation{base: p}, func(x *allocation) bool {
		a = x
		return false
	})
	if size < 0 || a == nil || uint64(p-a.base) > uint64(a.size) || uint64(size) > uint64(a.size)-uint64(p-a.base) {
		return nil, 0, fmt.Errorf("%w: [%#x, +%d bytes) is not inside a live allocation", plugin.ErrBadPointer, uint64(p), size)
	}
	return a, int64(p - a.base), nil
}

// Check returns an error unless [p, p+size) lies inside one live
// allocation (gpukind.Memory).
func (m *memory) Check(p plugin.Ptr, size int64) error {
	_, _, err := m.find(p, size)
	return err
}

// argBuffer returns the buffer a kernel gets for a slice at off in a, a
// buffer allocation. At offset 0 that is the buffer itself. Else it is a
// sub-buffer from off to the allocation's end, made once. A sub-buffer must
// start at a multiple of the device's base address alignment.
func (m *memory) argBuffer(d *device, a *allocation, off int64) (cldrv.Mem, error) {
	if off == 0 {
		return a.buf, nil
	}
	if off%d.align != 0 {
		return 0, fmt.Errorf("%w: the slice starts %d bytes into its allocation, and this device's buffers (it has no shared virtual memory, or GOFFLOAD_OPENCL_SVM=0) pass a slice inside one as a sub-buffer, which must start at a multiple of %d bytes (CL_DEVICE_MEM_BASE_ADDR_ALIGN): map the whole array, or a section that starts there", plugin.ErrUnsupported, off, d.align)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := a.subs[off]; ok {
		return s, nil
	}
	s, err := d.lib.CreateSubBuffer(a.buf, off, max(a.size-off, 1))
	if err != nil {
		return 0, fmt.Errorf("a sub-buffer at %d bytes into its allocation: %w", off, err)
	}
	if a.subs == nil {
		a.subs = map[int64]cldrv.Mem{}
	}
	a.subs[off] = s
	return s, nil
}

// close frees every allocation.
func (m *memory) close(d *device) error {
	m.mu.Lock()
	var as []*allocation
	m.live.Ascend(func(a *allocation) bool { as = append(as, a); return true })
	m.live.Clear(false)
	m.mu.Unlock()
	var errs []error
	for _, a := range as {
		errs = append(errs, m.release(d, a))
	}
	return errors.Join(errs...)
}

// A devRange is a range of device memory as a copy names it: an SVM
// address, or a buffer and an offset.
type devRange struct {
	svm uintptr
	buf cldrv.Mem
	off int64
}

// rangeOf resolves [p, p+size) for a copy.
func (d *device) rangeOf(p plugin.Ptr, size int64) (devRange, error) {
	a, off, err := d.mem.find(p, size)
	if err != nil {
		return devRange{}, err
	}
	if a.buf == 0 {
		return devRange{svm: uintptr(p)}, nil
	}
	return devRange{buf: a.buf, off: off}, nil
}

// write enqueues a copy of host to r on q. It blocks, or else host stays
// pinned until ev (which it sets) is complete.
func (d *device) write(q cldrv.Queue, r devRange, host []byte, blocking bool, ev *cldrv.Event) error {
	if len(host) == 0 {
		return nil
	}
	src := unsafe.Pointer(&host[0])
	if r.buf == 0 {
		return d.lib.SVMWrite(q, blocking, r.svm, src, int64(len(host)), nil, ev)
	}
	return d.lib.WriteBuffer(q, r.buf, blocking, r.off, int64(len(host)), src, nil, ev)
}

// read enqueues a copy of r to host on q, as write does.
func (d *device) read(q cldrv.Queue, host []byte, r devRange, blocking bool, ev *cldrv.Event) error {
	if len(host) == 0 {
		return nil
	}
	dst := unsafe.Pointer(&host[0])
	if r.buf == 0 {
		return d.lib.SVMRead(q, blocking, dst, r.svm, int64(len(host)), nil, ev)
	}
	return d.lib.ReadBuffer(q, r.buf, blocking, r.off, int64(len(host)), dst, nil, ev)
}

// copyRange enqueues a copy of size bytes between two ranges of the
// platform's context on q.
func (d *device) copyRange(q cldrv.Queue, dst, src devRange, size int64, ev *cldrv.Event) error {
	switch {
	case size == 0:
		return nil
	case dst.buf == 0 && src.buf == 0:
		return d.lib.SVMCopy(q, dst.svm, src.svm, size, nil, ev)
	case dst.buf != 0 && src.buf != 0:
		return d.lib.CopyBuffer(q, src.buf, dst.buf, src.off, dst.off, size, nil, ev)
	case dst.buf == 0: // buffer to SVM: read into the SVM range
		return d.lib.ReadBufferSVM(q, src.buf, src.off, size, dst.svm, nil, ev)
	default: // SVM to buffer
		return d.lib.WriteBufferSVM(q, dst.buf, dst.off, size, src.svm, nil, ev)
	}
}
