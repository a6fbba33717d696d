package core

import (
	"bytes"
	"fmt"
	"strconv"

	"github.com/goffload/offload/internal/config"
	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/internal/mapping"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/tool"
)

// The issuer: what constructs do to a device's present table. The table
// (internal/mapping) answers each map item with a plan; the issuer turns the
// plan into operations on the construct's queue (allocate, copy in, wait for
// the last copy in, copy out), reports back to the table when they are
// enqueued or failed, and frees an entry's memory when the table says its
// last use ended. The issuer never holds the table's lock.

// refused is the error for an item of w's construct that the table refused
// with plan p.
func (w *work) refused(m MapItem, p *mapping.Plan) error {
	if p.Fault == mapping.Conflict {
		return w.d.conflictErr(w.op, m, p.Other)
	}
	return w.d.mapErr(w.op, m, ErrNotPresent, "the present modifier requires the buffer to be mapped, and no mapping contains it")
}

// use records that w's queue uses e until w finishes (a plan's use). The
// entry's memory is not freed before then. That holds even if another
// construct drops the last reference meanwhile. References move when work is
// enqueued; memory is freed when the work using it is done.
func (w *work) use(e *mapping.Entry) { w.used = append(w.used, e) }

// enter maps one buffer for a construct's start (target, target data, enter
// data). It finds or creates the entry, moves its reference count and enqueues
// the copy in on w's queue. It returns the entry whose count it moved (nil if
// none) and the device address of the buffer. It never waits for other
// constructs' queued work. An entry being deleted has left the table already.
// So a new mapping of the same memory is made at once. When the tasks depend
// on each other, the queues order its copy in after the old one's copy out.
func (w *work) enter(m MapItem) (*mapping.Entry, plugin.Ptr, error) {
	d := w.d
	addr, size := m.Buf.Addr(), m.Buf.Size
	if size == 0 {
		// Zero-length sections are legal and move no count: a pointer into a
		// mapped buffer translates, anything else is a nil device slice.
		_, tgt := d.table.Lookup(addr, 0)
		return nil, tgt, nil
	}
	var p mapping.Plan
	d.table.Enter(&p, &m.Buf, m.Type)
	if p.Fault != mapping.OK {
		return nil, 0, w.refused(m, &p)
	}
	e := p.Entry
	w.use(e)
	if p.Do&mapping.Alloc != 0 {
		return w.create(m, &p)
	}
	if m.Buf.Name == "" {
		m.Buf.Name = e.Name // messages name a section of a named mapping by its name
	}
	hold := m.Type&mapping.MapHold != 0
	if p.Do&mapping.Settle != 0 {
		<-e.Settled()
		if err := e.Err(); err != nil {
			return nil, 0, d.mapErr(w.op, m, err, "the concurrent mapping of this buffer failed")
		}
	}
	tgt := e.At(addr)
	if d.log.On(config.InfoMappingExists) {
		d.log.Taskf(config.InfoMappingExists, d.Num, w.task, "Mapping exists%s with HstPtrBegin=%#x, TgtPtrBegin=%#x, Size=%d, DynRefCount=%s%s, HoldRefCount=%s%s, Name=%s",
			implicitNote(m), addr, uint64(tgt), size, refString(p.Dyn), incNote(!hold, p.Dyn), refString(p.Hold), incNote(hold, p.Hold), nameOf(m.Buf.Name))
	}
	if p.Do&mapping.CopyIn != 0 {
		if err := w.copyIn(m, tgt, e); err != nil {
			d.table.Unref(e, hold)
			return nil, 0, err
		}
		return e, tgt, nil
	}
	if p.Do&mapping.WaitCopy != 0 {
		ev := p.Event
		if ev == nil { // settled just now
			ev = d.table.Event(e)
		}
		if ev != nil {
			if fired, _ := ev.Query(); !fired {
				if err := w.cq.Queue.Wait(ev); err != nil {
					d.table.Unref(e, hold)
					return nil, 0, d.mapErr(w.op, m, err, "cannot wait for the copy into the existing mapping")
				}
			}
		}
	}
	return e, tgt, nil
}

// create allocates the new entry of plan p and enqueues its copy in, then
// tells the table whether that worked.
func (w *work) create(m MapItem, p *mapping.Plan) (*mapping.Entry, plugin.Ptr, error) {
	d, e := w.d, p.Entry
	fail := func(err error) (*mapping.Entry, plugin.Ptr, error) {
		d.noteLost(err)
		d.table.Failed(e, err)
		return nil, 0, err
	}
	size := m.Buf.Size
	sh := d.sharer()
	var tgt plugin.Ptr
	var err error
	if sh != nil {
		tgt, err = sh.ShareHost(m.Buf.Bytes())
		if err != nil {
			return fail(d.mapErr(w.op, m, err, "cannot share the buffer with the device"))
		}
	} else if tgt, err = d.Dev.Alloc(size); err != nil {
		return fail(d.mapErr(w.op, m, err, "cannot allocate %d bytes of device memory", size))
	}
	w.data(tool.MapCreate, m.Buf, tgt)
	d.log.Taskf(config.InfoMappingChanged, d.Num, w.task, "Creating new map entry with HstPtrBegin=%#x, TgtPtrBegin=%#x, Size=%d, DynRefCount=%d, HoldRefCount=%d, Name=%s",
		m.Buf.Addr(), uint64(tgt), size, p.Dyn, p.Hold, nameOf(m.Buf.Name))
	var ev plugin.Event
	if p.Do&mapping.CopyIn != 0 && sh == nil {
		if ev, err = w.submit(m, tgt); err != nil {
			_ = d.Dev.Free(tgt)
			return fail(err)
		}
	}
	d.table.Created(e, tgt, ev)
	return e, tgt, nil
}

// sharer is d's device as a plugin.HostSharer, or nil: its kernels work on
// the host's buffers, so maps neither allocate nor copy (OpenMP's unified
// shared memory).
func (d *Device) sharer() plugin.HostSharer {
	sh, _ := d.Dev.(plugin.HostSharer)
	return sh
}

// inPlace reports whether tgt is m's buffer itself: an entry that a
// HostSharer made (the device pointer is the host address), which no copy
// moves. Declare target variables and associations keep memory of their
// own on such a device too.
func inPlace(m MapItem, tgt plugin.Ptr) bool { return uint64(tgt) == uint64(m.Buf.Addr()) }

// copyIn enqueues the copy of m's buffer to tgt, in entry e that exists,
// and hands the table its event, so that users of the entry on other
// queues wait for it; a buffer in place needs none.
func (w *work) copyIn(m MapItem, tgt plugin.Ptr, e *mapping.Entry) error {
	if inPlace(m, tgt) {
		return nil
	}
	ev, err := w.submit(m, tgt)
	if err != nil {
		return err
	}
	if old := w.d.table.Copied(e, ev); old != nil {
		_ = old.Close()
	}
	return nil
}

// submit enqueues the copy of m's buffer to tgt and records an event that
// fires when it is done.
func (w *work) submit(m MapItem, tgt plugin.Ptr) (plugin.Event, error) {
	d := w.d
	w.data(tool.CopyToDevice, m.Buf, tgt)
	if d.log.On(config.InfoCopies) { // its arguments are boxed only then
		d.log.Taskf(config.InfoCopies, d.Num, w.task, "Copying data from host to device, HstPtr=%#x, TgtPtr=%#x, Size=%d, Name=%s",
			m.Buf.Addr(), uint64(tgt), m.Buf.Size, nameOf(m.Buf.Name))
	}
	if d.log.On(config.InfoCopies | InfoCheck) {
		d.noteCopyIn(w.task, m.Buf)
	}
	if err := w.cq.Queue.Submit(tgt, m.Buf.Bytes()); err != nil {
		return nil, d.mapErr(w.op, m, err, "cannot copy to the device")
	}
	ev, err := d.Dev.NewEvent()
	if err == nil {
		if err = w.cq.Queue.Record(ev); err != nil {
			_ = ev.Close()
		}
	}
	if err != nil {
		return nil, d.mapErr(w.op, m, err, "cannot record the copy's event")
	}
	return ev, nil
}

// copyOut enqueues the copy of tgt back to m's buffer (none for a buffer
// in place).
func (w *work) copyOut(m MapItem, tgt plugin.Ptr) error {
	d := w.d
	if inPlace(m, tgt) {
		return nil
	}
	if d.log.On(config.InfoCopies) { // its arguments are boxed only then
		d.log.Taskf(config.InfoCopies, d.Num, w.task, "Copying data from device to host, TgtPtr=%#x, HstPtr=%#x, Size=%d, Name=%s",
			uint64(tgt), m.Buf.Addr(), m.Buf.Size, nameOf(m.Buf.Name))
	}
	w.data(tool.CopyFromDevice, m.Buf, tgt)
	if err := w.cq.Queue.Retrieve(m.Buf.Bytes(), tgt); err != nil {
		return d.mapErr(w.op, m, err, "cannot copy from the device")
	}
	return nil
}

func implicitNote(m MapItem) string {
	if m.Type&mapping.MapImplicit != 0 {
		return " (implicit)"
	}
	return ""
}

// refString is a count in the info output: INF for infinite (-1 in plans).
func refString(n int64) string {
	if n < 0 {
		return "INF"
	}
	return strconv.FormatInt(n, 10)
}

func incNote(moved bool, n int64) string {
	if moved && n >= 0 {
		return " (incremented)"
	}
	return ""
}

// exit unmaps one buffer at a construct's end (target, target data, exit
// data): it moves the reference count and enqueues the copy out on w's queue
// when the count reaches zero or always is given. The entry is freed when
// the last work using it is done. A failed copy out is w's error; the
// returned error is the item's refusal.
func (w *work) exit(m MapItem) error {
	d := w.d
	if m.Buf.Size == 0 {
		return nil
	}
	var p mapping.Plan
	d.table.Exit(&p, &m.Buf, m.Type)
	for p.Do&mapping.Retry != 0 {
		<-p.Other.Settled()
		d.table.Exit(&p, &m.Buf, m.Type)
	}
	if p.Fault != mapping.OK {
		return w.refused(m, &p)
	}
	e := p.Entry
	if e == nil {
		return nil // exit of an unmapped buffer is a no-op
	}
	w.use(e)
	if m.Buf.Name == "" {
		m.Buf.Name = e.Name // messages name a section of a named mapping by its name
	}
	if p.Do&mapping.CopyOut != 0 {
		if err := w.copyOut(m, e.At(m.Buf.Addr())); err != nil {
			w.err(err)
		}
	}
	if p.Do&mapping.Unmapped != 0 {
		d.log.Taskf(config.InfoMappingChanged, d.Num, w.task, "Removing map entry with HstPtrBegin=%#x, TgtPtrBegin=%#x, Size=%d, Name=%s",
			e.HstBegin, uint64(e.Tgt()), e.Size(), nameOf(e.Name))
	}
	return nil
}

// update copies a present buffer to or from the device (target update); a
// buffer that is not present is skipped unless the present modifier is given.
func (w *work) update(m MapItem) error {
	d := w.d
	var p mapping.Plan
	d.table.Update(&p, &m.Buf, m.Type)
	if p.Fault != mapping.OK {
		return w.refused(m, &p)
	}
	e := p.Entry
	if e == nil {
		return nil
	}
	w.use(e)
	if m.Buf.Name == "" {
		m.Buf.Name = e.Name // messages name a section of a named mapping by its name
	}
	tgt := e.At(m.Buf.Addr())
	if p.Do&mapping.CopyIn != 0 {
		return w.copyIn(m, tgt, e)
	}
	return w.copyOut(m, tgt)
}

// release ends w's uses of the entries it used; an entry whose last use
// that was, and that left the table, is freed.
func (w *work) release() {
	var buf [2]mapping.Gone
	for _, g := range w.d.table.DoneAll(w.used, buf[:0]) {
		w.free(g.Entry, g.Event)
	}
	// The work is over: a completed task that the program holds keeps
	// no entry (nor its host buffer) alive.
	clear(w.used)
	w.used = nil
}

// free frees the memory of an entry that left the table, once no work uses
// it (w was the last), and closes ev, its last copy's event.
func (w *work) free(e *mapping.Entry, ev plugin.Event) {
	d := w.d
	if t := d.tool; t != nil {
		t.DataOp(tool.DataEvent{Where: w.where(), Kind: tool.MapRemove, Name: e.Name, Host: e.HstBegin, Target: uint64(e.Tgt()), Bytes: e.Size()})
	}
	if e.Owned() {
		if err := d.Dev.Free(e.Tgt()); err != nil {
			d.log.Printf(config.InfoMappingChanged, d.Num, "Freeing TgtPtrBegin=%#x failed: %v", uint64(e.Tgt()), err)
		}
	}
	if ev != nil {
		_ = ev.Close()
	}
}

// data tells the tool about a data operation of w.
func (w *work) data(kind tool.DataKind, b mapping.Buf, tgt plugin.Ptr) {
	if t := w.d.tool; t != nil {
		t.DataOp(tool.DataEvent{Where: w.where(), Kind: kind, Name: b.Name, Host: b.Addr(), Target: uint64(tgt), Bytes: b.Size})
	}
}

// GOFFLOAD_CHECK=maps: a checking mode for the mistakes that give no error
// (as CUDA's compute-sanitizer and Go's -race are). Before a kernel runs,
// the fresh device memory of its Out and Scratch buffers is filled with a
// pattern (checkByte); after it, an In buffer whose device copy changed
// and an Out element that still holds the pattern are reported on the info
// output, naming the kernel, the parameter and the first index. A buffer
// that was present already (a data region's) is not filled: its contents
// are the region's. It costs a copy of each buffer checked, each way.

// InfoCheck is the info output of GOFFLOAD_CHECK=maps (not a
// LIBOMPTARGET_INFO bit).
const InfoCheck config.InfoFlags = 0x10000

// checkByte fills Out and Scratch buffers: 0xA5A5A5A5 is an unlikely
// int32, and a float64 of 0xA5… bytes an unlikely value.
const checkByte = 0xA5

// repeatHint is how many copies of the same host range to the same device
// make the info output suggest a data region.
const repeatHint = 8

// repeatRanges bounds the ranges a device counts copies of: past it, the
// one copied least recently is forgotten.
const repeatRanges = 64

// copyRepeats counts a device's copies in by host range (address and
// size), for the data-region hint. The hint is about any range copied
// again and again, whatever is copied between (axpy's x and y alternate).
// It counts the repeatRanges ranges copied most recently.
type copyRepeats struct {
	ranges map[copyRange]*copyCount
	clock  uint64
}

type copyRange struct {
	addr uintptr
	size int64
}

type copyCount struct {
	n      int
	last   uint64 // clock of the last copy
	hinted bool
}

// count counts a copy of r and reports whether it is the one that makes
// the hint.
func (c *copyRepeats) count(r copyRange) bool {
	c.clock++
	e := c.ranges[r]
	if e == nil {
		if c.ranges == nil {
			c.ranges = map[copyRange]*copyCount{}
		}
		if len(c.ranges) >= repeatRanges {
			var old copyRange
			oldest := c.clock
			for k, v := range c.ranges {
				if v.last < oldest {
					old, oldest = k, v.last
				}
			}
			delete(c.ranges, old)
		}
		e = &copyCount{}
		c.ranges[r] = e
	}
	e.n++
	e.last = c.clock
	hint := e.n == repeatHint && !e.hinted
	e.hinted = e.hinted || hint
	return hint
}

// noteCopyIn counts a copy of buf to d and, the repeatHint-th time for its
// host range, suggests a data region (under the copies info flag, and in
// the checking mode).
func (d *Device) noteCopyIn(task uint64, buf mapping.Buf) {
	d.qmu.Lock()
	hint := d.repeats.count(copyRange{buf.Addr(), buf.Size})
	d.qmu.Unlock()
	if hint {
		d.log.Taskf(config.InfoCopies|InfoCheck, d.Num, task, "hint: %s (HstPtr=%#x, Size=%d) was copied to %s %d times: map it once, with a data region (Device.Data, EnterData/ExitData) around the constructs that use it, and they find it present",
			nameOf(buf.Name), buf.Addr(), buf.Size, d.Label(), repeatHint)
	}
}

// argCheck is one buffer argument checked around a kernel.
type argCheck struct {
	param  int
	name   string
	out    bool   // an Out buffer filled with the pattern; else an In buffer
	elem   int    // bytes per element
	before []byte // In: the device copy before the kernel
	after  []byte // what the device holds after it
}

// checkBefore fills the fresh Out and Scratch buffers of a launch with the
// pattern and copies its In buffers back, on w's queue before the launch;
// fresh says which arguments' mappings the construct made.
func (d *Device) checkBefore(w *work, k *entries.Kernel, args []KernelArg, pargs []plugin.Arg, fresh []bool) []*argCheck {
	var cs []*argCheck
	for i, a := range args {
		p := k.Params()[i]
		if p.Kind != plugin.Slice || a.DevPtr || pargs[i].Len == 0 {
			continue
		}
		size := int64(pargs[i].Len) * int64(p.Type.Size())
		t := a.Map.Type
		c := &argCheck{param: i, name: a.Map.Buf.Name, elem: int(p.Type.Size()), after: make([]byte, size)}
		switch {
		case t&mapping.MapTo == 0 && fresh[i] && uint64(pargs[i].Ptr) != uint64(a.Map.Buf.Addr()): // Out (from) or Scratch (alloc): fresh memory, not the program's buffer itself (a HostSharer's)
			if err := w.cq.Queue.Submit(pargs[i].Ptr, bytes.Repeat([]byte{checkByte}, int(size))); err != nil {
				continue
			}
			if t&mapping.MapFrom == 0 {
				continue // Scratch: filled, not reported
			}
			c.out = true
		case t&mapping.MapTo != 0 && t&mapping.MapFrom == 0: // In
			c.before = make([]byte, size)
			if w.cq.Queue.Retrieve(c.before, pargs[i].Ptr) != nil {
				continue
			}
		default:
			continue
		}
		cs = append(cs, c)
	}
	return cs
}

// checkAfter copies the checked buffers back after the launch, and reports
// once the queue is done.
func (d *Device) checkAfter(w *work, k *entries.Kernel, pargs []plugin.Arg, cs []*argCheck) {
	if len(cs) == 0 {
		return
	}
	for _, c := range cs {
		w.cq.Queue.Retrieve(c.after, pargs[c.param].Ptr)
	}
	task := w.task
	w.after = append(w.after, func() error {
		for _, c := range cs {
			d.reportCheck(task, k, c)
		}
		return nil
	})
}

// reportCheck says what c found, if anything.
func (d *Device) reportCheck(task uint64, k *entries.Kernel, c *argCheck) {
	n := len(c.after) / c.elem
	first, count := -1, 0
	for e := range n {
		el := c.after[e*c.elem : (e+1)*c.elem]
		var bad bool
		if c.out {
			bad = allBytes(el, checkByte)
		} else {
			bad = !bytes.Equal(el, c.before[e*c.elem:(e+1)*c.elem])
		}
		if bad {
			count++
			if first < 0 {
				first = e
			}
		}
	}
	if count == 0 {
		return
	}
	param := fmt.Sprintf("parameter %d (%s)", c.param, nameOf(c.name))
	if c.out {
		d.log.Taskf(InfoCheck, d.Num, task, "check: kernel %s, %s, Out: %d of %d elements not written, the first at index %d: they hold the fill pattern (0x%X bytes); the host gets what device memory held there (another buffer's old data, without the check)",
			k.Name(), param, count, n, first, checkByte)
	} else {
		d.log.Taskf(InfoCheck, d.Num, task, "check: kernel %s, %s, In: %d of %d elements changed, the first at index %d: the kernel wrote into an In buffer (on the initial device that changes the host copy, on other devices it does not: the result depends on where it runs)",
			k.Name(), param, count, n, first)
	}
}

func allBytes(b []byte, v byte) bool {
	for _, x := range b {
		if x != v {
			return false
		}
	}
	return len(b) > 0
}

// checkInitial is checkBefore and checkAfter for a kernel on the initial
// device, whose arguments are host memory. It fills Out slices with the
// pattern and snapshots In slices. After the kernel reports, it puts back what
// the kernel did not write into an Out slice. That is the host's data, as
// without the check. It returns what to call after the kernel.
func (d *Device) checkInitial(task uint64, k *entries.Kernel, args []KernelArg) func() {
	type slot struct {
		c    *argCheck
		host []byte
		keep []byte // Out: the host's data before the fill
	}
	var slots []slot
	for i, a := range args {
		p := k.Params()[i]
		if p.Kind != plugin.Slice || a.DevPtr || a.Map.Buf.Size == 0 {
			continue
		}
		host := a.Map.Buf.Bytes()
		t := a.Map.Type
		c := &argCheck{param: i, name: a.Map.Buf.Name, elem: int(p.Type.Size())}
		switch {
		case t&mapping.MapFrom != 0 && t&mapping.MapTo == 0:
			c.out = true
			keep := append([]byte(nil), host...)
			for j := range host {
				host[j] = checkByte
			}
			slots = append(slots, slot{c, host, keep})
		case t&mapping.MapTo != 0 && t&mapping.MapFrom == 0:
			c.before = append([]byte(nil), host...)
			slots = append(slots, slot{c: c, host: host})
		}
	}
	return func() {
		for _, s := range slots {
			s.c.after = s.host
			d.reportCheck(task, k, s.c)
			if s.c.out { // what the kernel did not write is the host's again
				for e := 0; e+s.c.elem <= len(s.host); e += s.c.elem {
					if allBytes(s.host[e:e+s.c.elem], checkByte) {
						copy(s.host[e:e+s.c.elem], s.keep[e:e+s.c.elem])
					}
				}
			}
		}
	}
}
