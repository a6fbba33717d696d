package state

import (
	"errors"
	"testing"

	"github.com/goffload/offload/plugin"
)

// TestRanges: the host's addresses turn into the served device's at the
// same offset; what lies outside a range, runs past one or overlaps one is
// refused; a failed allocation reports its failure where it is used.
func TestRanges(t *testing.T) {
	var m Ranges
	oom := errors.New("out of memory here")
	for _, a := range []struct {
		base, size uint64
		to         plugin.Ptr
		err        error
	}{{0x1000, 100, 0xa000, nil}, {0x3000, 0, 0xb000, nil}, {0x2000, 4096, 0xc000, nil}, {0x5000, 8, 0, oom}} {
		if err := m.Add(a.base, a.size, a.to, a.err); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		p, size uint64
		want    plugin.Ptr
		bad     bool
	}{
		{0x1000, 100, 0xa000, false}, {0x1010, 10, 0xa010, false}, {0x1064, 0, 0xa064, false},
		{0x1064, 1, 0, true}, {0x1060, 8, 0, true}, {0x0fff, 1, 0, true},
		{0x2fff, 1, 0xcfff, false}, {0x3000, 0, 0xb000, false}, {0x3000, 1, 0, true}, {0x4000, 0, 0, true},
	} {
		got, err := m.Lookup(c.p, c.size)
		if c.bad != (err != nil) || (!c.bad && got != c.want) {
			t.Errorf("Lookup(%#x, %d) = %#x, %v; want %#x (bad %v)", c.p, c.size, got, err, c.want, c.bad)
		}
		if c.bad && !errors.Is(err, plugin.ErrBadPointer) {
			t.Errorf("Lookup(%#x, %d): %v, want ErrBadPointer", c.p, c.size, err)
		}
	}
	if _, err := m.Lookup(0x5004, 4); err != oom {
		t.Errorf("failed allocation: %v, want its failure", err)
	}
	for _, o := range [][2]uint64{{0x1000, 1}, {0x1050, 1}, {0x0f00, 0x200}, {0x2800, 1}, {0x3000, 0}} {
		if err := m.Add(o[0], o[1], 1, nil); !errors.Is(err, plugin.ErrBadPointer) {
			t.Errorf("Add(%#x, %d) over a range: %v", o[0], o[1], err)
		}
	}
	if to, err, ok := m.Remove(0x2000); !ok || err != nil || to != 0xc000 {
		t.Errorf("Remove = %#x, %v, %v", to, err, ok)
	}
	if _, _, ok := m.Remove(0x2000); ok {
		t.Error("removed twice")
	}
	if _, err := m.Lookup(0x2000, 1); err == nil {
		t.Error("a removed range still translates")
	}
	var left []plugin.Ptr
	m.Each(func(p plugin.Ptr) { left = append(left, p) })
	if len(left) != 2 || m.Len() != 0 {
		t.Errorf("Each gave %v (the failed allocation left out), Len %d after", left, m.Len())
	}
}
