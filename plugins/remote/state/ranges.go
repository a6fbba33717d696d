package state

import (
	"fmt"
	"sort"

	"github.com/goffload/offload/plugin"
)

// Ranges is a proxied device's address translation, on the device process's
// side. It holds the ranges the host chose for its allocations. (The host
// numbers them itself, so that a mapping never waits for the device.) Each
// comes with the pointer that the served device returned for it. Lookup turns
// a host address inside a range (base plus offset) into the served device's
// address at the same offset. A range whose allocation failed keeps the
// failure. The first operation that uses it reports it.
type Ranges struct {
	r []span // sorted by base, disjoint
}

type span struct {
	base, size uint64
	to         plugin.Ptr
	err        error
}

// find returns the index of the last span whose base is at most p, or -1.
func (m *Ranges) find(p uint64) int {
	return sort.Search(len(m.r), func(i int) bool { return m.r[i].base > p }) - 1
}

// Add enters the host's range [base, base+size) as the served device's
// allocation to. Or it enters it as an allocation that failed with err. A
// range that overlaps one already there is the host's mistake: Add refuses
// it. A zero size holds no bytes but still takes its base.
func (m *Ranges) Add(base, size uint64, to plugin.Ptr, err error) error {
	if base+max(size, 1) < base {
		return fmt.Errorf("%w: range %#x+%d wraps around", plugin.ErrBadPointer, base, size)
	}
	s := span{base: base, size: size, to: to, err: err}
	i := m.find(base)
	if i >= 0 && (m.r[i].base == base || base < m.r[i].base+m.r[i].size) {
		return fmt.Errorf("%w: range %#x+%d overlaps %#x+%d", plugin.ErrBadPointer, base, size, m.r[i].base, m.r[i].size)
	}
	if i+1 < len(m.r) && base+size > m.r[i+1].base {
		return fmt.Errorf("%w: range %#x+%d overlaps %#x+%d", plugin.ErrBadPointer, base, size, m.r[i+1].base, m.r[i+1].size)
	}
	if i == len(m.r)-1 { // the host's addresses grow: the common case appends
		m.r = append(m.r, s)
		return nil
	}
	m.r = append(m.r, span{})
	copy(m.r[i+2:], m.r[i+1:])
	m.r[i+1] = s
	return nil
}

// Remove forgets the range at base. It returns the served device's pointer
// for it, or the failure it kept. ok is false if no range starts at base.
func (m *Ranges) Remove(base uint64) (to plugin.Ptr, err error, ok bool) {
	i := m.find(base)
	if i < 0 || m.r[i].base != base {
		return 0, nil, false
	}
	s := m.r[i]
	m.r = append(m.r[:i], m.r[i+1:]...)
	return s.to, s.err, true
}

// Lookup returns the served device's address of the host's [p, p+size). That
// must lie inside one range; a zero size may sit at the range's end. A range
// whose allocation failed returns its failure.
func (m *Ranges) Lookup(p, size uint64) (plugin.Ptr, error) {
	i := m.find(p)
	if i < 0 {
		return 0, fmt.Errorf("%w: %#x is in no allocation", plugin.ErrBadPointer, p)
	}
	s := m.r[i]
	off := p - s.base
	if off > s.size || size > s.size-off || (size > 0 && off == s.size) {
		return 0, fmt.Errorf("%w: [%#x, +%d) runs past the allocation at %#x of %d bytes", plugin.ErrBadPointer, p, size, s.base, s.size)
	}
	if s.err != nil {
		return 0, s.err
	}
	return s.to + plugin.Ptr(off), nil
}

// Len is how many ranges there are.
func (m *Ranges) Len() int { return len(m.r) }

// Each calls f with every range's served pointer, and forgets them all.
// Allocations that failed are left out.
func (m *Ranges) Each(f func(to plugin.Ptr)) {
	for _, s := range m.r {
		if s.err == nil {
			f(s.to)
		}
	}
	m.r = nil
}
