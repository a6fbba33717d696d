package mapping

import "github.com/goffload/offload/plugin"

// Action is one step of a plan. A plan's actions are bits of one Action;
// its caller does them in the order of their values.
type Action uint8

const (
	// Settle: another construct is creating the entry. Wait for
	// Entry.Settled; if Entry.Err is then set, the item fails (the count it
	// moved goes with the failed entry; its use still ends with Done).
	Settle Action = 1 << iota
	// Alloc: the entry is new. Allocate Entry.Size() bytes of device
	// memory, do CopyIn if it is set, then report Created, or Failed if a
	// step failed (after freeing what was allocated): one of them, once.
	// Until then the entry is being created: other maps of it Settle,
	// exits of it Retry, updates skip it.
	Alloc
	// CopyIn: copy the item's range to the device and record an event that
	// fires when the copy is done: hand it to Created for a new entry, to
	// Copied for an entry that exists.
	CopyIn
	// WaitCopy: the queue waits for the last copy into the entry if it has
	// not fired: Plan.Event, or after Settle, Event(Entry).
	WaitCopy
	// CopyOut: copy the item's range from the device.
	CopyOut
	// Unmapped: the item dropped the entry's last reference; the entry left
	// the table (a new map of its range makes a new entry at once), and its
	// memory is freed when its last use ends (Done says so).
	Unmapped
	// Retry: another construct is creating the entry the item finds
	// (Plan.Other). Nothing moved and no use is held: wait for Other's
	// Settled and plan the item again.
	Retry
)

var actionNames = [...]string{"Settle", "Alloc", "CopyIn", "WaitCopy", "CopyOut", "Unmapped", "Retry"}

// String names the actions: "Alloc|CopyIn", or "none".
func (a Action) String() string {
	if a == 0 {
		return "none"
	}
	s := ""
	for i, n := range actionNames {
		if a&(1<<i) != 0 {
			if s != "" {
				s += "|"
			}
			s += n
		}
	}
	return s
}

// Fault is why the table refuses an item; the caller says it in an error
// that names the device, the construct and the buffer.
type Fault uint8

const (
	// OK: the item is not refused.
	OK Fault = iota
	// Conflict: the range partly overlaps the entry Other: a mapped
	// section must lie inside one mapping.
	Conflict
	// NotPresent: the present modifier demands a mapping and none contains
	// the range. From Disassociate: no association starts at the address;
	// Other is the live entry the address lies in, if any.
	NotPresent
	// Mapped (Associate): the range lies inside the entry Other already,
	// whose counts are Dyn and Hold.
	Mapped
	// NotAssociated (Disassociate): Other was made by map clauses (Dyn,
	// Hold), not by Associate.
	NotAssociated
	// Held (Disassociate): a region's hold map holds the association Other
	// (Hold).
	Held
)

var faultNames = [...]string{"ok", "conflict", "not present", "mapped", "not associated", "held"}

// String names the fault, for tests.
func (f Fault) String() string {
	if int(f) < len(faultNames) {
		return faultNames[f]
	}
	return "fault?"
}

// Plan is the table's answer to an item: what to do on the device, with
// which entry. A plan from Enter, Exit, Update or Use that has an Entry
// holds a use of it: the entry's memory stays until its caller reports
// Done(Entry), once the construct's queued work is over.
//
// The table writes a plan into the caller's *Plan, every field on each
// call. It reads the item through a *Buf. It does not take and return them
// by value: a map of a present buffer is a target region's hot path, and
// this way it copies no struct.
type Plan struct {
	Do    Action
	Entry *Entry
	// Event is what WaitCopy waits for (nil after Settle: ask Event).
	Event plugin.Event
	// Dyn and Hold are the entry's counts after the item moved them (Dyn
	// is -1 for infinite), or those a fault is about.
	Dyn, Hold int64
	Fault     Fault
	// Other is the entry a fault is about, or the one Retry waits for.
	Other *Entry
}

// Enter plans the map of buffer b with map type typ (an item) at a
// construct's start (target, target data, enter data). It finds or makes
// the entry and moves its count: the hold count for a hold map, else the
// dynamic count unless infinite.
// A new entry is planned Alloc, and CopyIn for to. An entry that exists is
// copied to again only with always (CopyIn). Otherwise the construct waits
// for the last copy into it (WaitCopy).
// Enter never waits for other constructs. An entry being deleted has left
// the table already, so a new map of the same memory makes a new entry.
// A zero-length item moves nothing and returns an empty plan. Its address
// translates as Lookup says.
func (t *Table) Enter(p *Plan, b *Buf, typ MapType) {
	r, ok := t.begin(p, b)
	if !ok {
		return
	}
	hold := typ&MapHold != 0
	if e := r.entry; e != nil {
		// A hold map always counts, on an association too (its dynamic
		// count is infinite; LLVM: DynRefCount=INF, HoldRefCount=1), so
		// that Disassociate is refused while a region holds it.
		if hold {
			e.hold++
		} else if !isInf(e.dyn) {
			e.dyn++
		}
		e.busy++
		p.Entry, p.Dyn, p.Hold = e, dynOf(e.dyn), e.hold
		if e.state == creating {
			p.Do = Settle
		}
		switch {
		case typ&(MapTo|MapAlways) == MapTo|MapAlways:
			p.Do |= CopyIn
		case e.state == creating:
			p.Do |= WaitCopy
		case e.ev != nil:
			p.Do |= WaitCopy
			p.Event = e.ev
		}
		t.mu.Unlock()
		return
	}
	if typ&MapPresent != 0 {
		t.mu.Unlock()
		p.Fault = NotPresent
		return
	}
	e := &Entry{HstBegin: b.Addr(), HstEnd: b.Addr() + uintptr(b.Size), Name: b.Name, keep: b.Ptr,
		owned: true, settled: make(chan struct{}), state: creating, busy: 1}
	if hold {
		e.hold = 1
	} else {
		e.dyn = 1
	}
	p.Do, p.Entry, p.Dyn, p.Hold = Alloc, e, e.dyn, e.hold
	t.insert(e)
	t.mu.Unlock()
	if typ&MapTo != 0 {
		p.Do |= CopyIn
	}
}

// Created reports that a new entry's allocation at tgt and its copy in are
// enqueued. ev is the copy's event, or nil if there was none. The entry is
// then live, and constructs waiting for it to settle go on.
func (t *Table) Created(e *Entry, tgt plugin.Ptr, ev plugin.Event) {
	t.mu.Lock()
	e.tgt, e.ev, e.state = tgt, ev, live
	t.mu.Unlock()
	close(e.settled)
}

// Failed reports that a new entry's creation failed with err (its caller
// freed what it allocated): the entry leaves the table, and constructs
// waiting for it to settle fail with err.
func (t *Table) Failed(e *Entry, err error) {
	t.mu.Lock()
	t.delete(e)
	e.err, e.state = err, gone
	t.mu.Unlock()
	close(e.settled)
}

// Copied reports that a copy into e was enqueued and that ev fires when it
// is done; it returns the event of the copy before, which its caller closes.
func (t *Table) Copied(e *Entry, ev plugin.Event) (old plugin.Event) {
	t.mu.Lock()
	old, e.ev = e.ev, ev
	t.mu.Unlock()
	return old
}

// Event returns the event of the last copy into e, or nil.
func (t *Table) Event(e *Entry) plugin.Event {
	t.mu.Lock()
	defer t.mu.Unlock()
	return e.ev
}

// Unref takes back the reference that Enter moved for a construct that
// failed, while the construct still holds its use of e. So a last
// reference makes the entry leave the table, and Done frees it.
func (t *Table) Unref(e *Entry, hold bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e.state != live {
		return
	}
	if hold && e.hold > 0 {
		e.hold--
	} else if !hold && e.dyn > 0 && !isInf(e.dyn) {
		e.dyn--
	}
	if e.dyn == 0 && e.hold == 0 {
		t.retire(e)
	}
}

// retire takes e, whose last reference is gone, out of the table with the
// lock held: later maps of its range make a new entry at once, while e's
// memory is freed when its last use ends.
func (t *Table) retire(e *Entry) {
	e.state = deleting
	t.delete(e)
}

// Done ends a use of e (a plan's). It reports whether that was the last
// use of an entry that left the table. Then its caller frees the entry's
// memory if it is Owned, and closes ev, the event of its last copy in, if
// any. Done reports that once per entry.
func (t *Table) Done(e *Entry) (last bool, ev plugin.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e.busy--
	if e.busy > 0 || e.state != deleting {
		return false, nil
	}
	e.state = gone
	ev, e.ev = e.ev, nil
	return true, ev
}

// Gone is an entry whose last use DoneAll ended, with the event of its
// last copy in: its caller frees it as Done's does.
type Gone struct {
	Entry *Entry
	Event plugin.Event
}

// DoneAll is Done for each of es, under one lock: a construct's uses all
// end together. It appends to out the entries whose last use that was,
// each once, and returns it.
func (t *Table) DoneAll(es []*Entry, out []Gone) []Gone {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range es {
		e.busy--
		if e.busy > 0 || e.state != deleting {
			continue
		}
		e.state = gone
		out = append(out, Gone{Entry: e, Event: e.ev})
		e.ev = nil
	}
	return out
}

// Exit plans the unmap of b with map type typ at a construct's end
// (target, target data, exit data). It moves the entry's count: delete
// zeroes the dynamic count, and an infinite one does not move.
// It plans the copy out (CopyOut) when from is given and the count reached
// zero, or when always is given too.
// An item that finds no mapping is a no-op, unless present is given.
// One that finds an entry being created is planned Retry.
// A zero-length item is a no-op.
func (t *Table) Exit(p *Plan, b *Buf, typ MapType) {
	r, ok := t.begin(p, b)
	if !ok {
		return
	}
	e := r.entry
	if e != nil && e.state == creating {
		t.mu.Unlock()
		p.Do, p.Other = Retry, e
		return
	}
	if e == nil || e.state != live {
		t.mu.Unlock()
		absent(p, typ)
		return
	}
	hold := typ&MapHold != 0
	switch inf := isInf(e.dyn); {
	case hold && e.hold > 0: // the end of a hold region, on an association too
		e.hold--
	case inf: // maps never move an association's dynamic count
	case typ&MapDelete != 0:
		e.dyn = 0
	case !hold && e.dyn > 0:
		e.dyn--
	}
	p.Entry, p.Dyn, p.Hold = e, dynOf(e.dyn), e.hold
	last := e.dyn == 0 && e.hold == 0
	if last {
		t.retire(e)
		p.Do = Unmapped
	}
	if typ&MapFrom != 0 && (last || typ&MapAlways != 0) {
		p.Do |= CopyOut
	}
	e.busy++
	t.mu.Unlock()
}

// begin starts the plan of b in p: it finds what t holds of b and returns
// it with t locked; or, with t unlocked and ok false, leaves p empty (b is
// of length zero) or says b conflicts with an entry.
func (t *Table) begin(p *Plan, b *Buf) (r lookupResult, ok bool) {
	*p = Plan{}
	addr, size := b.Addr(), b.Size
	if size == 0 {
		return r, false
	}
	t.mu.Lock()
	r = t.lookup(addr, size)
	if r.conflict != nil {
		t.mu.Unlock()
		p.Fault, p.Other = Conflict, r.conflict
		return r, false
	}
	return r, true
}

// absent is the plan of an exit or update of an unmapped item: nothing,
// unless the present modifier demands a mapping.
func absent(p *Plan, typ MapType) {
	if typ&MapPresent != 0 {
		p.Fault = NotPresent
	}
}

// Update plans target update of b (typ: to or from): a copy to (CopyIn)
// or from (CopyOut) the live entry that contains it. An item that finds no live mapping is
// skipped, unless present is given. A zero-length item is a no-op.
func (t *Table) Update(p *Plan, b *Buf, typ MapType) {
	r, ok := t.begin(p, b)
	if !ok {
		return
	}
	e := r.entry
	if e == nil || e.state != live {
		t.mu.Unlock()
		absent(p, typ)
		return
	}
	e.busy++
	p.Entry, p.Dyn, p.Hold = e, dynOf(e.dyn), e.hold
	t.mu.Unlock()
	switch {
	case typ&MapTo != 0:
		p.Do = CopyIn
	case typ&MapFrom != 0:
		p.Do = CopyOut
	}
}

// Use plans a use of the live entry containing [addr, addr+size), moving
// no count (a kernel that reaches a declare target link variable's
// mapping): the plan's Event is the last copy into it (WaitCopy). A range
// that finds an entry being created is planned Retry; one that finds no
// live entry gets an empty plan.
func (t *Table) Use(p *Plan, addr uintptr, size int64) {
	*p = Plan{}
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.lookup(addr, size).entry
	if e == nil {
		return
	}
	if e.state == creating {
		p.Do, p.Other = Retry, e
		return
	}
	if e.state != live {
		return
	}
	e.busy++
	p.Entry, p.Dyn, p.Hold, p.Event = e, dynOf(e.dyn), e.hold, e.ev
	if e.ev != nil {
		p.Do = WaitCopy
	}
}
