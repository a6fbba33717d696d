package core

import "testing"

// TestCopyRepeatsBounded: the data-region hint's count fires once per
// range at the repeatHint-th copy, whatever came between, and forgets the
// ranges copied least recently past repeatRanges (its map does not grow
// with the program's buffers).
func TestCopyRepeatsBounded(t *testing.T) {
	var c copyRepeats
	x, y := copyRange{addr: 0x1000, size: 64}, copyRange{addr: 0x2000, size: 64}
	hints := 0
	for range 2 * repeatHint {
		for _, r := range []copyRange{x, y} {
			if c.count(r) {
				hints++
			}
		}
	}
	if hints != 2 {
		t.Errorf("%d hints for two alternating ranges, want 2", hints)
	}
	for i := range 10 * repeatRanges {
		c.count(copyRange{addr: uintptr(0x10000 + 64*i), size: 64})
	}
	if len(c.ranges) > repeatRanges {
		t.Errorf("%d ranges kept, want at most %d", len(c.ranges), repeatRanges)
	}
	if c.ranges[x] != nil {
		t.Error("a range not copied for a long while is still counted")
	}
}
