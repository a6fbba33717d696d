package core

import (
	"fmt"
	"io"
	"sync"
	"unsafe"

	"github.com/google/btree"

	"github.com/goffload/offload/plugin"
)

// infRef is the reference count of entries made by Associate: maps never
// move it (libomptarget's INF_REF_CNT).
const infRef = int64(1) << 60

type entryState uint8

const (
	stateCreating entryState = iota // allocation and copy-in being enqueued
	stateLive
	stateDeleting // last reference dropped; copy-out and free under way
)

// Entry is one row of a device's present table: a host address range, the
// device memory it is mapped to, and its reference counts.
type Entry struct {
	HstBegin, HstEnd uintptr
	Name             string

	// Set before settled is closed, constant after.
	tgt   plugin.Ptr
	err   error          // creation failed
	keep  unsafe.Pointer // keeps the host memory alive while mapped
	owned bool           // device memory allocated by the table (not associated)

	settled chan struct{} // closed once creation finished

	// Guarded by the table's lock.
	dyn, hold int64
	busy      int // constructs whose queued work uses the entry
	state     entryState
	ev        plugin.Event // fires when the last copy into this entry is done
}

// Size is the entry's length in bytes.
func (e *Entry) Size() int64 { return int64(e.HstEnd - e.HstBegin) }

// Tgt is the device address of HstBegin.
func (e *Entry) Tgt() plugin.Ptr { return e.tgt }

func refString(n int64) string {
	if n >= infRef/2 {
		return "INF"
	}
	return fmt.Sprint(n)
}

// Table is a device's present table, ordered by host address. It is safe for
// concurrent use.
type Table struct {
	mu   sync.Mutex
	tree *btree.BTreeG[tkey]
}

// tkey is a tree item: the begin address by value, so that comparisons do
// not chase entry pointers and searches allocate nothing.
type tkey struct {
	begin uintptr
	e     *Entry
}

// NewTable returns an empty table.
func NewTable() *Table {
	return &Table{tree: btree.NewG(32, func(a, b tkey) bool { return a.begin < b.begin })}
}

func (t *Table) insert(e *Entry) { t.tree.ReplaceOrInsert(tkey{e.HstBegin, e}) }
func (t *Table) delete(e *Entry) { t.tree.Delete(tkey{e.HstBegin, e}) }

// get returns the entry that begins at addr.
func (t *Table) get(addr uintptr) (*Entry, bool) {
	k, ok := t.tree.Get(tkey{begin: addr})
	return k.e, ok
}

// lookupResult is what a host range finds in the table.
type lookupResult struct {
	entry    *Entry // the entry containing the range, if any
	conflict *Entry // an entry the range partly overlaps, if any
}

// lookup finds the range [addr, addr+size) with the lock held. A range inside
// an entry finds it; a range that overlaps an entry without lying inside it is
// a conflict; a zero-length range finds the entry it points into, if any.
func (t *Table) lookup(addr uintptr, size int64) lookupResult {
	var floor *Entry
	t.tree.DescendLessOrEqual(tkey{begin: addr}, func(k tkey) bool { floor = k.e; return false })
	end := addr + uintptr(size)
	if floor != nil && addr < floor.HstEnd {
		if end <= floor.HstEnd {
			return lookupResult{entry: floor}
		}
		return lookupResult{conflict: floor}
	}
	if size == 0 {
		return lookupResult{}
	}
	var next *Entry
	t.tree.AscendGreaterOrEqual(tkey{begin: addr + 1}, func(k tkey) bool { next = k.e; return false })
	if next != nil && next.HstBegin < end {
		return lookupResult{conflict: next}
	}
	return lookupResult{}
}

// Lookup returns the live entry containing [addr, addr+size) and the device
// address of addr, or nil.
func (t *Table) Lookup(addr uintptr, size int64) (*Entry, plugin.Ptr) {
	t.mu.Lock()
	r := t.lookup(addr, size)
	t.mu.Unlock()
	e := r.entry
	if e == nil {
		return nil, 0
	}
	<-e.settled
	if e.err != nil {
		return nil, 0
	}
	return e, e.tgt + plugin.Ptr(addr-e.HstBegin)
}

// Len is the number of entries.
func (t *Table) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.tree.Len()
}

// EntryInfo is a snapshot of an entry, for tests and the table dump.
type EntryInfo struct {
	HstBegin uintptr
	Size     int64
	Tgt      plugin.Ptr
	Dyn      int64 // -1 for infinite (associated)
	Hold     int64
	Name     string
}

// Snapshot returns the settled entries in address order.
func (t *Table) Snapshot() []EntryInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []EntryInfo
	t.tree.Ascend(func(k tkey) bool {
		e := k.e
		if e.state == stateCreating {
			return true
		}
		dyn := e.dyn
		if dyn >= infRef/2 {
			dyn = -1
		}
		out = append(out, EntryInfo{HstBegin: e.HstBegin, Size: e.Size(), Tgt: e.tgt, Dyn: dyn, Hold: e.hold, Name: e.Name})
		return true
	})
	return out
}

// Dump writes the table as libomptarget's table dump does.
func (t *Table) Dump(w io.Writer, title string) {
	fmt.Fprintf(w, "%s\n", title)
	fmt.Fprintf(w, "%-18s %-18s %-12s %-11s %-12s %s\n", "Host Ptr", "Target Ptr", "Size (B)", "DynRefCount", "HoldRefCount", "Name")
	for _, e := range t.Snapshot() {
		dyn := fmt.Sprint(e.Dyn)
		if e.Dyn < 0 {
			dyn = "INF"
		}
		fmt.Fprintf(w, "%#-18x %#-18x %-12d %-11s %-12d %s\n", e.HstBegin, uint64(e.Tgt), e.Size, dyn, e.Hold, e.Name)
	}
}
