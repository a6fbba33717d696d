// Package hostmem is device memory made of the process's memory, as CPU
// devices have it. It holds allocations by address and resolves interior
// pointers to bytes. It keeps a pool of freed blocks for reuse, as
// libomptarget's memory manager does. Blocks up to a size threshold are
// cached, at most four times the threshold in all. So a repeated large map
// does not fault fresh pages.
//
// Memory from New is Go memory. Memory from NewMapped keeps its blocks of
// MapMin bytes and more outside the Go heap, in anonymous mappings. They
// start no garbage collection and count toward no GOMEMLIMIT, and the race
// detector does not see them. Its user brackets every use of the bytes Bytes
// returned with Pin and Unpin. So a block freed meanwhile is unmapped only
// once no use is left (see Pin). Copy copies in chunks, so a big copy never
// holds up the garbage collector's stop of the world.
//
// Share lends a Memory a buffer of the host's own. Bytes then resolves its
// host address to the buffer itself. That is a device that shares the host's
// memory, as OpenMP's unified shared memory has it.
package hostmem

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"github.com/google/btree"

	"github.com/goffload/offload/plugin"
)

// allocation is one block of device memory.
type allocation struct {
	base plugin.Ptr
	size int64  // bytes the user asked for
	buf  []byte // backing memory, len(buf) >= max(size, 1)
	err  error  // an AllocAt that failed: every use of its range reports this
}

// Memory is one device's memory. It is safe for concurrent use.
type Memory struct {
	mu        sync.RWMutex
	live      *btree.BTreeG[*allocation]
	shared    *btree.BTreeG[*region] // the host's buffers lent by Share
	pool      map[int64][][]byte     // size class -> free blocks
	pooled    int64                  // bytes in pool
	threshold int64
	limit     int64
	inUse     int64

	mapped bool // blocks of MapMin bytes and more are mappings (NewMapped)
	unmaps unmapper
	budget *Budget // charged with inUse, if set (SetBudget)
}

// New returns an empty memory of Go memory whose pool keeps freed blocks up
// to threshold bytes (0: no pool; at most Limit()).
func New(threshold int64) *Memory {
	threshold = min(max(threshold, 0), Limit())
	return &Memory{
		live:      btree.NewG(16, func(a, b *allocation) bool { return a.base < b.base }),
		shared:    btree.NewG(16, func(a, b *region) bool { return a.lo < b.lo }),
		pool:      map[int64][][]byte{},
		threshold: threshold,
		limit:     4 * threshold,
	}
}

// NewMapped is New, but blocks of MapMin bytes and more are anonymous
// mappings outside the Go heap. Its user must bracket every use of the bytes
// Bytes returns with Pin and Unpin.
func NewMapped(threshold int64) *Memory {
	m := New(threshold)
	m.mapped = true
	return m
}

// sizeClass rounds n up to the block size the pool keeps it under: powers of
// two up to 64 KiB, then multiples of 64 KiB.
func sizeClass(n int64) int64 {
	if n < 64 {
		return 64
	}
	if n <= 64<<10 {
		c := int64(64)
		for c < n {
			c <<= 1
		}
		return c
	}
	return (n + 64<<10 - 1) &^ (64<<10 - 1)
}

// Alloc allocates size bytes (size 0 gets a distinct address).
func (m *Memory) Alloc(size int64) (plugin.Ptr, error) {
	if size < 0 {
		return 0, fmt.Errorf("%w: negative size %d", plugin.ErrBadPointer, size)
	}
	if err := CheckSize(size); err != nil {
		return 0, err
	}
	m.mu.RLock()
	inUse, budget := m.inUse, m.budget
	m.mu.RUnlock()
	if limit := Limit(); size > limit-inUse {
		return 0, fmt.Errorf("%w: %d bytes (%s) with %d bytes (%s) in use is more than the machine's memory (%d bytes, %s)",
			plugin.ErrOutOfMemory, size, human(size), inUse, human(inUse), limit, human(limit))
	}
	if budget != nil {
		if err := budget.take(size); err != nil {
			return 0, err
		}
	}
	class := sizeClass(size)
	m.mu.Lock()
	var buf []byte
	if free := m.pool[class]; len(free) > 0 {
		buf = free[len(free)-1]
		free[len(free)-1] = nil
		m.pool[class] = free[:len(free)-1]
		m.pooled -= class
	}
	m.mu.Unlock()
	if buf == nil {
		var err error
		if m.mapped && class >= MapMin {
			buf, err = mapBlock(class)
		} else {
			buf, err = makeBlock(class)
		}
		if err != nil {
			budget.give(size)
			return 0, err
		}
	}
	a := &allocation{base: plugin.Ptr(uintptr(unsafe.Pointer(&buf[0]))), size: size, buf: buf}
	m.mu.Lock()
	m.live.ReplaceOrInsert(a)
	m.inUse += size
	m.mu.Unlock()
	return a.base, nil
}

// AllocAt allocates size bytes at the address base that the caller chose. (A
// remote device's host numbers its allocations itself, so that mapping a
// buffer never waits for the device.) The range must not overlap a live
// allocation. If the memory cannot be had, the range is still taken until it
// is freed. Meanwhile every use of it (Bytes) reports the error. So the host
// learns of the failure from the first operation that touches it.
func (m *Memory) AllocAt(base plugin.Ptr, size int64) error {
	if size < 0 || base == 0 || uint64(base)+uint64(max(size, 1)) < uint64(base) {
		return fmt.Errorf("%w: allocation of %d bytes at %#x", plugin.ErrBadPointer, size, uint64(base))
	}
	a := &allocation{base: base, size: size, err: errAllocating}
	m.mu.Lock()
	var overlap bool
	m.live.DescendLessOrEqual(&allocation{base: base + plugin.Ptr(max(size, 1)) - 1}, func(x *allocation) bool {
		overlap = x.base+plugin.Ptr(max(x.size, 1)) > base
		return false
	})
	if overlap {
		m.mu.Unlock()
		return fmt.Errorf("%w: allocation of %d bytes at %#x overlaps a live one", plugin.ErrBadPointer, size, uint64(base))
	}
	m.live.ReplaceOrInsert(a) // the range is taken; its memory comes outside the lock
	m.mu.Unlock()
	var err error
	var buf []byte
	if p, aerr := m.Alloc(size); aerr != nil {
		err = fmt.Errorf("allocation of %d bytes at %#x failed: %w", size, uint64(base), aerr)
	} else {
		m.mu.Lock()
		b, _ := m.live.Delete(&allocation{base: p}) // the block, under the caller's address
		m.mu.Unlock()
		buf = b.buf
	}
	m.mu.Lock()
	a.buf, a.err = buf, err
	m.mu.Unlock()
	return err
}

var errAllocating = fmt.Errorf("%w: allocation still being made", plugin.ErrBadPointer)

// machineMemory is the machine's memory in bytes (0 if unknown). No block can
// be larger: Go's runtime would not panic but end the process.
var machineMemory = MachineMemory()

// MachineMemory is the machine's memory in bytes, 0 if unknown.
func MachineMemory() int64 {
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
}

// MaxUnknown is the largest block allowed where the machine's memory is
// unknown. It is 64 TiB, which is also about what amd64 and arm64 can
// address.
const MaxUnknown = 1 << 46

// Limit is the largest block of Go memory the process may ask for. It is the
// machine's memory (MaxUnknown if unknown), and at most what an int holds.
func Limit() int64 {
	limit := int64(MaxUnknown)
	if machineMemory > 0 {
		limit = machineMemory
	}
	return int64(min(uint64(limit), uint64(math.MaxInt)))
}

// CheckSize reports an error wrapping plugin.ErrOutOfMemory if a block of
// size bytes of Go memory is more than the machine could ever hold (see
// Limit). Go cannot survive running out of memory, so this must be checked
// before allocating.
func CheckSize(size int64) error {
	if limit := Limit(); size > limit {
		what := "the machine's memory"
		if machineMemory <= 0 || limit < machineMemory {
			what = "the largest allocation allowed"
		}
		return fmt.Errorf("%w: %d bytes (%s) is more than %s (%d bytes, %s)", plugin.ErrOutOfMemory, size, human(size), what, limit, human(limit))
	}
	return nil
}

// ParseThreshold parses the value s of the environment variable name as a
// pool threshold in bytes, from 0 (no pool) to Limit(). The error names the
// variable, the value and the range.
func ParseThreshold(name, s string) (int64, error) {
	v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil || v < 0 || v > Limit() {
		return 0, fmt.Errorf("%s=%q: want a size in bytes from 0 (no pool) to %d (this machine's memory)", name, s, Limit())
	}
	return v, nil
}

// human shows a byte count in binary units.
func human(n int64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	f, i := float64(n)/1024, 0
	for f >= 1024 && i < len(units)-1 {
		f /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %ciB", f, units[i])
}

// makeBlock allocates a block. It turns the runtime's out-of-memory panic for
// absurd sizes into an error.
func makeBlock(n int64) (buf []byte, err error) {
	defer func() {
		if recover() != nil {
			err = fmt.Errorf("%w: cannot allocate %d bytes", plugin.ErrOutOfMemory, n)
		}
	}()
	if err := CheckSize(n); err != nil {
		return nil, err
	}
	return make([]byte, n), nil
}

// Free releases the allocation that starts at p, or ends the lending of
// the shared buffer that starts at p (Share).
func (m *Memory) Free(p plugin.Ptr) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	a, ok := m.live.Get(&allocation{base: p})
	if !ok {
		if m.unshare(p) {
			return nil
		}
		return fmt.Errorf("%w: free of %#x, which is not the start of a live allocation", plugin.ErrBadPointer, uint64(p))
	}
	m.live.Delete(a)
	if a.buf == nil {
		return nil // a failed AllocAt: nothing to give back
	}
	m.inUse -= a.size
	m.budget.give(a.size)
	class := int64(len(a.buf))
	if class <= m.threshold && m.pooled+class <= m.limit {
		m.pool[class] = append(m.pool[class], a.buf)
		m.pooled += class
	} else if m.isMapped(a.buf) {
		m.unmaps.unmap(a.buf)
	}
	return nil
}

// keys are the search keys of Bytes. A key escapes into the tree's search,
// and one made per call would be an allocation per kernel argument.
var keys = sync.Pool{New: func() any { return new(allocation) }}

// Bytes returns the memory [p, p+size), which must lie inside one live
// allocation. Otherwise the error wraps plugin.ErrBadPointer.
func (m *Memory) Bytes(p plugin.Ptr, size int64) ([]byte, error) {
	if size < 0 {
		return nil, fmt.Errorf("%w: negative size %d at %#x", plugin.ErrBadPointer, size, uint64(p))
	}
	key := keys.Get().(*allocation)
	key.base = p
	var c allocation // a copy: AllocAt may fill the allocation in later
	found := false
	m.mu.RLock()
	m.live.DescendLessOrEqual(key, func(x *allocation) bool { c, found = *x, true; return false })
	m.mu.RUnlock()
	keys.Put(key)
	a := &c
	if !found || p >= a.base+plugin.Ptr(max(a.size, 1)) {
		if b, ok := m.sharedBytes(p, size); ok {
			return b, nil
		}
		return nil, fmt.Errorf("%w: %#x is not inside a live allocation", plugin.ErrBadPointer, uint64(p))
	}
	if a.err != nil {
		return nil, a.err
	}
	off := int64(p - a.base)
	if size > a.size-off { // not off+size, which can overflow
		return nil, fmt.Errorf("%w: range %#x+%d runs past the end of the allocation at %#x (%d bytes)", plugin.ErrBadPointer, uint64(p), size, uint64(a.base), a.size)
	}
	if size == 0 && off < int64(len(a.buf)) {
		return a.buf[off : off : off+1], nil // keeps the address (cap 0 would not)
	}
	return a.buf[off : off+size : off+size], nil
}

// Reset drops every allocation, every shared buffer and the pool. Mapped
// blocks are unmapped once no Pin is left (a kernel that never returns
// keeps them).
func (m *Memory) Reset() {
	m.mu.Lock()
	m.live.Ascend(func(a *allocation) bool {
		if m.isMapped(a.buf) {
			m.unmaps.unmap(a.buf)
		}
		return true
	})
	for _, free := range m.pool {
		for _, b := range free {
			if m.isMapped(b) {
				m.unmaps.unmap(b)
			}
		}
	}
	m.live.Clear(false)
	m.shared.Clear(false)
	m.pool = map[int64][][]byte{}
	m.budget.give(m.inUse)
	m.pooled, m.inUse = 0, 0
	m.mu.Unlock()
}

// Stats reports the bytes kept in the pool, the pool's limit, and the bytes
// in live allocations.
func (m *Memory) Stats() (pooled, limit, inUse int64) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.pooled, m.limit, m.inUse
}
