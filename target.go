package offload

import (
	"context"
	"fmt"
	"math"
	"reflect"

	"github.com/goffload/offload/internal/core"
	"github.com/goffload/offload/plugin"
)

// WithContext returns d bound to ctx. Its synchronous constructs (Run,
// Data, EnterData, ExitData, Update) stop waiting when ctx is done.
// They return an error that wraps ctx's error (context.Canceled or
// context.DeadlineExceeded) and names the device and the construct.
//
// The construct itself goes on in the background and cleans up as it
// would have. Its kernel is asked to stop: its Ctx's Done closes. A kernel
// that checks Done returns early; one that ignores it goes on. Copies back
// are done, mappings are released and memory freed. Taskwait and Stop wait
// for the construct.
//
// A construct whose ctx is done before it starts does not start. The end
// of a Data region always runs. Tasks (Nowait) do not use ctx: use
// Task.WaitContext (a Memcpy that can be given up on is a task too:
// offload.Nowait().Memcpy(dst, src, n).WaitContext(ctx)).
//
// A nil ctx is a mistake, not "no context": every construct of the device
// returns an error wrapping ErrBadArgument. So does every call that takes a
// context, for a nil one: Task.WaitContext, Group.Wait, Taskwait,
// StopContext.
func (d Device) WithContext(ctx context.Context) Device { d.ctx, d.ctxSet = ctx, true; return d }

// ctxErr is the error of a construct on a device bound to a nil context.
func (d Device) ctxErr(construct string) error {
	if d.ctxSet && d.ctx == nil {
		return nilCtx(d.String() + ": " + construct + " of Device.WithContext(nil)")
	}
	return nil
}

// Context is the context d is bound to (nil if none); see WithContext.
func (d Device) Context() context.Context { return d.ctx }

// Run runs kernel k on the device with args: the target construct.
// There is one argument per parameter after the optional Ctx.
// A scalar parameter takes a value of its type; an untyped constant's value
// converts when it fits. A slice parameter takes one of:
//   - a slice, mapped tofrom for the region unless it is present already;
//   - a map clause (To(x), From(y), ToFrom(z), Alloc(w) with modifiers);
//   - a DevicePtr of this device (is_device_ptr).
//
// Run returns when the kernel is done and the results are copied back.
func (d Device) Run(k *Kernel, args ...any) error { return d.launch(k, launchOpts{}, args) }

// launch is the target construct of k with args and what a typed kernel
// adds to its launches (o).
func (d Device) launch(k *Kernel, o launchOpts, args []any) error {
	if err := d.ctxErr("target"); err != nil {
		return err
	}
	if d.IsAny() {
		return Async{dev: d}.runAny(k, o, args).Wait()
	}
	cd, fallback, err := d.resolve()
	if err != nil {
		return err
	}
	if k == nil || k.k == nil {
		return core.Errorf("goffload: %s: target: %w: nil kernel", cd.Label(), ErrBadArgument)
	}
	geo, err := d.geometry()
	if err != nil {
		return core.Errorf("goffload: %s: target %s: %w", cd.Label(), k.k.Name(), err)
	}
	kargs, err := handArgs(cd, k, d.dm, o, args)
	if err != nil {
		return err
	}
	return cd.Run(d.ctx, core.TargetOpWith(k.k, kargs, geo), fallback)
}

// Run runs kernel k on the default device; see Device.Run.
func Run(k *Kernel, args ...any) error { return Default().Run(k, args...) }

// Data maps the clauses' buffers on the device, runs body, and unmaps them
// when body returns: a structured target data region. Constructs inside body
// find the buffers present. The region ends whatever body returns; body's
// error is returned first.
func (d Device) Data(body func() error, maps ...Map) error {
	return d.data(body, maps)
}

func (d Device) data(body func() error, maps []Map) error {
	if err := d.ctxErr("target data"); err != nil {
		return err
	}
	cd, _, err := d.resolve()
	if err != nil {
		return err
	}
	maps, uses := splitUses(maps)
	its, err := items(maps)
	if err != nil {
		return err
	}
	if len(uses) > 0 {
		inner := body
		body = func() error { return withDevicePtrs(d, cd, uses, inner) }
	}
	return cd.Data(d.ctx, its, body)
}

// Data runs a target data region on the default device; see Device.Data.
func Data(body func() error, maps ...Map) error { return Default().Data(body, maps...) }

// EnterData maps buffers (To or Alloc clauses): target enter data.
// On Any() it maps nothing. It names whole buffers as Any-tasks', and the
// runtime copies what the tasks need when they are placed. A program that
// fills a buffer band by band with Any-tasks, then reads rows across the
// bands, names the buffer first (see Any).
func (d Device) EnterData(maps ...Map) error {
	return d.enterData(maps)
}

func (d Device) enterData(maps []Map) error {
	if err := d.ctxErr("target enter data"); err != nil {
		return err
	}
	if d.IsAny() {
		return anyEnterData(maps)
	}
	cd, _, err := d.resolve()
	if err != nil {
		return err
	}
	its, err := items(maps)
	if err != nil {
		return err
	}
	return cd.EnterData(d.ctx, its)
}

// EnterData maps buffers on the default device; see Device.EnterData.
func EnterData(maps ...Map) error { return Default().EnterData(maps...) }

// ExitData unmaps buffers (From, Release or Delete clauses): target exit
// data. Unmapping a buffer that is not mapped does nothing unless the clause
// has the Present modifier.
func (d Device) ExitData(maps ...Map) error {
	return d.exitData(maps)
}

func (d Device) exitData(maps []Map) error {
	if err := d.ctxErr("target exit data"); err != nil {
		return err
	}
	cd, _, err := d.resolve()
	if err != nil {
		return err
	}
	its, err := items(maps)
	if err != nil {
		return err
	}
	return cd.ExitData(d.ctx, its)
}

// ExitData unmaps buffers on the default device; see Device.ExitData.
func ExitData(maps ...Map) error { return Default().ExitData(maps...) }

// Update copies mapped buffers: To(x) copies x to the device, From(x) copies
// it back (target update to/from). A buffer that is not mapped is skipped
// unless the clause has the Present modifier.
func (d Device) Update(maps ...Map) error {
	return d.update(maps)
}

func (d Device) update(maps []Map) error {
	if err := d.ctxErr("target update"); err != nil {
		return err
	}
	if d.IsAny() {
		return anyUpdate(maps)
	}
	cd, _, err := d.resolve()
	if err != nil {
		return err
	}
	its, err := items(maps)
	if err != nil {
		return err
	}
	for i := range its {
		its[i].Exit = false
	}
	return cd.Update(d.ctx, its)
}

// Update copies mapped buffers on the default device; see Device.Update.
func Update(maps ...Map) error { return Default().Update(maps...) }

// kernelArgs checks args against k's parameters and converts them into one
// argument per flattened parameter (a struct holding slices gives one per
// field). dm is the device's defaultmap for bare slices of parameters with
// no declared direction.
func kernelArgs(cd *core.Device, kk *Kernel, dm defaultmap, o launchOpts, args []any) ([]core.KernelArg, error) {
	with := o.with
	k := kk.k
	used, err := checkWith(with)
	if err != nil {
		return nil, core.Errorf("goffload: %s: target %s%s: %w", cd.Label(), k.Name(), k.Describe(), err)
	}
	lf := leafer{cd: cd, kk: kk, dm: dm, with: with, used: used}
	if len(args) != len(k.Tops()) {
		return nil, core.Errorf("goffload: %s: target %s%s: %w: got %d arguments, want %d",
			cd.Label(), k.Name(), k.Describe(), ErrBadArgument, len(args), len(k.Tops()))
	}
	out := o.kargs[:0]
	if n := len(k.Params()); n <= cap(out) {
		out = out[:n]
	} else {
		out = make([]core.KernelArg, n)
	}
	li := 0 // the flattened parameter
	for i, a := range args {
		if o.refs&(1<<i) != 0 { // a typed kernel's Nowait: a points to the slice
			rv := reflect.ValueOf(a).Elem()
			if p := k.Params()[li]; p.Field < 0 && p.Kind == plugin.Slice {
				ka, err := lf.sliceRef(li, rv, kk.leafName(li, o.names))
				if err != nil {
					return nil, err
				}
				out[li] = ka
				li++
				continue
			}
			a = rv.Interface()
		}
		if p := k.Params()[li]; p.Field < 0 {
			ka, err := lf.arg(li, a, kk.leafName(li, o.names))
			if err != nil {
				return nil, err
			}
			out[li] = ka
			li++
			continue
		}
		// A struct holding slices: its fields are the arguments, its
		// slices mapped and attached in the device's copy.
		top := k.Tops()[i]
		v := reflect.ValueOf(a)
		if !v.IsValid() || v.Type() != top {
			return nil, lf.bad(li, "got %T, want a %s (a struct holding slices: its slices are mapped and attached on the device)", a, top)
		}
		for ; li < len(k.Params()) && k.Params()[li].Top == i; li++ {
			f := top.Field(k.Params()[li].Field)
			ka, err := lf.arg(li, v.FieldByIndex(f.Index).Interface(), kk.leafName(li, o.names))
			if err != nil {
				return nil, err
			}
			out[li] = ka
		}
	}
	for i, u := range used {
		if !u {
			m := with[i]
			return nil, core.Errorf("goffload: %s: target %s%s: %w: With clause %d, map(%s) of %s (%d elements at %#x), names no slice argument of the launch: a clause applies to the slice argument (or slice field) with the same first element and length",
				cd.Label(), k.Name(), k.Describe(), ErrBadMap, i, m.item.Kind(), core.QuoteName(m.item.Buf.Name), m.slice.Len(), m.item.Buf.Addr())
		}
	}
	return out, nil
}

// leafName is the name of flattened parameter li's buffer: its
// parameter's name from Named (with ".Field" for a struct's field), or the
// default "kernel.argI".
func (kk *Kernel) leafName(li int, names []string) string {
	p := kk.k.Params()[li]
	if p.Top >= len(names) || names[p.Top] == "" {
		return kk.names[li]
	}
	if p.Field >= 0 {
		return names[p.Top] + "." + kk.k.Tops()[p.Top].Field(p.Field).Name
	}
	return names[p.Top]
}

// bad is the error of flattened parameter li's argument; format may wrap
// with %w.
func (lf *leafer) bad(li int, format string, v ...any) error {
	k := lf.kk.k
	p := k.Params()[li]
	if p.Field >= 0 {
		format = "field " + k.Tops()[p.Top].Field(p.Field).Name + ": " + format
	}
	return core.Errorf("goffload: %s: target %s%s: argument %d: %w: "+format,
		append([]any{lf.cd.Label(), k.Name(), k.Describe(), p.Top, ErrBadArgument}, v...)...)
}

// leafer converts the arguments of one launch.
type leafer struct {
	cd   *core.Device
	kk   *Kernel
	dm   defaultmap
	with []Map  // clauses that replace bare slices (Kernel1.With …)
	used []bool // which of with matched an argument
}

// leafArg converts argument a of flattened parameter li, named defName if
// it is a bare slice.
func (lf *leafer) arg(li int, a any, defName string) (core.KernelArg, error) {
	bad := func(format string, v ...any) error { return lf.bad(li, format, v...) }
	cd, kk := lf.cd, lf.kk
	p := kk.k.Params()[li]
	if p.Kind == plugin.Slice && len(lf.with) > 0 {
		if j := lf.match(a); j >= 0 {
			lf.used[j] = true
			a = lf.with[j]
		}
	}
	if p.Kind == plugin.Scalar {
		v, err := scalarArg(a, p.Type)
		if err != nil {
			return core.KernelArg{}, bad("%v", err)
		}
		name := ""
		if defName != kk.names[li] { // named (Named): the info output shows it
			name = defName
		}
		ka := core.KernelArg{Scalar: v}
		ka.Map.Buf.Name = name
		return ka, nil
	}
	switch a := a.(type) {
	case Map:
		if err := a.unmappable(cd, defName); err != nil {
			return core.KernelArg{}, err
		}
		if a.err != nil {
			return core.KernelArg{}, bad("%v", a.err)
		}
		if !a.slice.IsValid() {
			return core.KernelArg{}, bad("an empty map clause")
		}
		if a.slice.Type().Elem() != p.Type {
			return core.KernelArg{}, bad("map clause of a %s, want []%s", a.slice.Type(), p.Type)
		}
		m := a.item
		if m.Buf.Name == "" {
			m.Buf.Name = defName
		}
		if err := cd.CheckMaps("target", []core.MapItem{m}); err != nil {
			return core.KernelArg{}, err
		}
		return core.KernelArg{Slice: a.slice, Map: m, Len: a.slice.Len()}, nil
	case DevicePtr:
		if err := a.check(); err != nil {
			return core.KernelArg{}, bad("%v", err)
		}
		if a.dev != cd.Num && !(cd.IsInitial() && a.onInitial()) {
			return core.KernelArg{}, bad("device pointer of device %d passed to a kernel on %s", a.dev, cd.Label())
		}
		n := int(a.size / int64(max(p.Type.Size(), 1)))
		ka := core.KernelArg{DevPtr: true, Ptr: a.ptr, Len: n}
		if cd.IsInitial() {
			ka.Slice = reflect.MakeSlice(reflect.SliceOf(p.Type), 0, 0) // SliceOf only here: it costs a cache lookup
			if n > 0 {
				ka.Slice = reflect.SliceAt(p.Type, a.keep, n)
			}
		}
		return ka, nil
	default:
		v := reflect.ValueOf(a)
		if !v.IsValid() || v.Kind() != reflect.Slice || v.Type().Elem() != p.Type {
			return core.KernelArg{}, bad("got %T, want []%s, a map clause of one, or a DevicePtr", a, p.Type)
		}
		return lf.slice(li, v, defName)
	}
}

// sliceRef is arg of the slice in v for slice parameter li, which a typed
// kernel's Nowait passed by reference (launchOpts.refs): a clause of With
// that names it, or the slice with its declared or default map.
func (lf *leafer) sliceRef(li int, v reflect.Value, defName string) (core.KernelArg, error) {
	if len(lf.with) > 0 {
		if j := lf.matchValue(v); j >= 0 {
			lf.used[j] = true
			return lf.arg(li, lf.with[j], defName)
		}
	}
	if p := lf.kk.k.Params()[li]; v.Type().Elem() != p.Type {
		return core.KernelArg{}, lf.bad(li, "got %s, want []%s", v.Type(), p.Type)
	}
	return lf.slice(li, v, defName)
}

// slice is arg of slice v for slice parameter li, with its declared map
// direction or the defaultmap's.
func (lf *leafer) slice(li int, v reflect.Value, defName string) (core.KernelArg, error) {
	buf := bufOf(v)
	buf.Name = defName
	typ := lf.kk.dirs[li].typ
	if !lf.kk.dirs[li].declared {
		var err error
		if typ, err = lf.dm.mapType(); err != nil {
			return core.KernelArg{}, lf.bad(li, "%w (%d elements at %#x)", err, v.Len(), buf.Addr())
		}
	}
	return core.KernelArg{Slice: v, Len: v.Len(), Map: core.MapItem{Buf: buf, Type: typ}}, nil
}

// scalarArg converts a to type t: the same type, or a number that t holds
// exactly (so offload.Run(k, 2.0) works for a float32 parameter, and 300
// for a uint8 one is refused).
func scalarArg(a any, t reflect.Type) (any, error) {
	v := reflect.ValueOf(a)
	if !v.IsValid() {
		return nil, fmt.Errorf("got nil, want %s", t)
	}
	if v.Type() == t {
		return a, nil
	}
	if _, isMap := a.(Map); isMap {
		return nil, fmt.Errorf("a map clause for a scalar parameter of type %s (scalars are passed by value)", t)
	}
	if v.Type().AssignableTo(t) {
		return v.Convert(t).Interface(), nil
	}
	if !isNumber(v.Kind()) || !isNumber(t.Kind()) || !v.Type().ConvertibleTo(t) {
		return nil, fmt.Errorf("got %s, want %s", v.Type(), t)
	}
	c := v.Convert(t)
	if !sameNumber(v, c) {
		return nil, fmt.Errorf("%v does not fit in %s", a, t)
	}
	return c.Interface(), nil
}

func isNumber(k reflect.Kind) bool {
	return k >= reflect.Int && k <= reflect.Complex128
}

// sameNumber reports whether c, converted from v, holds v's value (within
// float rounding for float targets).
func sameNumber(v, c reflect.Value) bool {
	switch {
	case c.CanInt():
		if v.CanFloat() && (v.Float() != math.Trunc(v.Float()) || math.Abs(v.Float()) > 1<<63) {
			return false
		}
		back := c.Convert(v.Type())
		if v.CanInt() || v.CanUint() {
			return back.Equal(v) && (v.CanUint() || (v.Int() < 0) == (c.Int() < 0))
		}
		return back.Equal(v)
	case c.CanUint():
		if v.CanInt() && v.Int() < 0 {
			return false
		}
		if v.CanFloat() && (v.Float() < 0 || v.Float() != math.Trunc(v.Float()) || v.Float() >= 1<<64) {
			return false
		}
		return c.Convert(v.Type()).Equal(v)
	case c.CanFloat():
		if v.CanFloat() {
			return math.IsInf(c.Float(), 0) == math.IsInf(v.Float(), 0)
		}
		return true
	case c.CanComplex():
		return true
	}
	return false
}
