package core

// The target construct lowered onto a device: its maps, launch and unmaps
// on a queue (target), or its kernel called on the initial device
// (runInitial).

import (
	"fmt"
	"reflect"

	"github.com/goffload/offload/internal/config"
	"github.com/goffload/offload/internal/mapping"
	"github.com/goffload/offload/tool"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
)

// target enqueues a target region on w: maps, launch, unmaps.
func (d *Device) target(w *work, k *entries.Kernel, args []KernelArg, g plugin.Geometry) {
	var pargs []plugin.Arg
	if len(args) <= len(w.argBuf) {
		pargs = w.argBuf[:len(args)]
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
		d.bindLinks(w) // declare target link variables (declare.go)
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
		if err := launch(w.q, k, pargs, g, w.stop); err != nil {
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
			name := a.Name
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
