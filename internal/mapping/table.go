// Package mapping is a device's present table as plain state.
// It answers each map item of a construct with a plan: the actions to take
// on the device. It learns from its caller when they are done. It calls no
// device.
//
// The table follows OpenMP and libomptarget, whose MappingInfoTy is kept
// apart from the device for the same reason:
//   - entries are keyed by host address range;
//   - a range inside an entry is present;
//   - a range that partly overlaps one is a conflict;
//   - the first map of a range allocates and copies in (to), and the last
//     unmap copies out (from) and frees;
//   - always forces the copy, and present demands presence;
//   - hold maps (ompx_hold) have a count of their own;
//   - an association (omp_target_associate_ptr) and a declare target
//     variable have an infinite dynamic count that maps never move.
//
// Its caller, the issuer, turns a Plan into queue operations and reports
// back:
//   - Created or Failed once a new entry's allocation and copy in are
//     enqueued, or could not be;
//   - Copied when it recorded a copy into an entry;
//   - Unref to take back a reference of a construct that failed;
//   - Done when a construct's queued work that used an entry is over.
//
// The table owns its lock: every method may be called from any goroutine.
// None blocks except Lookup, which waits for an entry's creation to
// settle. The host memory of an entry is kept alive while it is mapped.
package mapping

import (
	"fmt"
	"io"
	"sync"
	"unsafe"

	"github.com/google/btree"

	"github.com/goffload/offload/plugin"
)

// MapType holds a map clause's type and modifiers, as bits.
type MapType uint16

// Map type bits. "alloc" and "release" are the absence of To and From.
// The table does not read MapImplicit; it rides along for messages.
const (
	MapTo MapType = 1 << iota
	MapFrom
	MapAlways
	MapDelete
	MapPresent
	MapHold
	MapImplicit
)

// Buf is a host buffer: the memory of a Go slice. An item of a construct
// is a buffer and its map type.
type Buf struct {
	Ptr  unsafe.Pointer // first byte; nil for a nil slice. Kept alive while mapped
	Size int64
	Name string // the name an entry made for the buffer gets
}

// Addr is the buffer's host address.
func (b Buf) Addr() uintptr { return uintptr(b.Ptr) }

// Bytes returns the buffer's memory.
func (b Buf) Bytes() []byte {
	if b.Size == 0 || b.Ptr == nil {
		return nil
	}
	return unsafe.Slice((*byte)(b.Ptr), b.Size)
}

// infRef is the dynamic count of entries made by Associate and Static: maps
// never move it (libomptarget's INF_REF_CNT).
const infRef = int64(1) << 60

func isInf(n int64) bool { return n >= infRef/2 }

type state uint8

const (
	creating state = iota // allocation and copy in being enqueued
	live
	deleting // last reference dropped: out of the table, freed when its last use ends
	gone     // freed (deleting, and its last use ended) or failed: never used again
)

// Entry is one row of a present table: a host address range, the device
// memory it is mapped to, and its reference counts. HstBegin, HstEnd and
// Name are constant; the rest belongs to the table.
type Entry struct {
	HstBegin, HstEnd uintptr
	Name             string

	// Set before settled is closed, constant after.
	tgt   plugin.Ptr
	err   error          // creation failed
	keep  unsafe.Pointer // keeps the host memory alive while mapped
	owned bool           // device memory allocated for the table (not associated)

	settled chan struct{} // closed once creation finished

	// Guarded by the table's lock.
	dyn, hold int64
	busy      int // constructs whose queued work uses the entry (Done ends a use)
	state     state
	ev        plugin.Event // fires when the last copy into the entry is done
}

// Size is the entry's length in bytes.
func (e *Entry) Size() int64 { return int64(e.HstEnd - e.HstBegin) }

// Tgt is the device address of HstBegin. It is set once the entry settled.
func (e *Entry) Tgt() plugin.Ptr { return e.tgt }

// At is the device address of host address addr, which lies in the entry.
func (e *Entry) At(addr uintptr) plugin.Ptr { return e.tgt + plugin.Ptr(addr-e.HstBegin) }

// Owned reports whether the entry's device memory was allocated for it (by
// a map, or for a declare target variable), rather than associated: its
// caller frees owned memory when the entry goes.
func (e *Entry) Owned() bool { return e.owned }

// Settled is closed once the entry's creation finished, successfully or not.
func (e *Entry) Settled() <-chan struct{} { return e.settled }

// Err is why the entry's creation failed, once it settled; nil if it did
// not fail.
func (e *Entry) Err() error { return e.err }

// settledChan is the settled channel of entries born live.
var settledChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Table is a device's present table, ordered by host address. It is safe
// for concurrent use.
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

// Lookup returns the entry containing [addr, addr+size) and the device
// address of addr, or nil. It waits for an entry being created to settle,
// and finds none if its creation failed.
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
	return e, e.At(addr)
}

// Len is the number of entries, those being created included.
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
		if e.state == creating {
			return true
		}
		out = append(out, EntryInfo{HstBegin: e.HstBegin, Size: e.Size(), Tgt: e.tgt, Dyn: dynOf(e.dyn), Hold: e.hold, Name: e.Name})
		return true
	})
	return out
}

// dynOf is a dynamic count as plans and snapshots show it: -1 for infinite.
func dynOf(n int64) int64 {
	if isInf(n) {
		return -1
	}
	return n
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
