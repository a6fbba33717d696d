package mapping

import "github.com/goffload/offload/plugin"

// Entries with an infinite dynamic count: associations
// (omp_target_associate_ptr, omp_target_disassociate_ptr) and declare
// target variables. Maps find them present and never copy into a new
// allocation or free them; a hold map still counts on them.

// Associate maps b to device memory at tgt, which its caller owns (the
// entry is not Owned). The plan's Entry is the new entry (it holds no use);
// associating the same range to the same memory again is a no-op (an empty
// plan). A range that partly overlaps an entry is a Conflict; one inside an
// entry is Mapped, with that entry's counts.
func (t *Table) Associate(p *Plan, b *Buf, tgt plugin.Ptr) {
	*p = Plan{}
	addr := b.Addr()
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.lookup(addr, b.Size)
	if r.conflict != nil {
		p.Fault, p.Other = Conflict, r.conflict
		return
	}
	if e := r.entry; e != nil {
		if e.state == live && e.HstBegin == addr && e.tgt == tgt {
			return // the same association again
		}
		p.Fault, p.Other, p.Dyn, p.Hold = Mapped, e, dynOf(e.dyn), e.hold
		return
	}
	e := Static(*b, tgt, false)
	t.insert(e)
	p.Entry, p.Dyn = e, -1
}

// Disassociate removes the association that begins at addr.
// As libomptarget does, it refuses an entry made by map clauses
// (NotAssociated). It refuses an association that a region holds with a
// hold map (Held): the region's constructs use the device memory until it
// ends. The plan's Entry is the removed entry, and it holds no use.
func (t *Table) Disassociate(p *Plan, addr uintptr) {
	*p = Plan{}
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.get(addr)
	switch {
	case !ok || e.state != live:
		p.Fault = NotPresent
		if c := t.lookup(addr, 0).entry; c != nil && c.state == live {
			p.Other = c
		}
	case !isInf(e.dyn):
		p.Fault, p.Other, p.Dyn, p.Hold = NotAssociated, e, e.dyn, e.hold
	case e.hold > 0:
		p.Fault, p.Other, p.Dyn, p.Hold = Held, e, -1, e.hold
	default:
		t.delete(e)
		e.state = gone // not the table's memory: nothing to free
		p.Entry, p.Dyn = e, -1
	}
}

// Static returns a live entry, in no table yet, that maps host buffer b to
// device memory at tgt, with an infinite dynamic count. It is a declare
// target variable's entry or an association's. A declare target
// variable's is owned: its memory is the device's, freed with it.
func Static(b Buf, tgt plugin.Ptr, owned bool) *Entry {
	addr := b.Addr()
	return &Entry{HstBegin: addr, HstEnd: addr + uintptr(b.Size), Name: b.Name, keep: b.Ptr,
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
