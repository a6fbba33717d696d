package placement

import "testing"

// TestDigest: a region's digest changes with where its valid copies are
// and which devices hold its memory, not with who wrote it.
func TestDigest(t *testing.T) {
	x, y := Buf{Addr: 0x1000, Size: 64}, Buf{Addr: 0x2000, Size: 64}
	regions := []Buf{x, y}
	tb := NewTable()
	absent := tb.Digest(regions)
	tb.Commit(0, []Access{{Buf: x, Read: true}}, 1)
	readOn0 := tb.Digest(regions)
	if readOn0 == absent {
		t.Fatal("a region made by a read: digest unchanged")
	}
	tb.Commit(0, []Access{{Buf: x, Read: true, Write: true}}, 2)
	wrote := tb.Digest(regions)
	if wrote == readOn0 {
		t.Fatal("a write (the host's copy no longer valid): digest unchanged")
	}
	tb.Commit(0, []Access{{Buf: x, Read: true, Write: true}}, 3)
	if tb.Digest(regions) != wrote {
		t.Fatal("another writer on the same device: digest changed")
	}
	tb.Commit(1, []Access{{Buf: Buf{Addr: x.Addr, Size: 32}, Read: true}}, 4)
	if tb.Digest(regions) == wrote {
		t.Fatal("a copy of half of x to device 1: digest unchanged")
	}
	tb.HostValid(x)
	before := tb.Digest(regions)
	tb.Lost(1)
	if tb.Digest(regions) == before {
		t.Fatal("device 1 lost: digest unchanged")
	}
	all := tb.Digests()
	if got := Combine(regions, func(b Buf) uint64 { return all[b] }); got != tb.Digest(regions) {
		t.Fatalf("Combine of Digests %#x, Digest %#x", got, tb.Digest(regions))
	}
}
