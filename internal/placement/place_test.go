package placement

import (
	"errors"
	"slices"
	"testing"
	"time"
)

// TestPlaceFollowsTheData: a task that reads what a task wrote on device 1
// goes to device 1 (no copy), unless device 1 cannot run it: then its
// plan copies the input from device 1 and allocates it on the other.
func TestPlaceFollowsTheData(t *testing.T) {
	tb, m := NewTable(), NewModel(2)
	x := Buf{Addr: 0x1000, Size: 4096}
	now := time.Now()
	all := func(int) bool { return true }
	w := []Access{{Buf: x, Write: true}}
	// Teach the model the kernels' times on both devices: equal.
	for d := range 2 {
		m.Done("k", d, SizeClass(4096), now, time.Time{}, now.Add(time.Millisecond))
	}
	p, err := Place(tb, m, now, "k", 4096, w, func(d int) bool { return d == 1 })
	if err != nil || p.Choice.Dev != 1 {
		t.Fatalf("writer placed on %d (%v), want 1", p.Choice.Dev, err)
	}
	if len(p.Copies) != 0 || !slices.Equal(p.Alloc, []Buf{x}) || !slices.Equal(p.Regions, []Buf{x}) {
		t.Fatalf("writer's plan: copies %v, alloc %v, regions %v; want no copies, x allocated, x its region", p.Copies, p.Alloc, p.Regions)
	}
	tb.Commit(1, w, 1)
	r := []Access{{Buf: x, Read: true}}
	p, err = Place(tb, m, now, "k", 4096, r, all)
	if err != nil || p.Choice.Dev != 1 || len(p.Copies) != 0 || len(p.Alloc) != 0 {
		t.Fatalf("reader: %v on %d, copies %v, alloc %v; want device 1 with nothing to copy or allocate", err, p.Choice.Dev, p.Copies, p.Alloc)
	}
	if len(p.Reads[0]) != 1 || p.Reads[0][0].Writer != 1 {
		t.Fatalf("reader's lineage %v, want x written by task 1", p.Reads)
	}
	p, err = Place(tb, m, now, "k", 4096, r, func(d int) bool { return d == 0 })
	if err != nil || p.Choice.Dev != 0 {
		t.Fatalf("reader without device 1: on %d (%v), want 0", p.Choice.Dev, err)
	}
	if len(p.Copies) != 1 || p.Copies[0].From != 1 || p.Copies[0].Buf != x || !slices.Equal(p.Alloc, []Buf{x}) {
		t.Fatalf("reader on 0: copies %v, alloc %v; want x from device 1, allocated", p.Copies, p.Alloc)
	}
	p, _ = Place(tb, m, now, "k", 4096, r, func(int) bool { return false })
	if p.Choice.Dev != -1 {
		t.Fatalf("no device can run it: placed on %d, want -1", p.Choice.Dev)
	}
	// Place records nothing: the table still has x on device 1 only.
	if devs, host := tb.Valid(x); !slices.Equal(devs, []int{1}) || host {
		t.Fatalf("after plans: x valid on %v (host %v), want device 1 only", devs, host)
	}
}

// TestPlaceRefusesPartialOverlap: the chosen device's plan refuses a
// section that partly overlaps a region in use, with ErrOverlap.
func TestPlaceRefusesPartialOverlap(t *testing.T) {
	tb, m := NewTable(), NewModel(1)
	x := Buf{Addr: 0x1000, Size: 64}
	tb.Commit(0, []Access{{Buf: x, Write: true}}, 1)
	_, err := Place(tb, m, time.Now(), "k", 64, []Access{{Buf: Buf{Addr: 0x1020, Size: 64}, Read: true}}, func(int) bool { return true })
	if !errors.Is(err, ErrOverlap) {
		t.Fatalf("partial overlap: %v, want ErrOverlap", err)
	}
}

// TestFirstVersions: a task keeps the first version of a new region it
// reads, not of one it only writes, and of a named region (EnterData)
// only when it reads a part no task wrote; each region once.
func TestFirstVersions(t *testing.T) {
	x := Buf{Addr: 0x1000, Size: 64}
	lo, hi := Buf{Addr: 0x1000, Size: 32}, Buf{Addr: 0x1020, Size: 32}
	none := func(Buf) (bool, bool) { return false, false }
	named := func(Buf) (bool, bool) { return true, true }
	held := func(Buf) (bool, bool) { return true, false }
	cases := []struct {
		name  string
		acc   []Access
		reads [][]Piece
		known Known
		want  []Buf
	}{
		{"new, read", []Access{{Buf: x, Read: true}}, [][]Piece{{{Buf: x}}}, none, []Buf{x}},
		{"new, written only", []Access{{Buf: x, Write: true}}, [][]Piece{nil}, none, nil},
		{"new, read twice", []Access{{Buf: lo, Read: true}, {Buf: hi, Read: true, Write: true}}, [][]Piece{{{Buf: lo}}, {{Buf: hi}}}, none, []Buf{x}},
		{"named, a part no task wrote", []Access{{Buf: lo, Read: true}}, [][]Piece{{{Buf: lo}}}, named, []Buf{x}},
		{"named, written by a task", []Access{{Buf: lo, Read: true}}, [][]Piece{{{Buf: lo, Writer: 3}}}, named, nil},
		{"kept already", []Access{{Buf: lo, Read: true}}, [][]Piece{{{Buf: lo}}}, held, nil},
	}
	for _, c := range cases {
		regions := make([]Buf, len(c.acc))
		for i := range regions {
			regions[i] = x
		}
		got := FirstVersions(c.acc, Plan{Regions: regions, Reads: c.reads}, c.known)
		if !slices.Equal(got, c.want) {
			t.Errorf("%s: keeps %v, want %v", c.name, got, c.want)
		}
	}
}

// TestSourceOf: a piece no task wrote comes from the snapshot; one whose
// writer's outputs are kept from the memo; one read before from what was
// saved; otherwise from a working device whose copy is intact and holds
// all of it, in the order recorded; and else the writer runs again.
func TestSourceOf(t *testing.T) {
	x := Buf{Addr: 0x1000, Size: 64}
	lo := Buf{Addr: 0x1000, Size: 32}
	p := Piece{Buf: lo, Writer: 7}
	up := func(d int) bool { return d != 2 } // device 2 is lost
	cases := []struct {
		name  string
		p     Piece
		w     Writer
		want  Source
		holds []int // the Refs of the holders to read from
	}{
		{"no writer", Piece{Buf: lo}, Writer{Memo: true}, FromSnapshot, nil},
		{"kept", p, Writer{Memo: true, Holders: []Holder{{Buf: x, Dev: 0, Intact: true}}}, FromMemo, nil},
		{"saved", p, Writer{Saved: []Buf{x}, Holders: []Holder{{Buf: x, Dev: 0, Intact: true}}}, FromSaved, nil},
		{"saved, another part", p, Writer{Saved: []Buf{{Addr: 0x1020, Size: 32}}}, FromRerun, nil},
		{"survivors", p, Writer{Holders: []Holder{
			{Buf: x, Dev: 2, Intact: true, Ref: 0},                           // lost
			{Buf: x, Dev: 1, Intact: false, Ref: 1},                          // written since
			{Buf: Buf{Addr: 0x1010, Size: 32}, Dev: 0, Intact: true, Ref: 2}, // holds part of it
			{Buf: x, Dev: 1, Intact: true, Ref: 3},
			{Buf: lo, Dev: 0, Intact: true, Ref: 4},
		}}, FromSurvivor, []int{3, 4}},
		{"none intact", p, Writer{Holders: []Holder{{Buf: x, Dev: 1}, {Buf: x, Dev: 2, Intact: true}}}, FromRerun, nil},
	}
	for _, c := range cases {
		src, hs := SourceOf(c.p, c.w, up)
		var refs []int
		for _, h := range hs {
			refs = append(refs, h.Ref)
		}
		if src != c.want || !slices.Equal(refs, c.holds) {
			t.Errorf("%s: %v from %v, want %v from %v", c.name, src, refs, c.want, c.holds)
		}
	}
}
