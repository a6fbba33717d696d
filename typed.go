package offload

import (
	"fmt"
	"reflect"
	"unsafe"

	"github.com/goffload/offload/internal/core"
	"github.com/goffload/offload/internal/mapping"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
)

//go:generate go run ./internal/gen/typed

// In is a kernel parameter that is a buffer the kernel only reads.
// A slice passed to it is mapped to the device (map(to:)), unless it is
// present already or a clause given with the kernel's With says otherwise.
// It is a slice: index it, range over it and take len as usual.
// A []T converts to In[T] implicitly, so a launch passes plain slices.
type In[T any] []T

// Out is a kernel parameter that is a buffer the kernel only writes.
// A slice passed to it is mapped from the device (map(from:)).
// Its device memory starts uninitialized when the mapping is created.
type Out[T any] []T

// InOut is a kernel parameter that is a buffer the kernel reads and writes.
// A slice passed to it is mapped tofrom (map(tofrom:)).
// A plain []T parameter is mapped the same way, but as an implicit map
// (see Device.Run). InOut says it outright.
type InOut[T any] []T

// Scratch is a kernel parameter that is device work space.
// A slice passed to it is mapped without copies either way (map(alloc:)).
type Scratch[T any] []T

// mapDir is implemented by the direction types; it gives the map type of
// the parameter.
type mapDir interface {
	mapDir() (mapping.MapType, string)
}

func (In[T]) mapDir() (mapping.MapType, string)      { return mapping.MapTo, "to" }
func (Out[T]) mapDir() (mapping.MapType, string)     { return mapping.MapFrom, "from" }
func (InOut[T]) mapDir() (mapping.MapType, string)   { return mapping.MapTo | mapping.MapFrom, "tofrom" }
func (Scratch[T]) mapDir() (mapping.MapType, string) { return 0, "alloc" }

var mapDirType = reflect.TypeFor[mapDir]()

// paramDir is the declared map direction of a parameter of type t: ok is
// false for a plain slice (implicit tofrom) and for scalars.
func paramDir(t reflect.Type) (mt mapping.MapType, clause string, ok bool) {
	if t.Kind() != reflect.Slice || !t.Implements(mapDirType) {
		return 0, "", false
	}
	mt, clause = reflect.Zero(t).Interface().(mapDir).mapDir()
	return mt, clause, true
}

// launch runs k on dev with args checked by the compiler and the clauses
// of with replacing the declared directions.
func (k *Kernel) launch(dev Device, o launchOpts, args ...any) error {
	return dev.launch(k, o, args)
}

// launchNowait is launch as a task.
func (k *Kernel) launchNowait(nw Async, o launchOpts, args ...any) *Task {
	return nw.run(k, o, args)
}

// launchOpts are what a typed kernel adds to its launches.
type launchOpts struct {
	with  []Map    // clauses that replace the declared maps (With)
	names []string // the parameters' names (Named)
	// kargs, if its capacity is enough, is where the lowered arguments
	// go (kernelArgs): a task's own room (launchTask).
	kargs []core.KernelArg
	// refs has bit i set where argument i is a pointer to the launch's
	// slice argument, kept in the task's records by a typed kernel's
	// Nowait, so that the slice is not boxed in an interface (a heap
	// allocation) on its way in (argRef).
	refs uint16
}

// argRef is how a typed kernel's Nowait passes argument i, at p in the
// task's records: a slice by reference (refs gets bit i), anything else
// by value.
func argRef[T any](p *T, i int, refs uint16) (any, uint16) {
	if reflect.TypeFor[T]().Kind() == reflect.Slice {
		return p, refs | 1<<i
	}
	return *p, refs
}

// argOf decodes argument a of parameter i of k, of type A, for a typed
// kernel's direct call: a scalar of type A, or a slice (A is a slice type)
// over device memory, as entries.Kernel.ArgValues makes it.
func argOf[A any](k *entries.Kernel, i int, a plugin.Arg, mem plugin.Mem) (A, error) {
	var v A
	if k.Params()[i].Kind == plugin.Scalar {
		s, ok := a.Scalar.(A)
		if !ok {
			return v, plugin.CheckArg(k, i, a)
		}
		return s, nil
	}
	p, err := k.SliceArg(i, a, mem)
	if err != nil {
		return v, err
	}
	if p != nil {
		// A is a slice type (Directable): set its header. The data field
		// is an unsafe.Pointer, so the store has its write barrier.
		h := (*sliceHeader)(unsafe.Pointer(&v))
		h.data, h.len, h.cap = p, a.Len, a.Len
	}
	return v, nil
}

// sliceHeader is the layout of a slice.
type sliceHeader struct {
	data     unsafe.Pointer
	len, cap int
}

// checkWith checks the clauses of a kernel's With: they replace slice
// arguments, so they are to, from, tofrom or alloc clauses.
func checkWith(with []Map) ([]bool, error) {
	for i, m := range with {
		if m.err != nil {
			return nil, m.err
		}
		if !m.slice.IsValid() {
			return nil, fmt.Errorf("%w: With clause %d is empty: build clauses with To, From, ToFrom, Alloc", ErrBadMap, i)
		}
		if m.item.Exit || m.item.Type&mapping.MapDelete != 0 {
			return nil, fmt.Errorf("%w: With clause %d is map(%s), an exit clause: a kernel's clauses are to, from, tofrom or alloc", ErrBadMap, i, m.item.Kind())
		}
	}
	if len(with) == 0 {
		return nil, nil
	}
	return make([]bool, len(with)), nil
}

// match returns the clause of lf.with that names slice a (the same first
// element and length, and element type), or -1.
func (lf *leafer) match(a any) int { return lf.matchValue(reflect.ValueOf(a)) }

// matchValue is match of the slice in v.
func (lf *leafer) matchValue(v reflect.Value) int {
	if v.Kind() != reflect.Slice {
		return -1
	}
	for j, m := range lf.with {
		if v.Len() != m.slice.Len() || v.Type().Elem() != m.slice.Type().Elem() || v.UnsafePointer() != m.slice.UnsafePointer() {
			continue
		}
		if v.Len() == 0 && v.UnsafePointer() == nil {
			continue
		}
		return j
	}
	return -1
}
