// Package placement is the plain state behind Any-tasks (offload.Any).
// Table says where the valid copies of each buffer are. Model says which
// device a task should run on. The package does no I/O and starts nothing.
// The runtime lowers its decisions to ordinary constructs: copies, updates,
// target tasks. Tests drive it without processes.
package placement

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
)

// Host stands for the program's own memory where a device number goes.
const Host = -1

// Buf is a host buffer, or a section of one, used by Any-tasks: the
// address range of its memory.
type Buf struct {
	Addr, Size uintptr
}

func (b Buf) end() uintptr { return b.Addr + b.Size }

// Overlaps reports whether b and c share a byte.
func (b Buf) Overlaps(c Buf) bool { return b.Addr < c.end() && c.Addr < b.end() }

// Inside reports whether every byte of b is in c.
func (b Buf) Inside(c Buf) bool { return b.Addr >= c.Addr && b.end() <= c.end() }

// Access is what a task does with a buffer. A task that reads it needs its
// copy on the task's device valid before it runs. After a task that writes
// it, the task's device holds the one valid copy. A task that does neither
// (scratch) only needs memory there.
type Access struct {
	Buf         Buf
	Read, Write bool
}

// Copy is a copy a placement needs: Buf (a section of Region) from device
// From (or Host) to device To (or Host).
type Copy struct {
	Buf, Region Buf
	From, To    int
}

// MaxDevices is how many devices a Table tracks (a bit each).
const MaxDevices = 64

// region is the state of one buffer that Any-tasks use: the first section
// used of it, which later sections lie inside. Its memory is cut into
// segments at every section's ends, each with the devices whose copies of
// it are valid (a bit each) and whether the host's is.
type region struct {
	cuts   []uintptr // the segments' starts, then the region's end
	segs   []seg
	mapped uint64 // the devices that hold memory for the region
}

type seg struct {
	valid  uint64
	host   bool
	writer int64 // the task that wrote it last (its lineage); 0: none since the region was made
}

// Piece is a part of a buffer and the task that wrote it last (Writers).
type Piece struct {
	Buf    Buf
	Writer int64
}

// Table is the coherence state of the buffers Any-tasks use, in the order
// their tasks are created. A copy is valid on a device once a task there
// wrote it, or once a copy to it was planned: the tasks that use it are
// ordered after that copy. A write leaves one valid copy.
// The state moves in program order, not in execution order. The runtime
// orders every task and copy on a buffer by depend clauses on it. So the
// order tasks are created in is the order their effects land in.
//
// A buffer's first section that Any-tasks use is its region: later
// sections must lie inside it, or not overlap it at all.
//
// A Table is not safe for concurrent use.
type Table struct {
	regions map[Buf]*region
}

// NewTable returns an empty table.
func NewTable() *Table { return &Table{regions: map[Buf]*region{}} }

// Len is the number of regions tracked.
func (t *Table) Len() int { return len(t.regions) }

// Tracked returns the tracked region that overlaps b, if any.
func (t *Table) Tracked(b Buf) (Buf, bool) {
	if t.regions[b] != nil {
		return b, true
	}
	for c := range t.regions {
		if c.Overlaps(b) {
			return c, true
		}
	}
	return Buf{}, false
}

// Region returns the region b lies in: b itself for a buffer not tracked
// yet (it becomes one).
func (t *Table) Region(b Buf) Buf {
	if base, r, err := t.find(b); err == nil && r != nil {
		return base
	}
	return b
}

// ErrOverlap is wrapped by Plan's error for a section that overlaps a
// region without lying inside it.
var ErrOverlap = fmt.Errorf("a section that overlaps memory that Any-tasks use without lying inside it")

// find returns the region b lies inside (nil if b overlaps none), or an
// error if b overlaps one without lying inside it.
func (t *Table) find(b Buf) (Buf, *region, error) {
	if r := t.regions[b]; r != nil {
		return b, r, nil
	}
	c, ok := t.Tracked(b)
	if !ok {
		return Buf{}, nil, nil
	}
	if !b.Inside(c) {
		return Buf{}, nil, fmt.Errorf("%w: [%#x, +%d) overlaps [%#x, +%d), which Any-tasks used first", ErrOverlap, b.Addr, b.Size, c.Addr, c.Size)
	}
	return c, t.regions[c], nil
}

// each calls f for every segment of r that overlaps b, clipped to b.
func (r *region) each(b Buf, f func(lo, hi uintptr, s *seg)) {
	i, _ := slices.BinarySearch(r.cuts, b.Addr)
	if i == len(r.cuts) || r.cuts[i] > b.Addr {
		i--
	}
	for ; i < len(r.segs) && r.cuts[i] < b.end(); i++ {
		f(max(r.cuts[i], b.Addr), min(r.cuts[i+1], b.end()), &r.segs[i])
	}
}

// cut splits r's segments at x (a no-op at a cut or outside).
func (r *region) cut(x uintptr) {
	i, found := slices.BinarySearch(r.cuts, x)
	if found || i == 0 || i == len(r.cuts) {
		return
	}
	r.cuts = slices.Insert(r.cuts, i, x)
	r.segs = slices.Insert(r.segs, i, r.segs[i-1])
}

// pieces gathers segments into copies: adjacent ones from the same source
// are one copy.
type pieces struct {
	out    []Copy
	region Buf
	to     int
}

func (p *pieces) add(lo, hi uintptr, from int) {
	if n := len(p.out); n > 0 && p.out[n-1].From == from && p.out[n-1].Buf.end() == lo {
		p.out[n-1].Buf.Size += hi - lo
		return
	}
	p.out = append(p.out, Copy{Buf: Buf{Addr: lo, Size: hi - lo}, Region: p.region, From: from, To: p.to})
}

// Track makes b a region, valid on the host only, before any task uses it.
// It is for a program that names a whole buffer first, so that later
// sections of it may be any parts: a band each, then rows across bands.
// It returns the region b lies in and whether Track made it. A b that
// overlaps a region without lying inside it is refused, as Plan refuses
// it.
func (t *Table) Track(b Buf) (Buf, bool, error) {
	base, r, err := t.find(b)
	if err != nil {
		return Buf{}, false, err
	}
	if r != nil {
		return base, false, nil
	}
	t.regions[b] = &region{cuts: []uintptr{b.Addr, b.end()}, segs: []seg{{host: true}}}
	return b, true, nil
}

// Plan returns what running a task with accesses acc on device d needs.
// It returns the copies, and the regions d holds no memory for yet.
// The copies are, for each section the task reads, the parts whose copy on
// d is not valid. Each comes from the cheapest valid copy by cost, which
// takes the source (Host or a device). A buffer the table has not seen is
// valid on the host only, and becomes a region.
func (t *Table) Plan(d int, acc []Access, cost func(from, to int, b Buf) float64) (copies []Copy, alloc []Buf, err error) {
	if d < 0 || d >= MaxDevices {
		return nil, nil, fmt.Errorf("placement: device %d out of range", d)
	}
	bit := uint64(1) << d
	for i, a := range acc {
		if slices.ContainsFunc(acc[:i], func(b Access) bool { return b.Buf.Overlaps(a.Buf) }) {
			if sameRead(acc[:i], a) {
				continue // read through two parameters: planned once
			}
			return nil, nil, fmt.Errorf("placement: a task uses [%#x, +%d) twice, or two overlapping sections, and writes one of them (two parameters may only read the same section)", a.Buf.Addr, a.Buf.Size)
		}
		base, r, err := t.find(a.Buf)
		if err != nil {
			return nil, nil, err
		}
		if r == nil {
			// New: valid on the host only. (Two sections of one new
			// buffer in one task are two regions: they do not overlap.)
			alloc = append(alloc, a.Buf)
			if a.Read {
				copies = append(copies, Copy{Buf: a.Buf, Region: a.Buf, From: Host, To: d})
			}
			continue
		}
		if r.mapped&bit == 0 && !slices.Contains(alloc, base) {
			alloc = append(alloc, base)
		}
		if !a.Read {
			continue
		}
		p := pieces{region: base, to: d}
		var bad error
		r.each(a.Buf, func(lo, hi uintptr, s *seg) {
			if s.valid&bit != 0 || bad != nil {
				return
			}
			from, best := -2, 0.0
			piece := Buf{Addr: lo, Size: hi - lo}
			if s.host {
				from = Host
				if cost != nil {
					best = cost(Host, d, piece)
				}
			}
			for v := s.valid; v != 0; v &= v - 1 {
				src := bits.TrailingZeros64(v)
				c := 0.0
				if cost != nil {
					c = cost(src, d, piece)
				}
				if from == -2 || c < best {
					from, best = src, c
				}
			}
			if from == -2 {
				bad = fmt.Errorf("placement: [%#x, +%d) has no valid copy", lo, hi-lo)
				return
			}
			p.add(lo, hi, from)
		})
		if bad != nil {
			return nil, nil, bad
		}
		copies = append(copies, p.out...)
	}
	return copies, alloc, nil
}

// sameRead reports whether a only reads, and every access of acc it
// overlaps is a read only of the same section.
func sameRead(acc []Access, a Access) bool {
	if a.Write || !a.Read {
		return false
	}
	for _, b := range acc {
		if b.Buf.Overlaps(a.Buf) && (b.Buf != a.Buf || b.Write || !b.Read) {
			return false
		}
	}
	return true
}

// Commit records that task by, with accesses acc, was placed on d after
// the copies Plan gave. by is an id the caller gives, not 0. Then d holds
// memory for each region and a valid copy of what the task reads.
// A write leaves d's the only valid copy of what it writes, whose writer
// is by.
func (t *Table) Commit(d int, acc []Access, by int64) {
	bit := uint64(1) << d
	for _, a := range acc {
		_, r, err := t.find(a.Buf)
		if err != nil {
			continue // Plan refused it
		}
		if r == nil {
			r = &region{cuts: []uintptr{a.Buf.Addr, a.Buf.end()}, segs: []seg{{host: true}}}
			t.regions[a.Buf] = r
		}
		r.mapped |= bit
		if !a.Read && !a.Write {
			continue
		}
		r.cut(a.Buf.Addr)
		r.cut(a.Buf.end())
		r.each(a.Buf, func(_, _ uintptr, s *seg) {
			if a.Write {
				s.valid, s.host, s.writer = bit, false, by
			} else {
				s.valid |= bit
			}
		})
	}
}

// PlanHost returns the copies a host task with accesses acc needs; the
// task runs on the program's memory. For each section it reads, they are
// the parts whose host copy is not valid, each from a device with a valid
// one. A section that is not in a region needs nothing. One that overlaps
// a region without lying inside it is refused.
func (t *Table) PlanHost(acc []Access) ([]Copy, error) {
	var copies []Copy
	for _, a := range acc {
		base, r, err := t.find(a.Buf)
		if err != nil {
			return nil, err
		}
		if r == nil || !a.Read {
			continue
		}
		p := pieces{region: base, to: Host}
		r.each(a.Buf, func(lo, hi uintptr, s *seg) {
			if !s.host && s.valid != 0 {
				p.add(lo, hi, bits.TrailingZeros64(s.valid))
			}
		})
		copies = append(copies, p.out...)
	}
	return copies, nil
}

// CommitHost records that host task by, with accesses acc, was made after
// the copies PlanHost gave. The host's copy of what it reads is then valid.
// Its copy of what it writes is the only valid one, whose writer is by.
func (t *Table) CommitHost(acc []Access, by int64) {
	for _, a := range acc {
		_, r, err := t.find(a.Buf)
		if err != nil || r == nil || (!a.Read && !a.Write) {
			continue
		}
		r.cut(a.Buf.Addr)
		r.cut(a.Buf.end())
		r.each(a.Buf, func(_, _ uintptr, s *seg) {
			if a.Write {
				s.valid, s.writer = 0, by
			}
			s.host = true
		})
	}
}

// Stale returns the parts of every region whose host copy is not valid,
// each with a device that holds a valid one.
func (t *Table) Stale() []Copy {
	var out []Copy
	for base := range t.regions {
		out = append(out, t.StaleOf([]Buf{base})...)
	}
	slices.SortFunc(out, func(x, y Copy) int { return cmp.Compare(x.Buf.Addr, y.Buf.Addr) })
	return out
}

// StaleOf returns the parts of bufs whose host copy is not valid, as Stale
// does.
func (t *Table) StaleOf(bufs []Buf) []Copy {
	var out []Copy
	for _, b := range bufs {
		base, r, err := t.find(b)
		if err != nil || r == nil {
			continue
		}
		p := pieces{region: base, to: Host}
		r.each(b, func(lo, hi uintptr, s *seg) {
			if !s.host && s.valid != 0 {
				p.add(lo, hi, bits.TrailingZeros64(s.valid))
			}
		})
		out = append(out, p.out...)
	}
	return out
}

// HostValid records that the host's copy of b is valid again (copied back).
func (t *Table) HostValid(b Buf) {
	if _, r, err := t.find(b); err == nil && r != nil {
		r.cut(b.Addr)
		r.cut(b.end())
		r.each(b, func(_, _ uintptr, s *seg) { s.host = true })
	}
}

// Release forgets every region, and returns, for each, the devices that
// hold memory for it (to be freed): the program has its buffers back.
func (t *Table) Release() map[Buf][]int {
	out := make(map[Buf][]int, len(t.regions))
	for b, r := range t.regions {
		for m := r.mapped; m != 0; m &= m - 1 {
			out[b] = append(out[b], bits.TrailingZeros64(m))
		}
	}
	clear(t.regions)
	return out
}

// Lost records that device d and its memory are gone: its copies are no
// longer valid. It returns the parts of regions that had no other valid
// copy.
func (t *Table) Lost(d int) []Buf {
	bit := uint64(1) << d
	var gone []Buf
	for _, r := range t.regions {
		r.mapped &^= bit
		for i := range r.segs {
			s := &r.segs[i]
			if s.valid&bit == 0 {
				continue
			}
			s.valid &^= bit
			if s.valid == 0 && !s.host {
				gone = append(gone, Buf{Addr: r.cuts[i], Size: r.cuts[i+1] - r.cuts[i]})
			}
		}
	}
	return gone
}

// Valid reports where all of b is valid: the devices whose copies of every
// part of it are, and whether the host's is.
func (t *Table) Valid(b Buf) (devs []int, host bool) {
	_, r, err := t.find(b)
	if err != nil || r == nil {
		return nil, true
	}
	all, host := ^uint64(0), true
	r.each(b, func(_, _ uintptr, s *seg) {
		all &= s.valid
		host = host && s.host
	})
	for v := all; v != 0; v &= v - 1 {
		devs = append(devs, bits.TrailingZeros64(v))
	}
	return devs, host
}

// Writers returns the parts of b and the task that wrote each last, in
// the order tasks were made: a task's lineage. A writer is Commit's by, or
// 0 for a part no task wrote since its region was made. Adjacent parts with
// one writer are one piece. A b outside every region is one piece written
// by none.
func (t *Table) Writers(b Buf) []Piece {
	_, r, err := t.find(b)
	if err != nil || r == nil {
		return []Piece{{Buf: b}}
	}
	var out []Piece
	r.each(b, func(lo, hi uintptr, s *seg) {
		if n := len(out); n > 0 && out[n-1].Writer == s.writer && out[n-1].Buf.end() == lo {
			out[n-1].Buf.Size += hi - lo
			return
		}
		out = append(out, Piece{Buf: Buf{Addr: lo, Size: hi - lo}, Writer: s.writer})
	})
	return out
}

// Evictable returns the regions whose memory on device d may be freed
// without losing data, largest first. Such a region is mapped there and is
// none of keep. Every part of it that is valid on d is valid somewhere else
// too: on another device, or on the host.
func (t *Table) Evictable(d int, keep []Buf) []Buf {
	bit := uint64(1) << d
	var out []Buf
	for b, r := range t.regions {
		if r.mapped&bit == 0 || slices.Contains(keep, b) {
			continue
		}
		safe := true
		for _, s := range r.segs {
			if s.valid&bit != 0 && s.valid == bit && !s.host {
				safe = false
				break
			}
		}
		if safe {
			out = append(out, b)
		}
	}
	slices.SortFunc(out, func(x, y Buf) int {
		if c := cmp.Compare(y.Size, x.Size); c != 0 {
			return c
		}
		return cmp.Compare(x.Addr, y.Addr)
	})
	return out
}

// Drop records that region b's memory on device d was freed: d holds no
// memory for it, and no valid copy of any part of it.
func (t *Table) Drop(d int, b Buf) {
	r := t.regions[b]
	if r == nil {
		return
	}
	bit := uint64(1) << d
	r.mapped &^= bit
	for i := range r.segs {
		r.segs[i].valid &^= bit
	}
}

// Digest is a summary of the state of regions (in the order given): per
// region, its segments' valid copies and the devices holding its memory,
// not who wrote them. Where two tables have the same digest of the same
// regions (but for a collision of the hash), a plan made in one is valid
// in the other: its copies' sources hold valid copies, its allocations
// are missing. An absent region adds its absence.
func (t *Table) Digest(regions []Buf) uint64 {
	return Combine(regions, func(b Buf) uint64 { return t.regionDigest(b) })
}

// Digests returns every region's digest.
func (t *Table) Digests() map[Buf]uint64 {
	out := make(map[Buf]uint64, len(t.regions))
	for b := range t.regions {
		out[b] = t.regionDigest(b)
	}
	return out
}

// Combine is the digest of regions whose own digests are of(region).
func Combine(regions []Buf, of func(Buf) uint64) uint64 {
	h := uint64(fnvBasis)
	for _, b := range regions {
		h = mix(mix(mix(h, uint64(b.Addr)), uint64(b.Size)), of(b))
	}
	return h
}

// regionDigest is b's digest, or 0 where b is not a region.
func (t *Table) regionDigest(b Buf) uint64 {
	r := t.regions[b]
	if r == nil {
		return 0
	}
	h := mix(uint64(fnvBasis), r.mapped)
	for i, s := range r.segs {
		v := s.valid << 1
		if s.host {
			v |= 1
		}
		h = mix(mix(h, uint64(r.cuts[i])), v)
	}
	return mix(h, uint64(r.cuts[len(r.cuts)-1])) | 1 // never 0: present
}

const fnvBasis = 14695981039346656037

// mix folds v into the FNV-1a hash h, a byte at a time.
func mix(h, v uint64) uint64 {
	for range 8 {
		h ^= v & 0xff
		h *= 1099511628211
		v >>= 8
	}
	return h
}
