package mapping

import (
	"unsafe"

	"github.com/goffload/offload/plugin"
)

// Entries with an infinite dynamic count: associations
// (omp_target_associate_ptr, omp_target_disassociate_ptr) and declare
// target variables. Maps find them present and never copy into a new
// allocation or free them; a hold map still counts on them.

// Associate maps it's range to device memory at tgt, which its caller
// owns (the entry is not Owned). The plan's Entry is the new entry (it
// holds no use); associating the same range to the same memory again is a
// no-op (an empty plan). A range that partly overlaps an entry is a
// Conflict; one inside an entry is Mapped, with that entry's counts.
func (t *Table) Associate(it Item, tgt plugin.Ptr) Plan {
	addr := it.Addr()
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.lookup(addr, it.Size)
	if r.conflict != nil {
		return Plan{Fault: Conflict, Other: r.conflict}
	}
	if e := r.entry; e != nil {
		if e.state == live && e.HstBegin == addr && e.tgt == tgt {
			return Plan{} // the same association again
		}
		return Plan{Fault: Mapped, Other: e, Dyn: dynOf(e.dyn), Hold: e.hold}
	}
	e := Static(it.Ptr, it.Size, it.Name, tgt, false)
	t.insert(e)
	return Plan{Entry: e, Dyn: -1}
}

// Disassociate removes the association that begins at addr. As
// libomptarget does, it refuses an entry made by map clauses
// (NotAssociated) and an association that a region holds (Held, a hold map
// on it): the region's constructs use the device memory until it ends. The
// plan's Entry is the removed entry (it holds no use).
func (t *Table) Disassociate(addr uintptr) Plan {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.get(addr)
	if !ok || e.state != live {
		if c := t.lookup(addr, 0).entry; c != nil && c.state == live {
			return Plan{Fault: NotPresent, Other: c}
		}
		return Plan{Fault: NotPresent}
	}
	if !isInf(e.dyn) {
		return Plan{Fault: NotAssociated, Other: e, Dyn: e.dyn, Hold: e.hold}
	}
	if e.hold > 0 {
		return Plan{Fault: Held, Other: e, Dyn: -1, Hold: e.hold}
	}
	t.delete(e)
	e.state = gone // not the table's memory: nothing to free
	return Plan{Entry: e, Dyn: -1}
}

// Static returns a live entry, in no table yet, that maps size bytes of
// host memory at ptr to device memory at tgt, with an infinite dynamic
// count: a declare target variable's (owned: its memory is the device's,
// freed with it) or an association's.
func Static(ptr unsafe.Pointer, size int64, name string, tgt plugin.Ptr, owned bool) *Entry {
	addr := uintptr(ptr)
	return &Entry{HstBegin: addr, HstEnd: addr + uintptr(size), Name: name, keep: ptr,
		owned: owned, tgt: tgt, settled: settledChan, state: live, dyn: infRef}
}

// Insert adds entries from Static, which overlap nothing in the table
// (declare target variables, at Start).
func (t *Table) Insert(es ...*Entry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range es {
		t.insert(e)
	}
}
