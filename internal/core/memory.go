package core

import (
	"context"
	"errors"
	"fmt"
	"unsafe"

	"github.com/goffload/offload/internal/config"
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
			d.log.Taskf(config.InfoCopies, d.Num, w.task, "Copying data from host to device, HstPtr=%#x, TgtPtr=%#x, Size=%d, Name=%s",
				hostAddr(src.Host), uint64(dst.Ptr), n, name)
			if err := w.q.Submit(dst.Ptr, src.Host[:n]); err != nil {
				w.err(Errorf("goffload: %s: %s: %w", d.Label(), name, err))
			}
		}}
	case !dst.onDevice() && src.onDevice():
		return src.Dev, Op{Name: name, Enqueue: func(d *Device, w *work) {
			w.data(tool.CopyFromDevice, mapping.Buf{Size: n, Name: name}, src.Ptr)
			d.log.Taskf(config.InfoCopies, d.Num, w.task, "Copying data from device to host, TgtPtr=%#x, HstPtr=%#x, Size=%d, Name=%s",
				uint64(src.Ptr), hostAddr(dst.Host), n, name)
			if err := w.q.Retrieve(dst.Host[:n], src.Ptr); err != nil {
				w.err(Errorf("goffload: %s: %s: %w", d.Label(), name, err))
			}
		}}
	}
	return src.Dev, Op{Name: name, Enqueue: func(d *Device, w *work) {
		w.data(tool.CopyDeviceToDevice, mapping.Buf{Size: n, Name: name}, src.Ptr)
		err := exchange(w.q, dst.Dev.Dev, dst.Ptr, src.Ptr, n)
		how := ""
		if errors.Is(err, plugin.ErrUnsupported) {
			how = " (staged through host memory)"
		}
		d.log.Taskf(config.InfoCopies, d.Num, w.task, "Copying data from device %d to device %d%s, SrcPtr=%#x, DstPtr=%#x, Size=%d, Name=%s",
			d.Num, dst.Dev.Num, how, uint64(src.Ptr), uint64(dst.Ptr), n, name)
		if errors.Is(err, plugin.ErrUnsupported) {
			// No direct path: stage through host memory. The copy out is on
			// this queue; the copy in follows once it is done, off the
			// caller's goroutine (a task with work after its queue's is
			// waited for on the host by its dependents).
			stage := make([]byte, n)
			if err = w.q.Retrieve(stage, src.Ptr); err == nil {
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
	}}
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
