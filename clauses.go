package offload

import (
	"errors"
	"fmt"
	"strings"

	"github.com/goffload/offload/internal/mapping"

	"github.com/goffload/offload/internal/core"
	"github.com/goffload/offload/plugin"
)

// If returns d when cond is true and the initial device otherwise.
// It is OpenMP's if clause on target constructs (if(target: cond)).
// On the initial device a kernel runs on the program's own memory and data
// constructs do nothing, as when the clause is false in OpenMP.
// The context and the other clauses of d carry over.
//
//	offload.On(0).If(n > 10000).Run(k, …) // small problems stay on the host
func (d Device) If(cond bool) Device {
	if cond {
		return d
	}
	d.num = NumDevices() // the initial device, with d's clauses
	return d
}

// defaultmap is how the launches of a device map a bare slice: the
// argument of a parameter that declares no direction (a []T parameter, not
// In, Out, InOut or Scratch). Its zero value is OpenMP's implicit map.
type defaultmap int

const (
	dmDefault defaultmap = iota // tofrom, and a slice mapped already is used as it is
	dmTo
	dmFrom
	dmToFrom
	dmAlloc
	dmPresent // alloc with the present modifier
	dmNone    // refused: a map clause or a declared direction is needed
)

// defaultmapNames are the behaviours as OpenMP writes them, by defaultmap.
var defaultmapNames = [...]string{"default", "to", "from", "tofrom", "alloc", "present", "none"}

// Defaultmap returns d with bare slices mapped as behavior says: OpenMP's
// defaultmap clause for aggregates and pointers. A bare slice is the
// argument of a parameter that declares no direction: a []T parameter, not
// In, Out, InOut or Scratch. Scalars are always passed by value
// (firstprivate). Map clauses and declared directions are not affected.
//
// behavior is written as in OpenMP (in any case):
//   - "default": the implicit map, tofrom; a slice mapped already is used
//     as it is;
//   - "to", "from", "tofrom": a map with that direction;
//   - "alloc": a map without copies;
//   - "present": the slice must be mapped already (alloc with the present
//     modifier); one that is not fails the launch with ErrNotPresent;
//   - "none": bare slices are refused with ErrBadMap: every buffer needs a
//     map clause or a declared direction.
//
// Another value fails every launch on the device with an error wrapping
// ErrBadMap that lists these.
//
//	err := Scale.Run(dev.Defaultmap("to"), 2, x) // x is only read
func (d Device) Defaultmap(behavior string) Device {
	for i, name := range defaultmapNames {
		if strings.EqualFold(behavior, name) {
			d.dm = defaultmap(i)
			return d
		}
	}
	if d.clauseErr == nil {
		d.clauseErr = fmt.Errorf("defaultmap(%q): %w: want one of %s", behavior, ErrBadMap, strings.Join(defaultmapNames[:], ", "))
	}
	return d
}

// mapType is the map type of a bare slice under m.
func (m defaultmap) mapType() (mapping.MapType, error) {
	const implicit = mapping.MapImplicit
	switch m {
	case dmDefault, dmToFrom:
		return mapping.MapTo | mapping.MapFrom | implicit, nil
	case dmTo:
		return mapping.MapTo | implicit, nil
	case dmFrom:
		return mapping.MapFrom | implicit, nil
	case dmAlloc:
		return implicit, nil
	case dmPresent:
		return mapping.MapPresent | implicit, nil
	}
	return 0, fmt.Errorf("%w: defaultmap(none): a bare slice needs a map clause (To, From, ToFrom, Alloc) or a parameter that declares its direction (In, Out, InOut, Scratch)", ErrBadMap)
}

// UseDevicePtr is OpenMP's use_device_ptr clause for Device.Data, and its
// use_device_addr clause: for a Go slice, or a sub-slice (an array
// section), the two are the same.
// Inside the region's body, *p is the device address of slice s on the
// region's device. Hand it to code that takes device memory: Memcpy, a
// kernel's is_device_ptr argument, or a vendor library through
// DevicePtr.Addr.
//
// A slice that is not mapped, by the region's clauses or already, keeps its
// host address, as OpenMP 5.1 says. Then *p is s's own memory, a pointer of
// the initial device (p.Device() says so), as it is on the initial device.
// When the body returns, *p is reset to the zero DevicePtr: the address
// belongs to the region.
//
//	var px offload.DevicePtr
//	err := dev.Data(func() error { return vendorLib(px.Addr(), n) },
//		offload.ToFrom(x), offload.UseDevicePtr(x, &px))
func UseDevicePtr(s any, p *DevicePtr) Map { return useClause(s, p, "use_device_ptr") }

func useClause(s any, p *DevicePtr, clause string) Map {
	m := newMap(s, 0, false, clause)
	m.use, m.useClause = p, clause
	if m.err == nil && p == nil {
		m.err = core.Errorf("goffload: %s: %w: nil *DevicePtr to put the device address in", clause, ErrBadArgument)
	}
	return m
}

// Addr is the address of the memory p points to, as the device's kernels
// see it. For a host device or the initial device, it is an address in this
// process. For a device process, it is an address in that process,
// meaningful only to code running there; asking for it is a round trip to
// the device. It is 0 for a nil pointer, and for one the device cannot
// resolve: the device is lost, the memory freed, or the runtime stopped.
func (p DevicePtr) Addr() uintptr {
	if p.host || p.ptr == 0 {
		return uintptr(p.ptr)
	}
	rt := current.Load()
	if rt == nil {
		return 0
	}
	cd, _, err := rt.Resolve(p.dev)
	if err != nil || cd.Dev == nil {
		return 0
	}
	r, ok := cd.Dev.(plugin.AddrResolver)
	if !ok { // the device's names are its addresses
		return uintptr(p.ptr)
	}
	a, err := r.DeviceAddr(p.ptr)
	if err != nil {
		return 0
	}
	return a
}

// splitUses takes the use_device_ptr clauses out of maps.
func splitUses(maps []Map) (rest, uses []Map) {
	for _, m := range maps {
		if m.useClause != "" {
			uses = append(uses, m)
		} else {
			rest = append(rest, m)
		}
	}
	if len(uses) == 0 {
		return maps, nil
	}
	return rest, uses
}

// withDevicePtrs sets the device addresses of uses, runs body, and resets
// them.
func withDevicePtrs(d Device, cd *core.Device, uses []Map, body func() error) error {
	defer func() {
		for _, u := range uses {
			if u.use != nil {
				*u.use = DevicePtr{}
			}
		}
	}()
	for _, u := range uses {
		if u.err != nil {
			return u.err
		}
		p, err := d.MappedPtr(u.slice.Interface())
		if errors.Is(err, ErrNotPresent) {
			// Not mapped: the list item keeps its host address (OpenMP 5.1).
			p, err = Initial().MappedPtr(u.slice.Interface())
		}
		if err != nil {
			return core.Errorf("goffload: %s: target data %s(%s): %w", cd.Label(), u.useClause, core.QuoteName(u.item.Buf.Name), err)
		}
		*u.use = p
	}
	return body()
}
