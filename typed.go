package offload

import (
	"fmt"
	"reflect"

	"github.com/goffload/offload/internal/core"
	"github.com/goffload/offload/internal/plugin"
)

//go:generate go run ./internal/gen/typed

// In is a kernel parameter that is a buffer the kernel only reads: a slice
// passed to it is mapped to the device (map(to:)) unless a clause given
// with the kernel's With says otherwise, or it is present already. It is a
// slice: index it, range over it and take len as usual. A []T converts to
// In[T] implicitly, so a launch passes plain slices.
type In[T any] []T

// Out is a kernel parameter that is a buffer the kernel only writes: a
// slice passed to it is mapped from the device (map(from:)); its device
// memory starts uninitialized when the mapping is created.
type Out[T any] []T

// InOut is a kernel parameter that is a buffer the kernel reads and writes:
// a slice passed to it is mapped tofrom (map(tofrom:)). A plain []T
// parameter is mapped the same way, but as an implicit map (see
// Device.Run): InOut says it outright.
type InOut[T any] []T

// Scratch is a kernel parameter that is device work space: a slice passed
// to it is mapped without copies either way (map(alloc:)).
type Scratch[T any] []T

// mapDir is implemented by the direction types; it gives the map type of
// the parameter.
type mapDir interface{ mapDir() (core.MapType, string) }

func (In[T]) mapDir() (core.MapType, string)      { return core.MapTo, "to" }
func (Out[T]) mapDir() (core.MapType, string)     { return core.MapFrom, "from" }
func (InOut[T]) mapDir() (core.MapType, string)   { return core.MapTo | core.MapFrom, "tofrom" }
func (Scratch[T]) mapDir() (core.MapType, string) { return 0, "alloc" }

var mapDirType = reflect.TypeFor[mapDir]()

// paramDir is the declared map direction of a parameter of type t: ok is
// false for a plain slice (implicit tofrom) and for scalars.
func paramDir(t reflect.Type) (mt core.MapType, clause string, ok bool) {
	if t.Kind() != reflect.Slice || !t.Implements(mapDirType) {
		return 0, "", false
	}
	mt, clause = reflect.Zero(t).Interface().(mapDir).mapDir()
	return mt, clause, true
}

// launch runs k on d with args checked by the compiler and the clauses of
// with overriding the declared directions.
func (k *Kernel) launch(d Device, with []Map, args ...any) error {
	if k == nil || k.k == nil {
		return Device.Run(d, nil)
	}
	if err := k.override(with, args); err != nil {
		return d.kernelError(k, err)
	}
	return d.Run(k, args...)
}

// launchNowait is launch as a task.
func (k *Kernel) launchNowait(a Async, with []Map, args ...any) *Task {
	if k == nil || k.k == nil {
		return a.Run(nil)
	}
	if err := k.override(with, args); err != nil {
		return a.start(func(*core.Runtime, []core.Dep) (*core.Task, error) { return nil, a.dev.kernelError(k, err) })
	}
	return a.Run(k, args...)
}

// override replaces, in args, each slice argument that a clause of with
// names (the same host memory: first element and length) with that clause.
// A clause that names no argument is an error: it would silently not
// apply.
func (k *Kernel) override(with []Map, args []any) error {
	for i, m := range with {
		if m.err != nil {
			return m.err
		}
		if !m.slice.IsValid() {
			return fmt.Errorf("%w: With clause %d is empty: build clauses with To, From, ToFrom, Alloc", ErrBadMap, i)
		}
		if m.item.Exit || m.item.Type&core.MapDelete != 0 {
			return fmt.Errorf("%w: With clause %d is map(%s), an exit clause: a kernel's clauses are to, from, tofrom or alloc", ErrBadMap, i, m.item.Kind())
		}
		found := false
		for j, a := range args {
			if k.k.Params[j].Kind != plugin.Slice {
				continue
			}
			v := reflect.ValueOf(a)
			if v.Kind() != reflect.Slice || v.Len() != m.slice.Len() || v.Type().Elem() != m.slice.Type().Elem() {
				continue
			}
			if v.Len() > 0 && v.UnsafePointer() != m.slice.UnsafePointer() {
				continue
			}
			if v.Len() == 0 && (v.Cap() == 0 || m.slice.Cap() == 0 || v.UnsafePointer() != m.slice.UnsafePointer()) {
				continue
			}
			args[j] = m
			found = true
		}
		if !found {
			return fmt.Errorf("%w: With clause %d, map(%s) of %s (%d elements at %#x), names no slice argument of the launch: a clause applies to the argument with the same first element and length",
				ErrBadMap, i, m.item.Kind(), nameOr(m.item.Buf.Name), m.slice.Len(), m.item.Buf.Addr())
		}
	}
	return nil
}

func nameOr(name string) string {
	if name == "" {
		return "an unnamed buffer"
	}
	return fmt.Sprintf("%q", name)
}

// kernelError is the error of a launch refused before it reached the
// device.
func (d Device) kernelError(k *Kernel, err error) error {
	label := d.String()
	if cd, _, rerr := d.resolve(); rerr == nil {
		label = cd.Label()
	}
	return fmt.Errorf("goffload: %s: target %s: %w", label, k, err)
}
