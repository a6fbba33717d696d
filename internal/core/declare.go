package core

import (
	"fmt"
	"sync"

	"github.com/goffload/offload/internal/config"
	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/internal/mapping"
	"github.com/goffload/offload/plugin"
)

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
				if err := w.q.Wait(copied); err != nil {
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
	if err := w.q.Launch(bind, entries.BindArgs(g, op, lb.gen, tgt)); err != nil {
		return Errorf("goffload: %s: %s: declare target %s: cannot bind it: %w", d.Label(), w.op, g.Describe(), err)
	}
	ev, err := d.Dev.NewEvent()
	if err == nil {
		if err = w.q.Record(ev); err != nil {
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
