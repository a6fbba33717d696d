package offload

import (
	"fmt"
	"reflect"

	"github.com/goffload/offload/internal/mapping"

	"github.com/goffload/offload/internal/core"
)

// Map is a map clause on one buffer, with a map type and modifiers.
// The buffer is a slice of plain data; a sub-slice is an array section.
// Build a Map with To, From, ToFrom, Alloc, Release or Delete, then add
// modifiers:
//
//	offload.To(x).Always().Named("x")
type Map struct {
	item  core.MapItem
	slice reflect.Value
	err   error
	// use is where a UseDevicePtr clause puts the device address;
	// useClause is its OpenMP name.
	use       *DevicePtr
	useClause string
}

func newMap(s any, t mapping.MapType, exit bool, clause string) Map {
	m := Map{item: core.MapItem{Type: t, Exit: exit}}
	v := reflect.ValueOf(s)
	if !v.IsValid() || v.Kind() != reflect.Slice {
		m.err = core.Errorf("goffload: map(%s) of a %T: %w: want a slice of plain data", clause, s, ErrBadMap)
		return m
	}
	if err := checkPlain(v.Type().Elem()); err != nil {
		m.err = core.Errorf("goffload: map(%s) of a %s: %w: %v", clause, v.Type(), ErrBadMap, err)
		// The construct refuses it with an error that names the device
		// and the buffer (see items and unmappable).
		m.item.Buf = bufOf(v)
		m.item.Unmappable = fmt.Sprintf("the elements of a %s cannot be copied to a device: %v", v.Type(), err)
		return m
	}
	m.slice = v
	m.item.Buf = bufOf(v)
	return m
}

// bufOf returns the memory of slice v.
func bufOf(v reflect.Value) mapping.Buf {
	return mapping.Buf{Ptr: v.UnsafePointer(), Size: int64(v.Len()) * int64(v.Type().Elem().Size())}
}

// To maps s to the device, copying it in when the mapping is created
// (map(to: s)). On target enter data it maps and copies in.
func To(s any) Map { return newMap(s, mapping.MapTo, false, "to") }

// From maps s and copies it back to the host when the last reference is
// released (map(from: s)). On target exit data it copies back and releases.
func From(s any) Map { return newMap(s, mapping.MapFrom, false, "from") }

// ToFrom maps s, copying it in on creation and back on release
// (map(tofrom: s)).
func ToFrom(s any) Map { return newMap(s, mapping.MapTo|mapping.MapFrom, false, "tofrom") }

// Alloc maps s without copying (map(alloc: s)): the device memory starts
// uninitialized.
func Alloc(s any) Map { return newMap(s, 0, false, "alloc") }

// Release drops one reference to s without copying back (map(release: s)),
// for target exit data.
func Release(s any) Map { return newMap(s, 0, true, "release") }

// Delete removes s's mapping whatever its reference count, without copying
// back (map(delete: s)), for target exit data. A mapping held by a region
// (Hold) stays until that region ends.
func Delete(s any) Map { return newMap(s, mapping.MapDelete, false, "delete") }

// Always makes the clause copy whatever the reference count: to copies in on
// every map, from copies back on every unmap.
func (m Map) Always() Map { m.item.Type |= mapping.MapAlways; return m }

// Present demands that the buffer be mapped already; if it is not, the
// construct fails with an error wrapping ErrNotPresent.
func (m Map) Present() Map { m.item.Type |= mapping.MapPresent; return m }

// Hold counts the map in the hold reference count (LLVM's ompx_hold).
// The mapping survives Release and Delete until the region that holds it
// ends. Hold is allowed on target regions and target data regions.
func (m Map) Hold() Map { m.item.Type |= mapping.MapHold; return m }

// Named gives the buffer a name for info output and error messages.
func (m Map) Named(name string) Map { m.item.Buf.Name = name; return m }

// unmappable is the error of a clause on a slice that cannot be mapped (its
// elements are not plain data), for a target construct on cd: it names the
// device and the buffer (name, the argument's default name, if the clause
// has none). It is nil for any other clause.
func (m Map) unmappable(cd *core.Device, name string) error {
	if m.item.Unmappable == "" {
		return nil
	}
	it := m.item
	if it.Buf.Name == "" {
		it.Buf.Name = name
	}
	return cd.CheckMaps("target", []core.MapItem{it})
}

// items checks and converts clauses.
func items(maps []Map) ([]core.MapItem, error) {
	out := make([]core.MapItem, len(maps))
	for i, m := range maps {
		if m.err != nil && m.item.Unmappable == "" {
			return nil, m.err
		}
		if m.item.Unmappable != "" {
			// The construct refuses it, naming its device (CheckMaps).
			out[i] = m.item
			continue
		}
		if !m.slice.IsValid() {
			return nil, core.Errorf("goffload: map clause %d is empty: %w: build clauses with To, From, ToFrom, Alloc, Release or Delete", i, ErrBadMap)
		}
		if err := anyOwns(m.item.Buf); err != nil {
			return nil, err
		}
		out[i] = m.item
	}
	return out, nil
}
