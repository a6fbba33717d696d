package core

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/goffload/offload/internal/config"
	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/internal/mapping"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/tool"
)

// The target construct lowered onto a device: its maps, launch and unmaps
// on a queue (target), or its kernel called on the initial device
// (runInitial).

// target enqueues a target region on w: maps, launch, unmaps.
func (d *Device) target(w *work, k *entries.Kernel, args []KernelArg, g plugin.Geometry) {
	var pargs []plugin.Arg
	if len(args) <= cap(w.args) {
		pargs = w.args[:len(args)]
	} else {
		pargs = make([]plugin.Arg, len(args))
	}
	var mappedBuf [4]MapItem // a few buffers: no allocation
	mapped := mappedBuf[:0]
	checking := d.log.On(InfoCheck)
	var fresh []bool // GOFFLOAD_CHECK: the mappings this construct made
	if checking {
		fresh = make([]bool, len(args))
	}
	err := lowerArgs(k, args, pargs, func(i int, m MapItem) (plugin.Ptr, error) {
		if w.first != nil { // an earlier buffer's copy failed on the queue
			return 0, w.first
		}
		if checking {
			fresh[i] = !d.IsPresent(m.Buf)
		}
		_, tgt, err := w.enter(m)
		if err == nil {
			mapped = append(mapped, m)
		}
		return tgt, err
	})
	if err != nil {
		w.err(err)
	}
	if w.first == nil && d.globals != nil {
		d.bindLinks(w) // declare target link variables (memory.go)
	}
	if w.first == nil {
		if d.log.On(config.InfoKernels) {
			if g.IsZero() {
				d.log.Taskf(config.InfoKernels, d.Num, w.task, "Launching kernel %s on %s", k.Name(), d.Label())
			} else {
				d.log.Taskf(config.InfoKernels, d.Num, w.task, "Launching kernel %s on %s with %s", k.Name(), d.Label(), g)
			}
		}
		if t := d.tool; t != nil {
			var bytes int64
			for i, p := range k.Params() {
				if p.Kind == plugin.Slice {
					bytes += int64(pargs[i].Len) * int64(p.Type.Size())
				}
			}
			t.KernelLaunch(tool.KernelEvent{Where: w.where(), Name: k.Name(), Args: len(args), ArgBytes: bytes})
		}
		var checks []*argCheck
		if checking {
			checks = d.checkBefore(w, k, args, pargs, fresh)
		}
		if err := launch(w.cq.Queue, k, pargs, g, w.stop); err != nil {
			w.err(Errorf("goffload: %s: %s: %w", d.Label(), w.op, err))
		} else if checking {
			d.checkAfter(w, k, pargs, checks)
		}
	}
	for i := len(mapped) - 1; i >= 0; i-- {
		m := mapped[i]
		if w.first != nil {
			m.Type &^= mapping.MapFrom // nothing ran: release without copying back
		}
		if err := w.exit(m); err != nil {
			w.err(err)
		}
	}
}

// lowerArgs lowers args, kernel k's, into pargs: a scalar as it is, a
// device pointer as its address, a buffer as the device address buffer
// gives for its map clause (mapping it, or finding it present). It stops
// at buffer's first error.
func lowerArgs(k *entries.Kernel, args []KernelArg, pargs []plugin.Arg, buffer func(i int, m MapItem) (plugin.Ptr, error)) error {
	for i, a := range args {
		switch {
		case k.Params()[i].Kind == plugin.Scalar:
			pargs[i] = plugin.Arg{Scalar: a.Scalar}
		case a.DevPtr:
			pargs[i] = plugin.Arg{Ptr: a.Ptr, Len: a.Len}
		default:
			tgt, err := buffer(i, a.Map)
			if err != nil {
				return err
			}
			pargs[i] = plugin.Arg{Ptr: tgt, Len: a.Len}
		}
	}
	return nil
}

// launch enqueues k on q with g, if g is set and q takes a geometry, and
// with stop, if set and q can stop a launch (plugin.StopLauncher).
func launch(q plugin.Queue, k *entries.Kernel, args []plugin.Arg, g plugin.Geometry, stop *plugin.StopSignal) error {
	if gl, ok := q.(plugin.GeometryLauncher); ok && !g.IsZero() {
		return gl.LaunchGeometry(k, args, g)
	}
	if sl, ok := q.(plugin.StopLauncher); ok && stop != nil {
		return sl.LaunchStop(k, args, stop)
	}
	return q.Launch(k, args)
}

func (d *Device) runInitial(task uint64, k *entries.Kernel, args []KernelArg, fallback bool, stop *plugin.StopSignal) error {
	vals := make([]reflect.Value, len(args))
	for i, a := range args {
		if k.Params()[i].Kind == plugin.Scalar {
			vals[i] = reflect.ValueOf(a.Scalar)
		} else {
			vals[i] = a.Slice
		}
	}
	how := ""
	if fallback {
		how = " (host fallback)"
	}
	d.log.Taskf(config.InfoKernels, d.Num, task, "Running kernel %s on %s%s", k.Name(), d.Label(), how)
	kctx := plugin.NewKernelCtx(d.Num, d.pool)
	switch {
	case stop != nil: // the construct's own, which stops with the device's too
		own := plugin.NewStopSignal()
		defer own.StopWith(d.stop, stop)()
		kctx = kctx.WithStop(own)
	case d.stop != nil:
		kctx = kctx.WithStop(d.stop)
	}
	if d.log.On(InfoCheck) {
		defer d.checkInitial(task, k, args)()
	}
	if err := k.Call(kctx, vals); err != nil {
		return Errorf("goffload: %s: target %s: %w", d.Label(), k.Name(), err)
	}
	return nil
}

func (d *Device) logArgs(task uint64, k *entries.Kernel, args []KernelArg) {
	d.log.Taskf(config.InfoKernelArgs, d.Num, task, "Entering kernel %s with %d arguments:", k.Name(), len(args))
	for i, a := range args {
		p := k.Params()[i]
		switch {
		case p.Kind == plugin.Scalar:
			name := a.Map.Buf.Name
			if name == "" {
				name = fmt.Sprintf("arg%d", i)
			}
			d.log.Taskf(config.InfoKernelArgs, d.Num, task, "firstprivate(%s)[%d]", name, p.Type.Size())
		case a.DevPtr:
			d.log.Taskf(config.InfoKernelArgs, d.Num, task, "is_device_ptr(arg%d)[%d]", i, int64(a.Len)*int64(p.Type.Size()))
		default:
			d.log.Taskf(config.InfoKernelArgs, d.Num, task, "%s(%s)[%d]%s", a.Map.Kind(), nameOf(a.Map.Buf.Name), a.Map.Buf.Size, implicitNote(a.Map))
		}
	}
}

// Map clauses: the host buffers they name, their map types and modifiers,
// how messages write them, and the checks a construct makes of its list.

// MapItem is one map clause on one buffer.
type MapItem struct {
	Buf  mapping.Buf
	Type mapping.MapType
	// Exit says the clause is an exit clause (release rather than alloc).
	Exit bool
	// Unmappable, if set, says why the buffer cannot be mapped (its
	// elements are not plain data): every construct refuses the clause
	// with an error that names the device and the buffer.
	Unmappable string
}

// Kind is the clause's map type name: to, from, tofrom, alloc, release,
// delete.
func (m MapItem) Kind() string {
	switch {
	case m.Type&mapping.MapDelete != 0:
		return "delete"
	case m.Type&(mapping.MapTo|mapping.MapFrom) == mapping.MapTo|mapping.MapFrom:
		return "tofrom"
	case m.Type&mapping.MapTo != 0:
		return "to"
	case m.Type&mapping.MapFrom != 0:
		return "from"
	case m.Exit:
		return "release"
	default:
		return "alloc"
	}
}

// Clause renders the clause as OpenMP writes it: "map(always, present, to)".
func (m MapItem) Clause() string {
	mods := m.modifiers()
	mods = append(mods, m.Kind())
	s := "map(" + strings.Join(mods, ", ") + ")"
	if m.Type&mapping.MapImplicit != 0 {
		s += " (implicit)"
	}
	return s
}

// ClauseOn renders the clause as OpenMP writes it on construct op: target
// update's to and from are motion clauses that name their buffer,
// "to(present: y)"; everything else is a map clause (Clause).
func (m MapItem) ClauseOn(op string) string {
	kind := m.Kind()
	if op != OpUpdate || (kind != "to" && kind != "from") {
		return m.Clause()
	}
	name := m.Buf.Name
	if name == "" {
		name = unnamed
	}
	if mods := m.modifiers(); len(mods) > 0 {
		return kind + "(" + strings.Join(mods, ", ") + ": " + name + ")"
	}
	return kind + "(" + name + ")"
}

func (m MapItem) modifiers() []string {
	var mods []string
	if m.Type&mapping.MapAlways != 0 {
		mods = append(mods, "always")
	}
	if m.Type&mapping.MapPresent != 0 {
		mods = append(mods, "present")
	}
	if m.Type&mapping.MapHold != 0 {
		mods = append(mods, "ompx_hold")
	}
	return mods
}

// Construct names, as OpenMP spells them.
const (
	OpEnterData = "target enter data"
	OpExitData  = "target exit data"
	OpData      = "target data"
	OpUpdate    = "target update"
)

// CheckMaps checks that each clause is allowed on the construct op.
func (d *Device) CheckMaps(op string, maps []MapItem) error {
	for _, m := range maps {
		if m.Unmappable != "" {
			return d.mapErr(op, m, ErrBadMap, "%s", m.Unmappable)
		}
		kind := m.Kind()
		var ok bool
		switch op {
		case OpEnterData:
			ok = (kind == "to" || kind == "alloc") && !m.Exit
		case OpExitData:
			ok = kind == "from" || kind == "release" || kind == "delete"
		case OpUpdate:
			ok = kind == "to" || kind == "from"
		default: // target, target data
			ok = (kind == "to" || kind == "from" || kind == "tofrom" || kind == "alloc") && !m.Exit
		}
		if !ok && op == OpUpdate {
			return d.mapErr(op, m, ErrBadMap, "target update takes the motion clauses to and from, not map type %q", kind)
		}
		if !ok {
			return d.mapErr(op, m, ErrBadMap, "map type %q is not allowed on %s", kind, op)
		}
		if m.Type&mapping.MapHold != 0 && (op == OpEnterData || op == OpExitData || op == OpUpdate) {
			return d.mapErr(op, m, ErrBadMap, "the hold modifier belongs to structured constructs (target, target data), not %s", op)
		}
		if m.Type&mapping.MapAlways != 0 && op == OpUpdate {
			return d.mapErr(op, m, ErrBadMap, "always has no meaning on %s, which always copies", op)
		}
	}
	return nil
}

// EnterDataOp maps buffers: target enter data.
func EnterDataOp(maps []MapItem) Op {
	return Op{Name: OpEnterData, Maps: maps, Enqueue: func(d *Device, w *work) {
		for _, m := range maps {
			e, _, err := w.enter(m)
			if err != nil {
				w.err(err)
				continue
			}
			if e != nil { // all or nothing: a failed enter data maps nothing
				hold := m.Type&mapping.MapHold != 0
				w.undo = append(w.undo, func() { d.table.Unref(e, hold) })
			}
		}
	}}
}

// ExitDataOp unmaps buffers: target exit data.
func ExitDataOp(maps []MapItem) Op {
	return Op{Name: OpExitData, Maps: maps, Enqueue: func(d *Device, w *work) {
		for _, m := range maps {
			if err := w.exit(m); err != nil {
				w.err(err)
			}
		}
	}}
}

// UpdateOp copies present buffers: target update.
func UpdateOp(maps []MapItem) Op {
	return Op{Name: OpUpdate, Maps: maps, Enqueue: func(d *Device, w *work) {
		for _, m := range maps {
			if err := w.update(m); err != nil {
				w.err(err)
			}
		}
	}}
}

func (d *Device) mapErr(op string, m MapItem, err error, detail string, args ...any) error {
	clause := m.ClauseOn(op)
	if !strings.HasPrefix(op, "target") {
		clause = "" // a memory routine (omp_target_associate_ptr, …): no clause
	}
	return &MapError{Device: d.Label(), Op: op, Clause: clause, Name: m.Buf.Name,
		Addr: m.Buf.Addr(), Size: m.Buf.Size, Detail: fmt.Sprintf(detail, args...), Err: err}
}

// conflictErr is the error for m's range, which partly overlaps mapping c:
// a mapped section must lie inside one mapping. What that means depends on
// the construct, and the cause says it (it wraps ErrExtension whatever it
// says).
func (d *Device) conflictErr(op string, m MapItem, c *mapping.Entry) error {
	const format = "host range [%#x, %#x) is partly mapped: the device allocation maps host [%#x, %#x) (Size=%d, %s); %s"
	var advice string
	var cause error = ErrExtension // an explicit map: "explicit extension not allowed", as libomptarget says
	switch {
	case op == OpUpdate:
		advice = "target update copies a section only when one mapping holds all of it"
		cause = &reason{"update of a range that is only partly mapped", ErrExtension}
	case op == OpExitData:
		advice = "target exit data unmaps a section only when one mapping holds all of it"
		cause = &reason{"exit data of a range that is only partly mapped", ErrExtension}
	case op == opAssociate:
		advice = "an associated range must not overlap a mapping"
		cause = &reason{"association of a range that is partly mapped", ErrExtension}
	case m.Type&mapping.MapImplicit != 0:
		advice = "a slice passed bare is mapped implicitly and must lie inside one mapping (pass a section of the mapped buffer)"
		cause = &reason{"implicit map of a range that partly overlaps a mapping", ErrExtension}
	default:
		advice = "a mapped section must lie inside one mapping"
	}
	return d.mapErr(op, m, cause, format,
		m.Buf.Addr(), m.Buf.Addr()+uintptr(m.Buf.Size), c.HstBegin, c.HstEnd, c.Size(), mappingName(c.Name), advice)
}

// nameOf is a buffer's name in the info output: libomptarget's "unknown"
// for a buffer without one.
func nameOf(n string) string {
	if n == "" {
		return "unknown"
	}
	return n
}

// named returns m with the name of e, the mapping that holds its section,
// if m's clause has none: info output and errors name a section of a named
// mapping by the mapping's name.
func named(m MapItem, e *mapping.Entry) MapItem {
	if m.Buf.Name == "" {
		m.Buf.Name = e.Name
	}
	return m
}
