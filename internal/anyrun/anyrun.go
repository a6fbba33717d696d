// Package anyrun is offload.Any's mechanics. The runtime places each Any-task
// on a device and keeps the copies of its buffers coherent. The decisions are
// internal/placement's plain state. This package lowers them to tasks, on
// core.Runtime.Spawn and the Op's Done and Recover hooks. Its state lives in
// the runtime's slot (core.Runtime.AnyState), made at the first Any-task.
// place.go holds the allocations, copies and task a plan needs. sync.go holds
// the copies back and the hand-back. recover.go and survive.go hold re-runs
// and restores after a loss. times.go takes kernel times from the devices'
// clocks. graph.go handles Any-tasks in recorded graphs.
package anyrun

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/goffload/offload/internal/core"
	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/internal/mapping"
	"github.com/goffload/offload/internal/placement"
	"github.com/goffload/offload/plugin"
)

// anySched is the runtime's placement of Any-tasks and the coherence of
// their buffers. The runtime makes it at the first Any-task (Runtime.placer).
type anySched struct {
	rt *core.Runtime

	// mu guards the table and what goes with it. A placement holds it while it
	// makes the tasks its task needs. So their order is the table's.
	mu      sync.Mutex
	table   *placement.Table
	bufs    map[placement.Buf]anyBuf  // the regions' slices
	tokens  map[anyTok][]byte         // depend objects of the copies on each device (token)
	mods    map[anyTok]*atomic.Uint64 // per region and device, the writes and copies into its copy placed so far (survive.go)
	tracked atomic.Int64              // table.Len(): the hand-placed constructs' check is one load while it is 0

	// writes holds the buffers each Any-task writes, by its number. Its Wait
	// makes their host copies valid (AnyWaited). wmu guards it. wmu is a leaf,
	// so a Wait does not wait for a placement.
	wmu    sync.Mutex
	writes map[uint64][]placement.Buf

	mmu   sync.Mutex // the model: placements and completions
	model *placement.Model

	// launched holds a kernel time per Any-task, by its task's number. It
	// covers tasks placed on a device that times its operations. The time is
	// there once the device reported it. An entry lives from the task's making
	// to its end (times.go).
	tmu      sync.Mutex
	launched map[uint64]time.Duration
	devTimed atomic.Int64 // Any-tasks learned from with their devices' times

	rr anyRerun // what re-runs need (recover.go)
}

// anyBuf is a buffer's slice (kept alive while the table holds it) and
// its name.
type anyBuf struct {
	v    reflect.Value
	name string
	// first says that its first version is still to be kept. The first task
	// that reads a part no task wrote keeps it. Such a region is one
	// AnyEnterData made.
	first bool
}

type anyTok struct {
	b   placement.Buf
	dev int
}

// loadSched is r's placement state, or nil before the first Any-task.
func loadSched(r *core.Runtime) *anySched {
	s, _ := r.AnyState().Load().(*anySched)
	return s
}

// placer returns r's placement state, made on first use.
func placer(r *core.Runtime) *anySched {
	if s := loadSched(r); s != nil {
		return s
	}
	n := &anySched{rt: r, table: placement.NewTable(), bufs: map[placement.Buf]anyBuf{},
		tokens: map[anyTok][]byte{}, mods: map[anyTok]*atomic.Uint64{}, writes: map[uint64][]placement.Buf{},
		model: placement.NewModel(len(r.Devices)), rr: newRerun(len(r.Devices)), launched: map[uint64]time.Duration{}}
	if r.AnyState().CompareAndSwap(nil, n) {
		n.timeOps()
		return n
	}
	return loadSched(r)
}

// AnyDeviceTimed is how many Any-tasks the placement model learned from
// with their devices' own times.
func AnyDeviceTimed(r *core.Runtime) int64 {
	if s := loadSched(r); s != nil {
		return s.devTimed.Load()
	}
	return 0
}

// AnyClause is a clause of Any().EnterData: a whole buffer (its slice)
// that Any-tasks will use parts of.
type AnyClause struct {
	Slice reflect.Value
	Buf   mapping.Buf
}

// AnyLaunch is an Any-task: a kernel, its lowered arguments and geometry,
// and its own depend clauses.
type AnyLaunch struct {
	Kernel *entries.Kernel
	Args   []core.KernelArg
	Geo    plugin.Geometry
	Deps   []core.Dep
	Once   bool // Kernel.Once: not run again when its device is lost
	// Plain says each argument is its parameter's (no struct holding
	// slices, no With clauses): the task can be described for re-runs.
	Plain bool
}

// AnyTarget places l's task on a device and makes it, with the copies
// its inputs need. An error means no task was made.
func AnyTarget(r *core.Runtime, l AnyLaunch) (*core.Task, error) {
	fail := func(err error) error {
		return core.Errorf("goffload: Any(): target %s%s: %w", l.Kernel.Name(), l.Kernel.Describe(), err)
	}
	acc, bufs, argOf, size, err := anyArgs(l.Args)
	if err != nil {
		return nil, fail(fmt.Errorf("%w: %v", core.ErrBadArgument, err))
	}
	t, err := placer(r).place(&anyTask{AnyLaunch: l, acc: acc, bufs: bufs, argOf: argOf, size: size})
	if err != nil {
		return nil, fail(err)
	}
	return t, nil
}

// AnyOwns refuses a hand-placed construct's map of b while Any-tasks use
// it: the hook the constructs' clauses pass through.
func AnyOwns(r *core.Runtime, b mapping.Buf) error {
	s := loadSched(r)
	if s == nil || s.tracked.Load() == 0 || b.Size == 0 {
		return nil
	}
	pb := placement.Buf{Addr: b.Addr(), Size: uintptr(b.Size)}
	s.mu.Lock()
	c, ok := s.table.Tracked(pb)
	s.mu.Unlock()
	if !ok {
		return nil
	}
	return core.Errorf("goffload: map of %q (%d bytes at %#x): %w: Any-tasks use [%#x, +%d) until Taskwait gives it back to the program: call offload.Taskwait first, or make this construct an Any-task too",
		b.Name, b.Size, b.Addr(), core.ErrBadMap, c.Addr, c.Size)
}

// AnyEnterData names whole buffers as Any-tasks' before a task uses a part of
// them. Their sections may then be any parts of them. Nothing is copied or
// allocated. The program's copy stays the valid one until tasks write parts of
// it.
func AnyEnterData(r *core.Runtime, cs []AnyClause) error {
	if len(r.Devices) == 0 { // Any-tasks run on the initial device, on the program's memory
		return nil
	}
	s := placer(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, c := range cs {
		if c.Buf.Size == 0 {
			continue
		}
		b := placement.Buf{Addr: c.Buf.Addr(), Size: uintptr(c.Buf.Size)}
		region, made, err := s.table.Track(b)
		if err != nil {
			return core.Errorf("goffload: Any(): enter data: clause %d (%q): %w: %w: call Taskwait, which gives Any-tasks' buffers back, first", i, c.Buf.Name, core.ErrBadMap, err)
		}
		if made {
			name := c.Buf.Name
			if name == "" {
				name = fmt.Sprintf("Any().EnterData's clause %d", i)
			}
			s.bufs[region] = anyBuf{v: c.Slice, name: name, first: true}
		}
	}
	s.tracked.Store(int64(s.table.Len()))
	return nil
}

// AnyUpdate makes the host's copies of bufs valid (Any().Update(From(x))).
func AnyUpdate(r *core.Runtime, ctx context.Context, bufs []mapping.Buf) error {
	s := loadSched(r)
	if s == nil {
		return nil
	}
	pbs := make([]placement.Buf, len(bufs))
	for i, b := range bufs {
		pbs[i] = placement.Buf{Addr: b.Addr(), Size: uintptr(b.Size)}
	}
	return s.flush(ctx, pbs)
}

// AnyWaited makes the host's copies of what the Any-tasks among ts wrote
// valid: their Wait, or their group's, returns once it is.
func AnyWaited(ctx context.Context, ts []*core.Task) error {
	var s *anySched
	var bufs []placement.Buf
	for _, t := range ts {
		if t == nil || t.Runtime() == nil {
			continue
		}
		as := loadSched(t.Runtime())
		if as == nil {
			continue
		}
		as.wmu.Lock()
		w := as.writes[t.ID]
		as.wmu.Unlock()
		if len(w) > 0 {
			s, bufs = as, append(bufs, w...)
		}
	}
	if s == nil {
		return nil
	}
	return s.flush(ctx, bufs)
}

// AnyHandback makes every Any-task buffer's host copy valid. If release, it
// also frees the device copies and gives the buffers back to the program
// (Taskwait). Stop calls it with release false.
func AnyHandback(r *core.Runtime, ctx context.Context, release bool) error {
	if s := loadSched(r); s != nil {
		return s.handback(ctx, release)
	}
	return nil
}

// section returns the part piece of region's slice, and its name.
func (s *anySched) section(region, piece placement.Buf) (reflect.Value, string, error) {
	v := s.bufs[region]
	es := v.v.Type().Elem().Size()
	off := piece.Addr - region.Addr
	if es == 0 || off%es != 0 || piece.Size%es != 0 {
		return reflect.Value{}, "", fmt.Errorf("%w: [%#x, +%d) does not fall on the elements of %q, a []%s at %#x", core.ErrBadMap, piece.Addr, piece.Size, v.name, v.v.Type().Elem(), region.Addr)
	}
	return v.v.Slice(int(off/es), int((off+piece.Size)/es)), v.name, nil
}

// sliceBuf is the memory of slice v, named name, for a map clause.
func sliceBuf(v reflect.Value, name string) mapping.Buf {
	return mapping.Buf{Ptr: v.UnsafePointer(), Size: int64(v.Len()) * int64(v.Type().Elem().Size()), Name: name}
}

// sliceDep is a depend clause of kind on the memory of v, a non-empty
// slice.
func sliceDep(kind core.DepKind, v reflect.Value) core.Dep {
	p := v.UnsafePointer()
	return core.Dep{Kind: kind, Addr: uintptr(p), Size: uintptr(v.Len()) * v.Type().Elem().Size(), Keep: p}
}

// tokDep is a depend clause of kind on t, a token (a section of a shadow).
func tokDep(kind core.DepKind, t []byte) core.Dep {
	p := unsafe.Pointer(unsafe.SliceData(t))
	return core.Dep{Kind: kind, Addr: uintptr(p), Size: uintptr(len(t)), Keep: p}
}

// token returns the depend object of section sec of region b's copy on dev.
// The object is a section of a shadow of the region. The shadow has a byte per
// tokenGrain bytes, at most maxShadow bytes. So copies and tasks on parts of a
// copy that do not overlap are not ordered by it. A halo row copied in does
// not wait for the tasks that read the rest.
func (s *anySched) token(b placement.Buf, dev int, sec placement.Buf) []byte {
	k := anyTok{b, dev}
	t := s.tokens[k]
	if t == nil {
		t = make([]byte, min(b.Size, maxShadow))
		s.tokens[k] = t
	}
	grain := (b.Size + uintptr(len(t)) - 1) / uintptr(len(t))
	lo := (sec.Addr - b.Addr) / grain
	hi := min((sec.Addr-b.Addr+sec.Size+grain-1)/grain, uintptr(len(t)))
	return t[lo:max(hi, lo+1)]
}

// maxShadow is the most bytes a region's shadow for its depend clauses takes
// per device. A region up to it gets a byte per byte; a larger one, coarser.
const maxShadow = 1 << 16

// anyArgs are an Any-task's buffers, read from its lowered arguments,
// and the argument each is.
func anyArgs(kargs []core.KernelArg) (acc []placement.Access, bufs []anyBuf, argOf []int, size int64, err error) {
	for i, ka := range kargs {
		if ka.DevPtr {
			return nil, nil, nil, 0, fmt.Errorf("argument %d is a DevicePtr, which belongs to one device: launch on that device (On(n)) instead of Any()", i)
		}
		if !ka.Slice.IsValid() || ka.Map.Buf.Size == 0 {
			continue
		}
		argOf = append(argOf, i)
		b := placement.Buf{Addr: ka.Map.Buf.Addr(), Size: uintptr(ka.Map.Buf.Size)}
		acc = append(acc, placement.Access{Buf: b, Read: ka.Map.Type&mapping.MapTo != 0, Write: ka.Map.Type&mapping.MapFrom != 0})
		bufs = append(bufs, anyBuf{v: ka.Slice, name: ka.Map.Buf.Name})
		size += ka.Map.Buf.Size
	}
	return acc, bufs, argOf, size, nil
}
