package core

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
	"weak"

	"github.com/goffload/offload/internal/config"
	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/internal/mapping"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/tool"
)

// The device memory routines: OpenMP's omp_target_alloc, omp_target_free,
// omp_target_memcpy, omp_target_is_present, omp_target_associate_ptr and
// omp_target_disassociate_ptr. The initial device's memory is host memory,
// which the caller (package offload) handles itself.

// Alloc allocates size bytes of device memory.
func (d *Device) Alloc(size int64) (plugin.Ptr, error) {
	if size < 0 {
		return 0, Errorf("goffload: %s: alloc of %d bytes: %w: negative size", d.Label(), size, ErrBadArgument)
	}
	p, err := d.Dev.Alloc(size)
	if err != nil {
		d.noteLost(err)
		return 0, Errorf("goffload: %s: alloc of %d bytes: %w", d.Label(), size, err)
	}
	return p, nil
}

// Free releases memory from Alloc.
func (d *Device) Free(p plugin.Ptr) error {
	if err := d.Dev.Free(p); err != nil {
		d.noteLost(err)
		return Errorf("goffload: %s: free of %#x: %w", d.Label(), uint64(p), err)
	}
	return nil
}

// Loc is one side of a copy: device memory (Dev, not the initial device, at
// Ptr) or host memory (Host).
type Loc struct {
	Dev  *Device
	Ptr  plugin.Ptr
	Host []byte
}

func (l Loc) onDevice() bool { return l.Dev != nil && !l.Dev.IsInitial() }

// Memcpy copies n bytes from src to dst; either may be host memory. A copy
// between two devices goes straight between them where their kind allows,
// and through host memory otherwise.
func Memcpy(dst, src Loc, n int64) error { return MemcpyContext(context.Background(), dst, src, n) }

// MemcpyContext is Memcpy that stops waiting when ctx is done (see Run).
func MemcpyContext(ctx context.Context, dst, src Loc, n int64) error {
	d, op := MemcpyOp(dst, src, n)
	if d == nil {
		copy(dst.Host[:n], src.Host[:n])
		return nil
	}
	return d.Run(ctx, op, false)
}

// MemcpyOp lowers a copy to the device whose queue does it (the source
// device, unless the source is host memory); a nil device means both sides
// are host memory.
func MemcpyOp(dst, src Loc, n int64) (*Device, Op) {
	const name = "omp_target_memcpy"
	switch {
	case !dst.onDevice() && !src.onDevice():
		return nil, Op{}
	case dst.onDevice() && !src.onDevice():
		return dst.Dev, Op{Name: name, Enqueue: func(d *Device, w *work) {
			w.data(tool.CopyToDevice, mapping.Buf{Size: n, Name: name}, dst.Ptr)
			if d.log.On(config.InfoCopies) { // its arguments are boxed only then
				d.log.Taskf(config.InfoCopies, d.Num, w.task, "Copying data from host to device, HstPtr=%#x, TgtPtr=%#x, Size=%d, Name=%s",
					hostAddr(src.Host), uint64(dst.Ptr), n, name)
			}
			if err := w.cq.Queue.Submit(dst.Ptr, src.Host[:n]); err != nil {
				w.err(Errorf("goffload: %s: %s: %w", d.Label(), name, err))
			}
		}}
	case !dst.onDevice() && src.onDevice():
		return src.Dev, Op{Name: name, Enqueue: func(d *Device, w *work) {
			w.data(tool.CopyFromDevice, mapping.Buf{Size: n, Name: name}, src.Ptr)
			if d.log.On(config.InfoCopies) { // its arguments are boxed only then
				d.log.Taskf(config.InfoCopies, d.Num, w.task, "Copying data from device to host, TgtPtr=%#x, HstPtr=%#x, Size=%d, Name=%s",
					uint64(src.Ptr), hostAddr(dst.Host), n, name)
			}
			if err := w.cq.Queue.Retrieve(dst.Host[:n], src.Ptr); err != nil {
				w.err(Errorf("goffload: %s: %s: %w", d.Label(), name, err))
			}
		}}
	}
	return src.Dev, Op{Name: name, x2x: exchangeArgs{dst: dst.Dev, dstPtr: dst.Ptr, srcPtr: src.Ptr, n: n}}
}

// exchangeArgs is a device-to-device copy's, held in its Op rather than in
// a closure (MemcpyOp): n bytes from srcPtr on the Op's device to dstPtr
// on dst.
type exchangeArgs struct {
	dst            *Device
	dstPtr, srcPtr plugin.Ptr
	n              int64
}

// enqueueExchange enqueues the device-to-device copy x on w, d's work.
func (d *Device) enqueueExchange(w *work, x exchangeArgs) {
	const name = "omp_target_memcpy"
	dst, n := Loc{Dev: x.dst, Ptr: x.dstPtr}, x.n
	w.data(tool.CopyDeviceToDevice, mapping.Buf{Size: n, Name: name}, x.srcPtr)
	err := exchange(w.cq.Queue, dst.Dev.Dev, dst.Ptr, x.srcPtr, n)
	if d.log.On(config.InfoCopies) { // its arguments are boxed only then
		how := ""
		if errors.Is(err, plugin.ErrUnsupported) {
			how = " (staged through host memory)"
		}
		d.log.Taskf(config.InfoCopies, d.Num, w.task, "Copying data from device %d to device %d%s, SrcPtr=%#x, DstPtr=%#x, Size=%d, Name=%s",
			d.Num, dst.Dev.Num, how, uint64(x.srcPtr), uint64(dst.Ptr), n, name)
	}
	if errors.Is(err, plugin.ErrUnsupported) {
		// No direct path: stage through host memory. The copy out is on
		// this queue; the copy in follows once it is done, off the
		// caller's goroutine (a task with work after its queue's is
		// waited for on the host by its dependents).
		stage := make([]byte, n)
		if err = w.cq.Queue.Retrieve(stage, x.srcPtr); err == nil {
			w.after = append(w.after, func() error {
				if err := Memcpy(dst, Loc{Host: stage}, n); err != nil {
					return Errorf("goffload: %s: %s: the copy in to %s: %w", d.Label(), name, dst.Dev.Label(), err)
				}
				return nil
			})
		}
	}
	if err != nil {
		w.err(Errorf("goffload: %s: %s: %w", d.Label(), name, err))
	}
}

// hostAddr is the address of b's memory, for the info output (0 if none).
func hostAddr(b []byte) uint64 {
	if len(b) == 0 {
		return 0
	}
	return uint64(uintptr(unsafe.Pointer(&b[0])))
}

// IsPresent reports whether buf lies inside a mapping on d.
func (d *Device) IsPresent(buf mapping.Buf) bool {
	if d.IsInitial() {
		return true
	}
	e, _ := d.table.Lookup(buf.Addr(), buf.Size)
	return e != nil
}

// MappedPtr returns the device address buf is mapped to.
func (d *Device) MappedPtr(buf mapping.Buf) (plugin.Ptr, error) {
	e, p := d.table.Lookup(buf.Addr(), buf.Size)
	if e == nil {
		return 0, d.mapErr("omp_get_mapped_ptr", MapItem{Buf: buf}, ErrNotPresent, "no mapping contains the buffer")
	}
	return p, nil
}

// The memory routines that change the present table, as errors name them.
const (
	opAssociate    = "omp_target_associate_ptr"
	opDisassociate = "omp_target_disassociate_ptr"
)

// Associate maps buf to device memory at p, which the caller owns: the
// entry's reference count is infinite, so maps never copy into a new
// allocation or free it; Disassociate removes it.
func (d *Device) Associate(buf mapping.Buf, p plugin.Ptr) error {
	const op = opAssociate
	m := MapItem{Buf: buf}
	if buf.Size <= 0 {
		return d.mapErr(op, m, ErrBadArgument, "cannot associate an empty buffer")
	}
	var pl mapping.Plan
	d.table.Associate(&pl, &buf, p)
	switch pl.Fault {
	case mapping.Conflict:
		return d.conflictErr(op, m, pl.Other)
	case mapping.Mapped:
		e := pl.Other
		how := fmt.Sprintf("map clauses (DynRefCount=%s, HoldRefCount=%d)", refString(pl.Dyn), pl.Hold)
		if pl.Dyn < 0 {
			how = fmt.Sprintf("an earlier omp_target_associate_ptr to TgtPtrBegin=%#x", uint64(e.Tgt()))
		}
		return d.mapErr(op, m, &reason{"the range is mapped already", ErrBadMap},
			"the range lies inside the mapping of host [%#x, %#x) (Size=%d, %s), made by %s; disassociate or unmap it first",
			e.HstBegin, e.HstEnd, e.Size(), mappingName(e.Name), how)
	}
	if pl.Entry != nil {
		d.log.Printf(config.InfoMappingChanged, d.Num, "Creating new map entry with HstPtrBegin=%#x, TgtPtrBegin=%#x, Size=%d, DynRefCount=INF, HoldRefCount=0, Name=%s",
			buf.Addr(), uint64(p), buf.Size, nameOf(buf.Name))
	}
	return nil
}

// Disassociate removes an association made by Associate. As libomptarget
// does, it refuses a mapping made by map clauses. It refuses an
// association that a region holds (a Hold map on it, HoldRefCount > 0):
// the region's constructs use the device memory until it ends.
func (d *Device) Disassociate(buf mapping.Buf) error {
	const op = opDisassociate
	m := MapItem{Buf: buf}
	var p mapping.Plan
	d.table.Disassociate(&p, buf.Addr())
	switch p.Fault {
	case mapping.NotPresent:
		if c := p.Other; c != nil {
			return d.mapErr(op, named(m, c), ErrNotPresent, "no association starts at this address: it lies %d bytes into the mapping of host [%#x, %#x) (Size=%d, %s); disassociate the address the association starts at",
				buf.Addr()-c.HstBegin, c.HstBegin, c.HstEnd, c.Size(), mappingName(c.Name))
		}
		return d.mapErr(op, m, ErrNotPresent, "no association starts at this address")
	case mapping.NotAssociated:
		return d.mapErr(op, named(m, p.Other), &reason{"not an association", ErrBadMap},
			"the buffer is mapped by map clauses (DynRefCount=%d, HoldRefCount=%d), not by omp_target_associate_ptr; unmap it with target exit data", p.Dyn, p.Hold)
	case mapping.Held:
		return d.mapErr(op, named(m, p.Other), &reason{"the association is in use", ErrBadMap},
			"a target or target data region holds the association (DynRefCount=INF, HoldRefCount=%d); disassociate it after the region ends", p.Hold)
	}
	e := p.Entry
	d.log.Printf(config.InfoMappingChanged, d.Num, "Removing map entry with HstPtrBegin=%#x, TgtPtrBegin=%#x, Size=%d, Name=%s",
		e.HstBegin, uint64(e.Tgt()), e.Size(), nameOf(e.Name))
	return nil
}

// exchange is q's Exchange, or an error wrapping ErrUnsupported if q is not
// a plugin.Exchanger (the caller stages the copy through host memory).
func exchange(q plugin.Queue, dst plugin.Device, dstPtr, src plugin.Ptr, n int64) error {
	if ex, ok := q.(plugin.Exchanger); ok {
		return ex.Exchange(dst, dstPtr, src, n)
	}
	return fmt.Errorf("%w: the queue copies no device memory itself", plugin.ErrUnsupported)
}

// The live allocations that the memory routines (omp_target_alloc) made on
// each device, so that a pointer to memory that was freed — whose block a
// later allocation may reuse — is refused instead of writing into someone
// else's data. Each allocation gets a generation number that no other
// allocation in the process ever gets; a DevicePtr carries its allocation's
// start and generation, and is live while the table maps that start to that
// generation. Free removes the entry, so the table holds only live
// allocations. The table of a device lives as long as the device does (it is
// dropped when the runtime that opened the device is collected).

// allocTable is one device's live allocations.
type allocTable struct {
	mu   sync.RWMutex
	live map[plugin.Ptr]allocRec
}

type allocRec struct {
	size int64
	gen  uint64
}

var (
	allocGen    atomic.Uint64
	allocTables sync.Map // weak.Pointer[Device] -> *allocTable
)

// allocs returns d's table, creating it if create is set (nil otherwise).
func (d *Device) allocs(create bool) *allocTable {
	key := weak.Make(d)
	if t, ok := allocTables.Load(key); ok {
		return t.(*allocTable)
	}
	if !create {
		return nil
	}
	t, loaded := allocTables.LoadOrStore(key, &allocTable{live: map[plugin.Ptr]allocRec{}})
	if !loaded {
		runtime.AddCleanup(d, func(k weak.Pointer[Device]) { allocTables.Delete(k) }, key)
	}
	return t.(*allocTable)
}

// TrackAlloc records an allocation of size bytes at p made by Alloc and
// returns its generation, which CheckAlloc and UntrackAlloc take.
func (d *Device) TrackAlloc(p plugin.Ptr, size int64) uint64 {
	gen := allocGen.Add(1)
	t := d.allocs(true)
	t.mu.Lock()
	t.live[p] = allocRec{size: size, gen: gen}
	t.mu.Unlock()
	return gen
}

// CheckAlloc reports an error wrapping plugin.ErrBadPointer if the
// allocation that starts at base with generation gen is no longer live.
// It was freed, and its memory may belong to another allocation now.
// Or it belongs to a runtime that was stopped.
func (d *Device) CheckAlloc(base plugin.Ptr, gen uint64) error {
	if t := d.allocs(false); t != nil {
		t.mu.RLock()
		rec, ok := t.live[base]
		t.mu.RUnlock()
		if ok && rec.gen == gen {
			return nil
		}
	}
	return fmt.Errorf("%w: the allocation at %#x on %s was freed (its memory may belong to another allocation now), or comes from before the runtime was last started",
		plugin.ErrBadPointer, uint64(base), d.Label())
}

// UntrackAlloc removes the allocation at base with generation gen, checking
// first that it is live (see CheckAlloc): a second Free of a pointer, whose
// block another allocation may have reused since, is refused.
func (d *Device) UntrackAlloc(base plugin.Ptr, gen uint64) error {
	if t := d.allocs(false); t != nil {
		t.mu.Lock()
		rec, ok := t.live[base]
		if ok && rec.gen == gen {
			delete(t.live, base)
			t.mu.Unlock()
			return nil
		}
		t.mu.Unlock()
	}
	return fmt.Errorf("%w: the allocation at %#x on %s was freed already, or comes from before the runtime was last started",
		plugin.ErrBadPointer, uint64(base), d.Label())
}

// LiveAllocs is the number of allocations of d that the memory routines
// made and did not free.
func (d *Device) LiveAllocs() int {
	t := d.allocs(false)
	if t == nil {
		return 0
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.live)
}

// Declare target variables (see entries.Global).
//
// A "to" variable gets device memory on every device at Start, holding the
// host value of then, and a present-table entry with an infinite reference
// count (libomptarget's global entries): maps find it present and never
// copy or free it, target update copies it, and its memory goes with the
// device at Stop. The hidden bind kernel, launched once on the device, tells
// the device where it is.
//
// A "link" variable has device memory only while the program maps its host
// slice (or a slice containing it). Before each kernel launch the core looks
// the variable up in the device's present table and, if what it finds is not
// what the device was last told, enqueues a bind (or unbind) on the kernel's
// own queue, ahead of the kernel. The kernel's work then uses the entry, so
// its memory stays until the kernel is done. Binds carry a generation that
// the device compares, so binds enqueued on different queues may run in any
// order; a launch that finds the last bind fired without error enqueues
// nothing.
//
// The initial device's copies are the host slices themselves.

// opDeclare names the work that sets the variables up at Start.
const opDeclare = "declare target"

// devGlobals is a device's declare target state.
type devGlobals struct {
	bind  *entries.Kernel
	to    map[*mapping.Entry]*entries.Global // the entries of "to" variables
	links []*linkBinding
}

// linkBinding is what a device was last told about a link variable.
type linkBinding struct {
	g   *entries.Global
	mu  sync.Mutex
	e   *mapping.Entry // the entry bound; nil: none (unbound, or never bound if gen is 0)
	gen uint64         // generation of the last bind or unbind enqueued
	ev  plugin.Event   // fires when that bind or unbind has run
}

// declareGlobals binds the variables on the initial device and sets them up
// on every available device; a device where that fails is unavailable (an
// error under MANDATORY).
func (r *Runtime) declareGlobals() error {
	gs, _ := entries.FreezeGlobals()
	frozen.Store(r, true)
	if len(gs) == 0 {
		return nil
	}
	entries.BindHost(r.Initial.pool, r.Initial.Num)
	for _, d := range r.Devices {
		if d.Unavailable != nil || d.Dev == nil {
			continue
		}
		if err := d.setupGlobals(); err != nil {
			if err := r.unavailable(d, err); err != nil {
				return err
			}
		}
	}
	return nil
}

// frozen holds the runtimes whose Start froze the variables' registration.
var frozen sync.Map

// dropGlobals forgets the initial device's bindings (the other devices'
// go when their pools close) and lets variables be declared
// again.
func (r *Runtime) dropGlobals() {
	if r.Initial != nil {
		entries.DropGlobals(r.Initial.pool)
	}
	if _, ok := frozen.LoadAndDelete(r); ok {
		entries.ThawGlobals()
	}
}

// setupGlobals gives d its copy of every "to" variable and prepares the
// link variables' bindings.
func (d *Device) setupGlobals() (err error) {
	gs, bind := entries.Globals()
	dg := &devGlobals{bind: bind, to: map[*mapping.Entry]*entries.Global{}}
	q, err := d.getQueue(opDeclare)
	if err != nil {
		return err
	}
	defer func() { d.release(q, err != nil) }()
	fail := func(g *entries.Global, err error) error {
		d.noteLost(err)
		return fmt.Errorf("cannot set up declare target %s: %w", g.Describe(), err)
	}
	var made []*mapping.Entry
	for _, g := range gs {
		if g.Link {
			dg.links = append(dg.links, &linkBinding{g: g})
			continue
		}
		tgt, err := d.Dev.Alloc(g.Size)
		if err != nil {
			return fail(g, err)
		}
		e := mapping.Static(mapping.Buf{Ptr: g.Host, Size: g.Size, Name: g.Name}, tgt, true)
		d.log.Printf(config.InfoMappingChanged, d.Num, "Creating new map entry with HstPtrBegin=%#x, TgtPtrBegin=%#x, Size=%d, DynRefCount=INF, HoldRefCount=0, Name=%s (declare target)",
			e.HstBegin, uint64(tgt), g.Size, g.Name)
		d.log.Printf(config.InfoCopies, d.Num, "Copying data from host to device, HstPtr=%#x, TgtPtr=%#x, Size=%d, Name=%s",
			e.HstBegin, uint64(tgt), g.Size, g.Name)
		if err := q.Submit(tgt, mapping.Buf{Ptr: g.Host, Size: g.Size}.Bytes()); err != nil {
			return fail(g, err)
		}
		if err := q.Launch(bind, entries.BindArgs(g, entries.BindOp, 1, tgt)); err != nil {
			return fail(g, err)
		}
		made = append(made, e)
		dg.to[e] = g
	}
	if err := q.Synchronize(); err != nil {
		d.noteLost(err)
		return fmt.Errorf("cannot set up the declare target variables: %w", err)
	}
	d.table.Insert(made...)
	d.globals = dg
	return nil
}

// DeclaredAt returns the declare target "to" variable whose entry on d
// contains buf, if any: its entry is not the program's to remove.
func (d *Device) DeclaredAt(buf mapping.Buf) (*entries.Global, bool) {
	if d.globals == nil || len(d.globals.to) == 0 || d.table == nil {
		return nil, false
	}
	e, _ := d.table.Lookup(buf.Addr(), buf.Size)
	g, ok := d.globals.to[e]
	return g, ok
}

// bindLinks makes d's kernel launch on w see the link variables as they are
// mapped now (see the comment at the top).
func (d *Device) bindLinks(w *work) {
	dg := d.globals
	if dg == nil {
		return
	}
	for _, lb := range dg.links {
		if err := d.bindLink(w, dg.bind, lb); err != nil {
			w.err(err)
			return
		}
	}
}

func (d *Device) bindLink(w *work, bind *entries.Kernel, lb *linkBinding) error {
	g := lb.g
	var p mapping.Plan
	d.table.Use(&p, g.Addr(), g.Size)
	for p.Do&mapping.Retry != 0 {
		<-p.Other.Settled()
		d.table.Use(&p, g.Addr(), g.Size)
	}
	e, copied := p.Entry, p.Event
	tgt := plugin.Ptr(0)
	if e != nil {
		w.use(e) // its memory stays until the kernel is done
		tgt = e.At(g.Addr())
		if copied != nil {
			if fired, _ := copied.Query(); !fired {
				if err := w.cq.Queue.Wait(copied); err != nil {
					return Errorf("goffload: %s: %s: declare target %s: cannot wait for the copy into its mapping: %w", d.Label(), w.op, g.Describe(), err)
				}
			}
		}
	}

	lb.mu.Lock()
	defer lb.mu.Unlock()
	if lb.e == e {
		if lb.ev == nil {
			return nil // never bound, and not mapped: the device has nothing
		}
		if fired, err := lb.ev.Query(); fired && err == nil {
			return nil // the device has it already
		}
		// Still on its way (on another queue, maybe behind waits), or it
		// failed: bind again here, ahead of this kernel.
	}
	op := entries.BindOp
	if e == nil {
		op = entries.UnbindOp
	}
	lb.gen++
	if err := w.cq.Queue.Launch(bind, entries.BindArgs(g, op, lb.gen, tgt)); err != nil {
		return Errorf("goffload: %s: %s: declare target %s: cannot bind it: %w", d.Label(), w.op, g.Describe(), err)
	}
	ev, err := d.Dev.NewEvent()
	if err == nil {
		if err = w.cq.Queue.Record(ev); err != nil {
			_ = ev.Close()
		}
	}
	if err != nil {
		return Errorf("goffload: %s: %s: declare target %s: cannot record its bind: %w", d.Label(), w.op, g.Describe(), err)
	}
	if lb.e != e {
		if e != nil {
			d.log.Taskf(config.InfoMappingChanged, d.Num, w.task, "Binding declare target link variable %s to TgtPtr=%#x (HstPtr=%#x, Size=%d)", g.Name, uint64(tgt), g.Addr(), g.Size)
		} else {
			d.log.Taskf(config.InfoMappingChanged, d.Num, w.task, "Unbinding declare target link variable %s (HstPtr=%#x, Size=%d): not mapped", g.Name, g.Addr(), g.Size)
		}
	}
	old := lb.ev
	lb.e, lb.ev = e, ev
	if old != nil {
		_ = old.Close()
	}
	return nil
}
