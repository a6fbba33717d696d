package core

import (
	"github.com/goffload/offload/plugin"
)

// enter maps one buffer for a construct's start (target, target data, enter
// data): it finds or creates the entry, moves its reference count and
// enqueues the copy in on q. It returns the device address of the buffer.
func (d *Device) enter(w *work, m MapItem) (plugin.Ptr, error) {
	_, tgt, err := d.enterEntry(w, m)
	return tgt, err
}

// enterEntry is enter that also returns the entry whose count it moved (nil
// if none). It never waits for other constructs' queued work: an entry being
// deleted has left the table already, so a new mapping of the same memory
// is made at once (its copy in is ordered after the old one's copy out by
// the queues, when the tasks depend on each other).
func (d *Device) enterEntry(w *work, m MapItem) (*Entry, plugin.Ptr, error) {
	q, op := w.q, w.op
	addr, size := m.Buf.Addr(), m.Buf.Size
	t := d.table
	t.mu.Lock()
	r := t.lookup(addr, size)
	if r.conflict != nil {
		t.mu.Unlock()
		return nil, 0, d.conflictErr(op, m, r.conflict)
	}
	if size == 0 {
		// Zero-length sections are legal and move no count: a pointer into a
		// mapped buffer translates, anything else is a nil device slice.
		t.mu.Unlock()
		if e := r.entry; e != nil {
			<-e.settled
			if e.err == nil {
				return nil, e.tgt + plugin.Ptr(addr-e.HstBegin), nil
			}
		}
		return nil, 0, nil
	}
	hold := m.Type&MapHold != 0
	if e := r.entry; e != nil {
		m = named(m, e)
		// A hold map always counts, on an association too (its dynamic
		// count is infinite; LLVM: DynRefCount=INF, HoldRefCount=1), so
		// that Disassociate is refused while a region holds it.
		if hold {
			e.hold++
		} else if e.dyn < infRef/2 {
			e.dyn++
		}
		dyn, held := e.dyn, e.hold
		d.use(w, e)
		t.mu.Unlock()
		<-e.settled
		if e.err != nil {
			return nil, 0, d.mapErr(op, m, e.err, "the concurrent mapping of this buffer failed")
		}
		tgt := e.tgt + plugin.Ptr(addr-e.HstBegin)
		if d.log.On(InfoMappingExists) {
			d.log.Taskf(InfoMappingExists, d.Num, w.task, "Mapping exists%s with HstPtrBegin=%#x, TgtPtrBegin=%#x, Size=%d, DynRefCount=%s%s, HoldRefCount=%s%s, Name=%s",
				implicitNote(m), addr, uint64(tgt), size, refString(dyn), incNote(!hold, dyn), refString(held), incNote(hold, held), nameOf(m.Buf.Name))
		}
		if m.Type&(MapTo|MapAlways) == MapTo|MapAlways {
			if err := d.copyIn(w, m, tgt, e); err != nil {
				d.unref(e, hold)
				return nil, 0, err
			}
			return e, tgt, nil
		}
		t.mu.Lock()
		ev := e.ev
		t.mu.Unlock()
		if ev != nil {
			if fired, _ := ev.Query(); !fired {
				if err := q.Wait(ev); err != nil {
					d.unref(e, hold)
					return nil, 0, d.mapErr(op, m, err, "cannot wait for the copy into the existing mapping")
				}
			}
		}
		return e, tgt, nil
	}
	if m.Type&MapPresent != 0 {
		t.mu.Unlock()
		return nil, 0, d.mapErr(op, m, ErrNotPresent, "the present modifier requires the buffer to be mapped, and no mapping contains it")
	}
	e := &Entry{HstBegin: addr, HstEnd: addr + uintptr(size), Name: m.Buf.Name, keep: m.Buf.Ptr,
		owned: true, settled: make(chan struct{}), state: stateCreating}
	if hold {
		e.hold = 1
	} else {
		e.dyn = 1
	}
	dyn0, hold0 := e.dyn, e.hold
	t.insert(e)
	t.mu.Unlock()
	ok := false
	defer func() {
		if ok {
			t.mu.Lock()
			d.use(w, e)
			t.mu.Unlock()
		}
	}()

	fail := func(err error) (*Entry, plugin.Ptr, error) {
		d.noteLost(err)
		t.mu.Lock()
		t.delete(e)
		e.err = err
		t.mu.Unlock()
		close(e.settled)
		return nil, 0, err
	}
	tgt, err := d.Dev.Alloc(size)
	if err != nil {
		return fail(d.mapErr(op, m, err, "cannot allocate %d bytes of device memory", size))
	}
	e.tgt = tgt
	w.data(MapCreate, m.Buf, tgt)
	d.log.Taskf(InfoMappingChanged, d.Num, w.task, "Creating new map entry with HstPtrBegin=%#x, TgtPtrBegin=%#x, Size=%d, DynRefCount=%d, HoldRefCount=%d, Name=%s",
		addr, uint64(tgt), size, dyn0, hold0, nameOf(m.Buf.Name))
	if m.Type&MapTo != 0 {
		if err := d.copyIn(w, m, tgt, e); err != nil {
			_ = d.Dev.Free(tgt)
			return fail(err)
		}
	}
	t.mu.Lock()
	e.state = stateLive
	t.mu.Unlock()
	close(e.settled)
	ok = true
	return e, tgt, nil
}

// unref takes back one reference that a construct's enter moved, while the
// construct's work still uses e (so the entry is removed when it is done).
func (d *Device) unref(e *Entry, hold bool) {
	t := d.table
	t.mu.Lock()
	defer t.mu.Unlock()
	if e.state != stateLive {
		return
	}
	if hold && e.hold > 0 {
		e.hold--
	} else if !hold && e.dyn > 0 && e.dyn < infRef/2 {
		e.dyn--
	}
	if e.dyn == 0 && e.hold == 0 {
		d.retire(e)
	}
}

// retire takes e, whose last reference is gone, out of the table with the
// lock held: later constructs map the memory anew at once, while e's memory
// is freed when the last work using it is done.
func (d *Device) retire(e *Entry) {
	e.state = stateDeleting
	d.table.delete(e)
}

// use records, with the table locked, that w's queue uses e until w
// finishes: the entry's memory is not freed before then, even if another
// construct drops the last reference meanwhile (references move when work is
// enqueued; memory is freed when the work using it is done).
func (d *Device) use(w *work, e *Entry) {
	e.busy++
	w.used = append(w.used, e)
}

// done ends w's use of e; the last use of a deleting entry removes it.
func (d *Device) done(e *Entry, w *work) {
	t := d.table
	t.mu.Lock()
	e.busy--
	remove := e.busy == 0 && e.state == stateDeleting
	t.mu.Unlock()
	if remove {
		d.remove(e, w)
	}
}

// copyIn enqueues the copy of m's buffer to tgt and records an event on the
// entry, so that users of the entry on other queues wait for it.
func (d *Device) copyIn(w *work, m MapItem, tgt plugin.Ptr, e *Entry) error {
	q, op := w.q, w.op
	w.data(CopyToDevice, m.Buf, tgt)
	d.log.Taskf(InfoCopies, d.Num, w.task, "Copying data from host to device, HstPtr=%#x, TgtPtr=%#x, Size=%d, Name=%s",
		m.Buf.Addr(), uint64(tgt), m.Buf.Size, nameOf(m.Buf.Name))
	if d.log.On(InfoCopies | InfoCheck) {
		d.noteCopyIn(w.task, m.Buf)
	}
	if err := q.Submit(tgt, m.Buf.Bytes()); err != nil {
		return d.mapErr(op, m, err, "cannot copy to the device")
	}
	ev, err := d.Dev.NewEvent()
	if err == nil {
		err = q.Record(ev)
	}
	if err != nil {
		return d.mapErr(op, m, err, "cannot record the copy's event")
	}
	d.table.mu.Lock()
	old := e.ev
	e.ev = ev
	d.table.mu.Unlock()
	if old != nil {
		_ = old.Close()
	}
	return nil
}

func implicitNote(m MapItem) string {
	if m.Type&MapImplicit != 0 {
		return " (implicit)"
	}
	return ""
}

func incNote(moved bool, n int64) string {
	if moved && n < infRef/2 {
		return " (incremented)"
	}
	return ""
}

// exit unmaps one buffer at a construct's end (target, target data, exit
// data): it moves the reference count and enqueues the copy out on w's queue
// when the count reaches zero or always is given. The entry is freed when
// the last work using it is done.
func (d *Device) exit(w *work, m MapItem) error {
	addr, size := m.Buf.Addr(), m.Buf.Size
	if size == 0 {
		return nil
	}
	t := d.table
	t.mu.Lock()
	var r lookupResult
	for {
		r = t.lookup(addr, size)
		if r.entry != nil && r.entry.state == stateCreating {
			settled := r.entry.settled
			t.mu.Unlock()
			<-settled
			t.mu.Lock()
			continue
		}
		break
	}
	if r.conflict != nil {
		t.mu.Unlock()
		return d.conflictErr(w.op, m, r.conflict)
	}
	e := r.entry
	if e == nil || e.state == stateDeleting {
		t.mu.Unlock()
		if m.Type&MapPresent != 0 {
			return d.mapErr(w.op, m, ErrNotPresent, "the present modifier requires the buffer to be mapped, and no mapping contains it")
		}
		return nil // exit of an unmapped buffer is a no-op
	}
	m = named(m, e)
	hold := m.Type&MapHold != 0
	switch inf := e.dyn >= infRef/2; {
	case hold && e.hold > 0: // the end of a hold region, on an association too
		e.hold--
	case inf: // maps never move an association's dynamic count
	case m.Type&MapDelete != 0:
		e.dyn = 0
	case !hold && e.dyn > 0:
		e.dyn--
	}
	last := e.dyn == 0 && e.hold == 0
	if last {
		d.retire(e)
	}
	d.use(w, e)
	t.mu.Unlock()

	tgt := e.tgt + plugin.Ptr(addr-e.HstBegin)
	if m.Type&MapFrom != 0 && (last || m.Type&MapAlways != 0) {
		d.log.Taskf(InfoCopies, d.Num, w.task, "Copying data from device to host, TgtPtr=%#x, HstPtr=%#x, Size=%d, Name=%s",
			uint64(tgt), addr, size, nameOf(m.Buf.Name))
		w.data(CopyFromDevice, m.Buf, tgt)
		if err := w.q.Retrieve(m.Buf.Bytes(), tgt); err != nil {
			w.err(d.mapErr(w.op, m, err, "cannot copy from the device"))
		}
	}
	if last {
		d.log.Taskf(InfoMappingChanged, d.Num, w.task, "Removing map entry with HstPtrBegin=%#x, TgtPtrBegin=%#x, Size=%d, Name=%s",
			e.HstBegin, uint64(e.tgt), e.Size(), nameOf(e.Name))
	}
	return nil
}

// remove frees the memory of a deleting entry (out of the table already),
// once no work uses it; w was the last.
func (d *Device) remove(e *Entry, w *work) {
	if t := d.tool; t != nil {
		t.DataOp(DataEvent{Where: w.where(), Kind: MapRemove, Name: e.Name, Host: e.HstBegin, Target: uint64(e.tgt), Bytes: e.Size()})
	}
	if e.owned {
		if err := d.Dev.Free(e.tgt); err != nil {
			d.log.Printf(InfoMappingChanged, d.Num, "Freeing TgtPtrBegin=%#x failed: %v", uint64(e.tgt), err)
		}
	}
	t := d.table
	t.mu.Lock()
	ev := e.ev
	e.ev = nil
	t.mu.Unlock()
	if ev != nil {
		_ = ev.Close()
	}
}

// update copies a present buffer to or from the device (target update); a
// buffer that is not present is skipped unless the present modifier is given.
func (d *Device) update(w *work, m MapItem) error {
	addr, size := m.Buf.Addr(), m.Buf.Size
	if size == 0 {
		return nil
	}
	t := d.table
	t.mu.Lock()
	r := t.lookup(addr, size)
	if r.conflict != nil {
		t.mu.Unlock()
		return d.conflictErr(w.op, m, r.conflict)
	}
	e := r.entry
	if e == nil || e.state != stateLive {
		t.mu.Unlock()
		if m.Type&MapPresent != 0 {
			return d.mapErr(w.op, m, ErrNotPresent, "the present modifier requires the buffer to be mapped, and no mapping contains it")
		}
		return nil
	}
	m = named(m, e)
	d.use(w, e)
	t.mu.Unlock()
	tgt := e.tgt + plugin.Ptr(addr-e.HstBegin)
	if m.Type&MapTo != 0 {
		return d.copyIn(w, m, tgt, e)
	}
	d.log.Taskf(InfoCopies, d.Num, w.task, "Copying data from device to host, TgtPtr=%#x, HstPtr=%#x, Size=%d, Name=%s",
		uint64(tgt), addr, size, nameOf(m.Buf.Name))
	w.data(CopyFromDevice, m.Buf, tgt)
	if err := w.q.Retrieve(m.Buf.Bytes(), tgt); err != nil {
		return d.mapErr(w.op, m, err, "cannot copy from the device")
	}
	return nil
}

// data tells the tool about a data operation of w.
func (w *work) data(kind DataKind, b Buf, tgt plugin.Ptr) {
	if t := w.d.tool; t != nil {
		t.DataOp(DataEvent{Where: w.where(), Kind: kind, Name: b.Name, Host: b.Addr(), Target: uint64(tgt), Bytes: b.Size})
	}
}
