package offload

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unsafe"

	"github.com/goffload/offload/internal/core"
	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/internal/mapping"
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

// maxDim is the largest dimension of num_teams and thread_limit: a CUDA
// grid's x dimension (2³¹−1). A device checks its own limits beyond it.
const maxDim = 1<<31 - 1

// NumTeams returns d with OpenMP's num_teams clause: the kernels it
// launches run as dims teams. On a GPU, the teams are the grid of thread
// blocks, in one to three dimensions (the 3-D form is the ompx_bare
// extension's). Without the clause (or GlobalSize), a GPU runs one thread
// per element of the longest slice argument the kernel may write, in
// blocks of its default size.
// CPU devices take the clause as the hint OpenMP allows it to be: their
// kernels split loops over their cores.
//
//	Saxpy.Run(offload.On(0).NumTeams(n/128).ThreadLimit(128), n, a, x, y)
//
// A dimension below 1 or above 2³¹−1, or more than three of them, fails
// the launch with ErrBadArgument.
func (d Device) NumTeams(dims ...int) Device {
	d.geo.Teams, d.clauseErr = dims3("num_teams", dims, d.clauseErr)
	return d
}

// ThreadLimit returns d with OpenMP's thread_limit clause: each team of
// the kernels it launches has dims threads. On a GPU, a team is the thread
// block, in one to three dimensions. A GPU refuses a block larger than it
// can run (1024 threads on NVIDIA GPUs), naming the kernel. CPU devices
// take the clause as a hint. Bad dimensions fail the launch as NumTeams's
// do.
func (d Device) ThreadLimit(dims ...int) Device {
	d.geo.Threads, d.clauseErr = dims3("thread_limit", dims, d.clauseErr)
	return d
}

// GlobalSize returns d with the global size of the kernels it launches in
// device code (OpenCL C's global_work_size): dims work-items, or threads,
// in one to three dimensions. Without it (and without NumTeams) a GPU runs
// one work-item per element of the longest slice argument the kernel may
// write (its Out, InOut and plain slices), or of its longest slice if it
// writes none. A GPU rounds the size up to a multiple of its block
// (ThreadLimit, or its default): the kernel checks its index against its
// length. CPU devices, whose Go bodies have no work-items, ignore it.
// Giving NumTeams too fails the launch with ErrBadArgument.
//
//	Lookup.Run(offload.On(0).GlobalSize(lookups), …)
func (d Device) GlobalSize(dims ...int) Device {
	d.geo.Size, d.clauseErr = dims3("global_size", dims, d.clauseErr)
	return d
}

// GlobalOffset returns d with the global offset of the kernels it
// launches in device code: their work-items are numbered from dims, in
// one to three dimensions, so that a kernel that numbers its work from
// get_global_id(0) can run a part of it (OpenCL C's global_work_offset;
// a PTX entry takes the offset as an extra parameter, see docs/gpu.md).
// CPU devices ignore it. A dimension below 0 fails the launch with
// ErrBadArgument.
func (d Device) GlobalOffset(dims ...int) Device {
	d.geo.Offset, d.clauseErr = dimsFrom("global_offset", dims, 0, d.clauseErr)
	return d
}

// dims3 is the 3-D form of a clause's dims, or the first error (prev, or
// one for dims).
func dims3(clause string, dims []int, prev error) ([3]int, error) {
	return dimsFrom(clause, dims, 1, prev)
}

// dimsFrom is dims3 with dimensions from least up: the dimensions not
// given are least too.
func dimsFrom(clause string, dims []int, least int, prev error) ([3]int, error) {
	if prev != nil {
		return [3]int{}, prev
	}
	what := fmt.Sprintf("%s(%s)", clause, strings.Join(strings.Fields(strings.Trim(fmt.Sprint(dims), "[]")), ","))
	if len(dims) < 1 || len(dims) > 3 {
		return [3]int{}, fmt.Errorf("%s: %w: %d dimensions, want 1 to 3", what, ErrBadArgument, len(dims))
	}
	out := [3]int{least, least, least}
	for i, v := range dims {
		if v < least || v > maxDim {
			return [3]int{}, fmt.Errorf("%s: %w: dimension %d is %d, want %d to %d", what, ErrBadArgument, i, v, least, maxDim)
		}
		out[i] = v
	}
	return out, nil
}

// geometry is the launch geometry d's clauses ask for, or their error.
func (d Device) geometry() (plugin.Geometry, error) {
	if d.clauseErr == nil && d.geo.Teams != ([3]int{}) && d.geo.Size != ([3]int{}) {
		return d.geo, fmt.Errorf("%s: %w: num_teams and global_size both give the number of work-items: give one", d.geo, ErrBadArgument)
	}
	return d.geo, d.clauseErr
}

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

// ErrDeclareTarget is wrapped by the error that DeclareTarget and
// DeclareTargetLink panic with when a variable cannot be declared. Its name
// may be taken, or it is empty, or its elements are not plain data. Its
// host memory may be shared with another variable, or the runtime is
// started.
var ErrDeclareTarget = entries.ErrDeclareTarget

// A Global is a declare target variable: a slice of plain data that kernels
// use on every device without passing it as an argument. It is OpenMP's
// `#pragma omp declare target to(x)` and `declare target link(x)`.
// A scalar is a slice of length 1.
//
// Declare variables at package init, in package-level vars, as kernels are
// registered. Every process of the program declares the same variables in
// the same order, so a device process finds each by its index.
//
// A "to" variable (DeclareTarget) has its own copy on every device from
// Start on, holding the host value of then. The copy is a present-table
// entry with an infinite reference count, like libomptarget's global
// entries. Map clauses find it present; they never copy it nor free it.
// Update(To(g.Host())) and Update(From(g.Host())) copy it. A kernel reads
// and writes the copy of the device it runs on with g.On(ctx). The copies
// go with the devices at Stop. The next Start makes new ones from the host
// value.
//
// A "link" variable (DeclareTargetLink) has no device memory of its own.
// Through g.On(ctx), a kernel sees the device copy that the program mapped
// when the kernel was launched. The program maps it with EnterData, Data or
// a map clause of g.Host(), or of a slice that contains it.
// A kernel that calls On where the variable is not mapped fails with an
// error wrapping ErrKernelFailed. The error names the variable and the
// device. A task that uses a link variable while other constructs map or
// unmap it should depend on g.Host() (DependIn).
//
// On the initial device, g.On(ctx) is g.Host() for both kinds.
type Global[T any] struct {
	g    *entries.Global
	host []T
}

// DeclareTarget declares a "to" variable whose host copy is init.
// The program's slice is the host copy, not a copy of it.
// It is meant for a package-level variable, as MustKernel is:
//
//	var Coeffs = offload.DeclareTarget("coeffs", []float64{1, 2, 1})
//
// It panics if the variable cannot be declared, with an error that wraps
// ErrDeclareTarget and names the variable. That is so for a name declared
// already, an empty init, elements that are not plain data, or memory that
// another variable uses. It is so too for a declaration while the runtime
// is started (between Start and Stop).
func DeclareTarget[T any](name string, init []T) *Global[T] {
	return mustDeclare(name, init, false)
}

// DeclareTargetLink declares a "link" variable whose host copy is host.
// It panics as DeclareTarget does if the variable cannot be declared.
func DeclareTargetLink[T any](name string, host []T) *Global[T] {
	return mustDeclare(name, host, true)
}

func mustDeclare[T any](name string, host []T, link bool) *Global[T] {
	g, err := declare(name, host, link)
	if err != nil {
		panic(err)
	}
	return g
}

func declare[T any](name string, host []T, link bool) (*Global[T], error) {
	g, err := entries.RegisterGlobal(name, reflect.TypeFor[T](), unsafe.Pointer(unsafe.SliceData(host)), len(host), link)
	if err != nil {
		return nil, core.Errorf("goffload: %w", err)
	}
	return &Global[T]{g: g, host: host}, nil
}

// Name is the name the variable was declared with.
func (g *Global[T]) Name() string { return g.g.Name }

// IsLink reports whether the variable was declared link.
func (g *Global[T]) IsLink() bool { return g.g.Link }

// Host is the host copy: the slice the variable was declared with. Map it
// (link), or copy it with Update (both kinds), like any mapped slice.
func (g *Global[T]) Host() []T { return g.host }

// String describes the variable: `declare target to variable "x" ([]float64, 4 elements)`.
func (g *Global[T]) String() string { return "declare target " + g.g.Describe() }

// On returns the variable's copy on the device the kernel with ctx runs on.
// On the initial device it is g.Host(). On is for kernel bodies.
// Where the variable has no copy (a link variable not mapped on the
// device), it panics. That fails the kernel with an error wrapping
// ErrKernelFailed that names the variable and the device.
func (g *Global[T]) On(ctx Ctx) []T {
	kc := kindCtx(ctx)
	if kc == nil {
		panic(fmt.Sprintf("goffload: %s: On needs the context a kernel receives, not a %T", g, ctx))
	}
	p, err := entries.GlobalOn(kc, g.g)
	if err != nil {
		panic(err)
	}
	return unsafe.Slice((*T)(p), len(g.host))
}
