package hostmem

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/goffload/offload/plugin"
)

// region is a range of host memory that buffers lent by Share cover: the
// union of those that overlap. Overlapping buffers lie in one Go object;
// distinct objects never overlap. So every byte of a region is memory of that
// object, which the buffers keep alive.
type region struct {
	lo, hi uintptr
	bufs   [][]byte // the lent buffers, by address
}

// regionKeys are the search keys of sharedBytes (see keys).
var regionKeys = sync.Pool{New: func() any { return new(region) }}

func addr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// Share lends m the host buffer b. Until Free of the address it returns,
// Bytes resolves that address, and any inside b, to b's own memory. So the
// device's kernels and copies work on it in place. The address is b's host
// address. A buffer may be lent again, whole or in part, while it is lent.
// Each Share is ended by a Free of its address. b must not be empty.
func (m *Memory) Share(b []byte) (plugin.Ptr, error) {
	if len(b) == 0 {
		return 0, fmt.Errorf("%w: sharing an empty buffer", plugin.ErrBadPointer)
	}
	lo := addr(b)
	hi := lo + uintptr(len(b))
	m.mu.Lock()
	defer m.mu.Unlock()
	r := &region{lo: lo, hi: hi, bufs: [][]byte{b}}
	// The regions that overlap [lo, hi): those below hi whose end is past lo.
	var over []*region
	m.shared.DescendLessOrEqual(&region{lo: hi - 1}, func(x *region) bool {
		if x.hi <= lo {
			return false
		}
		over = append(over, x)
		return true
	})
	for _, x := range over {
		m.shared.Delete(x)
		r.lo, r.hi = min(r.lo, x.lo), max(r.hi, x.hi)
		r.bufs = append(r.bufs, x.bufs...)
	}
	slices.SortFunc(r.bufs, func(a, b []byte) int { return cmpAddr(addr(a), addr(b)) })
	m.shared.ReplaceOrInsert(r)
	return plugin.Ptr(lo), nil
}

func cmpAddr(a, b uintptr) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// unshare ends one lending of a buffer at p, and reports whether there was
// one. If several start there, it ends the shortest: what is left covers at
// least what each lending needs. m.mu is held.
func (m *Memory) unshare(p plugin.Ptr) bool {
	lo := uintptr(p)
	var r *region
	m.shared.DescendLessOrEqual(&region{lo: lo}, func(x *region) bool { r = x; return false })
	if r == nil || lo >= r.hi {
		return false
	}
	at := -1
	for i, b := range r.bufs {
		if addr(b) == lo && (at < 0 || len(b) < len(r.bufs[at])) {
			at = i
		}
	}
	if at < 0 {
		return false
	}
	m.shared.Delete(r)
	bufs := slices.Delete(slices.Clone(r.bufs), at, at+1)
	// What is left may fall apart into regions that no longer overlap.
	for len(bufs) > 0 {
		n := &region{lo: addr(bufs[0]), hi: addr(bufs[0]) + uintptr(len(bufs[0]))}
		i := 0
		for ; i < len(bufs) && addr(bufs[i]) < n.hi; i++ {
			n.hi = max(n.hi, addr(bufs[i])+uintptr(len(bufs[i])))
		}
		n.bufs = bufs[:i:i]
		m.shared.ReplaceOrInsert(n)
		bufs = bufs[i:]
	}
	return true
}

// sharedBytes is Bytes for memory that Share lent: [p, p+size) inside one
// region.
func (m *Memory) sharedBytes(p plugin.Ptr, size int64) ([]byte, bool) {
	key := regionKeys.Get().(*region)
	key.lo = uintptr(p)
	var r *region
	m.mu.RLock()
	if m.shared.Len() > 0 {
		m.shared.DescendLessOrEqual(key, func(x *region) bool { r = x; return false })
	}
	m.mu.RUnlock()
	regionKeys.Put(key)
	if r == nil || uintptr(p) >= r.hi || uint64(size) > uint64(r.hi-uintptr(p)) {
		return nil, false
	}
	// r.bufs[0] starts the region and keeps its object alive; every byte
	// of the region is of that object.
	base := unsafe.SliceData(r.bufs[0])
	at := (*byte)(unsafe.Add(unsafe.Pointer(base), uintptr(p)-r.lo))
	if size == 0 {
		return unsafe.Slice(at, 1)[:0:1], true // keeps the address, as Bytes does
	}
	return unsafe.Slice(at, size), true
}

// SharedBytes reports the bytes of host buffers lent to m (Share), counted
// once where they overlap.
func (m *Memory) SharedBytes() int64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var n int64
	m.shared.Ascend(func(r *region) bool { n += int64(r.hi - r.lo); return true })
	return n
}

// ParseSharing parses the value s of the environment variable name. It says
// whether host devices share the host's memory. "separate" (or empty) is for
// memory of their own, "shared" for the host's. The error names the variable,
// the value and the two choices.
func ParseSharing(name, s string) (shared bool, err error) {
	switch strings.TrimSpace(s) {
	case "", "separate":
		return false, nil
	case "shared":
		return true, nil
	}
	return false, fmt.Errorf("%s=%q: want separate (memory of each device's own, the default) or shared (kernels work on the program's buffers in place)", name, s)
}
