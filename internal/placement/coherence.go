// Package placement is the plain state behind Any-tasks (offload.Any):
// where the valid copies of each buffer are (Table), and which device a
// task should run on (Model). It does no I/O and starts nothing; the
// offload package lowers its decisions to ordinary constructs (copies,
// updates, target tasks), and tests drive it without processes.
package placement

import (
	"cmp"
	"fmt"
	"math/bits"
	"slices"
)

// Host stands for the program's own memory where a device number goes.
const Host = -1

// Buf is a host buffer used by Any-tasks: the address range of its memory.
type Buf struct {
	Addr, Size uintptr
}

func (b Buf) end() uintptr { return b.Addr + b.Size }

func (b Buf) overlaps(c Buf) bool { return b.Addr < c.end() && c.Addr < b.end() }

// Access is what a task does with a buffer: reads it (its copy on the
// task's device must be valid before it runs), writes it (the task's
// device holds the one valid copy after it), or neither (scratch: it only
// needs memory there).
type Access struct {
	Buf         Buf
	Read, Write bool
}

// Copy is a copy a placement needs before its task runs: Buf from device
// From (or Host) to device To.
type Copy struct {
	Buf      Buf
	From, To int
}

// entry is one buffer's state: the devices whose copies are valid (a bit
// each), whether the host's is, and the devices that hold memory for it.
type entry struct {
	valid  uint64
	host   bool
	mapped uint64
}

// MaxDevices is how many devices a Table tracks (a bit each).
const MaxDevices = 64

// Table is the coherence state of the buffers Any-tasks use, in the order
// their tasks are created: a copy is valid on a device once a task there
// wrote it or a copy to it was planned (the tasks that use it are ordered
// after that copy), and a write leaves one valid copy. Its state moves in
// program order, not in execution order: the offload package orders every
// task and copy on a buffer by depend clauses on it, so the order tasks are
// created in is the order their effects land in.
//
// A Table is not safe for concurrent use.
type Table struct {
	bufs map[Buf]*entry
}

// NewTable returns an empty table.
func NewTable() *Table { return &Table{bufs: map[Buf]*entry{}} }

// Len is the number of buffers tracked.
func (t *Table) Len() int { return len(t.bufs) }

// Tracked returns a tracked buffer that overlaps b, if any.
func (t *Table) Tracked(b Buf) (Buf, bool) {
	if e := t.bufs[b]; e != nil {
		return b, true
	}
	for c := range t.bufs {
		if c.overlaps(b) {
			return c, true
		}
	}
	return Buf{}, false
}

// ErrOverlap is wrapped by Plan's error for a buffer that partly overlaps
// one the table tracks (a different section of the same memory).
var ErrOverlap = fmt.Errorf("a different section of memory that Any-tasks use already")

// check refuses a buffer that overlaps a tracked one without being it.
func (t *Table) check(b Buf) error {
	if t.bufs[b] != nil {
		return nil
	}
	if c, ok := t.Tracked(b); ok {
		return fmt.Errorf("%w: [%#x, +%d) overlaps [%#x, +%d)", ErrOverlap, b.Addr, b.Size, c.Addr, c.Size)
	}
	return nil
}

// Plan returns what running a task with accesses acc on device d needs:
// the copies (for each buffer it reads whose copy on d is not valid, from
// the cheapest valid copy by cost, which takes the source, Host or a
// device) and the buffers d holds no memory for yet. A buffer the table
// has not seen is valid on the host only.
func (t *Table) Plan(d int, acc []Access, cost func(from, to int, b Buf) float64) (copies []Copy, alloc []Buf, err error) {
	if d < 0 || d >= MaxDevices {
		return nil, nil, fmt.Errorf("placement: device %d out of range", d)
	}
	bit := uint64(1) << d
	for i, a := range acc {
		if err := t.check(a.Buf); err != nil {
			return nil, nil, err
		}
		if slices.ContainsFunc(acc[:i], func(b Access) bool { return b.Buf.overlaps(a.Buf) }) {
			return nil, nil, fmt.Errorf("placement: a task uses [%#x, +%d) twice, or two overlapping sections", a.Buf.Addr, a.Buf.Size)
		}
		e := t.bufs[a.Buf]
		if e == nil {
			e = &entry{host: true}
		}
		if e.mapped&bit == 0 {
			alloc = append(alloc, a.Buf)
		}
		if !a.Read || e.valid&bit != 0 {
			continue
		}
		from, best := Host, 0.0
		if !e.host {
			from = -2
		} else if cost != nil {
			best = cost(Host, d, a.Buf)
		}
		for v := e.valid; v != 0; v &= v - 1 {
			s := bits.TrailingZeros64(v)
			c := 0.0
			if cost != nil {
				c = cost(s, d, a.Buf)
			}
			if from == -2 || c < best {
				from, best = s, c
			}
		}
		if from == -2 {
			return nil, nil, fmt.Errorf("placement: [%#x, +%d) has no valid copy", a.Buf.Addr, a.Buf.Size)
		}
		copies = append(copies, Copy{Buf: a.Buf, From: from, To: d})
	}
	return copies, alloc, nil
}

// Commit records that a task with accesses acc was placed on d, after the
// copies Plan gave: d holds memory for each buffer and a valid copy of
// those read, and a write leaves d's the only valid copy.
func (t *Table) Commit(d int, acc []Access) {
	bit := uint64(1) << d
	for _, a := range acc {
		e := t.bufs[a.Buf]
		if e == nil {
			e = &entry{host: true}
			t.bufs[a.Buf] = e
		}
		e.mapped |= bit
		switch {
		case a.Write:
			e.valid, e.host = bit, false
		case a.Read:
			e.valid |= bit
		}
	}
}

// Stale returns the buffers whose host copy is not valid, each with a
// device that holds a valid one.
func (t *Table) Stale() []Copy {
	var out []Copy
	for b, e := range t.bufs {
		if !e.host && e.valid != 0 {
			out = append(out, Copy{Buf: b, From: bits.TrailingZeros64(e.valid), To: Host})
		}
	}
	slices.SortFunc(out, func(x, y Copy) int { return cmp.Compare(x.Buf.Addr, y.Buf.Addr) })
	return out
}

// StaleOf returns which of bufs have a host copy that is not valid, as
// Stale does.
func (t *Table) StaleOf(bufs []Buf) []Copy {
	var out []Copy
	for _, b := range bufs {
		if e := t.bufs[b]; e != nil && !e.host && e.valid != 0 {
			out = append(out, Copy{Buf: b, From: bits.TrailingZeros64(e.valid), To: Host})
		}
	}
	return out
}

// HostValid records that the host's copy of b is valid again (copied back).
func (t *Table) HostValid(b Buf) {
	if e := t.bufs[b]; e != nil {
		e.host = true
	}
}

// Release forgets every buffer, and returns, for each, the devices that
// hold memory for it (to be freed): the program has its buffers back.
func (t *Table) Release() map[Buf][]int {
	out := make(map[Buf][]int, len(t.bufs))
	for b, e := range t.bufs {
		for m := e.mapped; m != 0; m &= m - 1 {
			out[b] = append(out[b], bits.TrailingZeros64(m))
		}
	}
	clear(t.bufs)
	return out
}

// Lost records that device d and its memory are gone: its copies are no
// longer valid. It returns the buffers that had no other valid copy.
func (t *Table) Lost(d int) []Buf {
	bit := uint64(1) << d
	var gone []Buf
	for b, e := range t.bufs {
		e.mapped &^= bit
		if e.valid&bit == 0 {
			continue
		}
		e.valid &^= bit
		if e.valid == 0 && !e.host {
			gone = append(gone, b)
		}
	}
	return gone
}

// Valid reports where b's valid copies are: the devices, and the host.
func (t *Table) Valid(b Buf) (devs []int, host bool) {
	e := t.bufs[b]
	if e == nil {
		return nil, true
	}
	for v := e.valid; v != 0; v &= v - 1 {
		devs = append(devs, bits.TrailingZeros64(v))
	}
	return devs, e.host
}
