package offload

import (
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goffload/offload/internal/core"
	"github.com/goffload/offload/internal/mapping"
	"github.com/goffload/offload/internal/placement"
)

// anyNum is the device number Any stands for: no device has it.
const anyNum = -1 << 30

// Any returns the device that means "a device the runtime picks", for
// target tasks: Any().Nowait(deps...) with Run or a typed kernel's Nowait,
// and Any().Run for a synchronous launch. The runtime places each such
// task (an Any-task) when it is created, on the device where it is
// expected to finish first: the work already placed there, the copies its
// inputs need there, and the kernel's time there, learned per kernel, per
// device and per size from the tasks that ran (see docs/tasks.md).
//
// The data follows the tasks. The kernel's parameters say what it does
// with each buffer (In, Out, InOut, Scratch; a bare slice as the
// Defaultmap says); the runtime keeps copies of the buffers on the devices
// that use them, copies a task's inputs from the nearest valid copy
// (device to device where the kinds allow) and makes its outputs the one
// valid copy. An Any-task also depends on its buffers as its parameters
// say (in for In, inout for the others), beside its own depend clauses.
// The program's own copy of a buffer is valid again when it could look
// at it: after Taskwait (which also frees the device copies and gives the
// buffers back to the program), after a task's Wait or its group's Wait
// for what those tasks wrote, and after Any().Update(From(x)).
//
// Until Taskwait gives them back, the buffers Any-tasks use belong to
// the runtime: a construct placed by hand that maps one of them fails
// with an error wrapping ErrBadMap that says so, rather than read a stale
// copy. The first section of a buffer that an Any-task uses is the extent
// the runtime tracks: later sections must lie inside it or not overlap it
// (two halves, say); a section that partly overlaps one in use is refused
// the same way. Any().EnterData(To(x)) names all of x first, so that its
// sections may then be any parts of it: a task per band, then tasks that
// read rows across the bands.
//
// A kernel of an Any-task should compute its outputs from its inputs
// only: when a device is lost, its Any-tasks run again on the devices left
// (their inputs read from a device that still holds them, or recomputed
// from the tasks that wrote them, back to each buffer's first version,
// which the runtime keeps until Taskwait), and their dependents wait for
// them; see docs/tasks.md. Kernel.Once opts a
// kernel out, and GOFFLOAD_ANY_RERUN=0 the whole runtime.
func Any() Device { return Device{num: anyNum} }

// IsAny reports whether d is Any().
func (d Device) IsAny() bool { return d.num == anyNum }

// anySched is the runtime's placement of Any-tasks and the coherence of
// their buffers (internal/placement's plain state, lowered here to
// ordinary constructs).
type anySched struct {
	rt *core.Runtime

	// mu guards the table and what goes with it; a placement holds it
	// while it makes the constructs its task needs, so that their order
	// is the table's.
	mu      sync.Mutex
	table   *placement.Table
	bufs    map[placement.Buf]anyBuf  // the regions' slices
	tokens  map[anyTok][]byte         // depend objects of the copies on each device (token)
	mods    map[anyTok]*atomic.Uint64 // per region and device, the writes and copies into its copy placed so far (any_survive.go)
	tracked atomic.Int64              // table.Len(): the hand-placed constructs' check is one load while it is 0

	mmu   sync.Mutex // the model: placements and completions
	model *placement.Model

	// launched holds, per Any-task placed on a device that times its
	// operations (by its task's number), its kernel's time there once the
	// device reported it; from its making to its end (any_times.go).
	tmu      sync.Mutex
	launched map[uint64]time.Duration
	devTimed atomic.Int64 // Any-tasks learned from with their devices' times

	rr anyRerun // what re-runs need (any_recover.go)
}

// anyBuf is a buffer's slice (kept alive while the table holds it) and
// its name.
type anyBuf struct {
	v    reflect.Value
	name string
	// first says that its first version is still to be kept, by the
	// first task that reads a part of it no task wrote (a region that
	// Any().EnterData made: any_enter.go).
	first bool
}

type anyTok struct {
	b   placement.Buf
	dev int
}

var anyState atomic.Pointer[anySched]

// anyFor returns rt's placement state, made on first use.
func anyFor(rt *core.Runtime) *anySched {
	for {
		s := anyState.Load()
		if s != nil && s.rt == rt {
			return s
		}
		n := &anySched{rt: rt, table: placement.NewTable(), bufs: map[placement.Buf]anyBuf{},
			tokens: map[anyTok][]byte{}, mods: map[anyTok]*atomic.Uint64{}, model: placement.NewModel(len(rt.Devices)), rr: newRerun(len(rt.Devices)),
			launched: map[uint64]time.Duration{}}
		if anyState.CompareAndSwap(s, n) {
			n.timeOps()
			return n
		}
	}
}

// anyOf returns rt's placement state if Any-tasks made one.
func anyOf(rt *core.Runtime) *anySched {
	if s := anyState.Load(); s != nil && s.rt == rt {
		return s
	}
	return nil
}

// section returns the part piece of region's slice, and its name.
func (s *anySched) section(region, piece placement.Buf) (any, string, error) {
	v := s.bufs[region]
	es := v.v.Type().Elem().Size()
	off := piece.Addr - region.Addr
	if es == 0 || off%es != 0 || piece.Size%es != 0 {
		return nil, "", fmt.Errorf("%w: [%#x, +%d) does not fall on the elements of %q, a []%s at %#x", ErrBadMap, piece.Addr, piece.Size, v.name, v.v.Type().Elem(), region.Addr)
	}
	return v.v.Slice(int(off/es), int((off+piece.Size)/es)).Interface(), v.name, nil
}

// token returns the depend object of section sec of region b's copy on
// dev: a section of a shadow of the region (a byte per tokenGrain bytes of
// it, at most maxShadow bytes), so that copies and tasks on parts of a
// copy that do not overlap are not ordered by it (a halo row copied in
// does not wait for the tasks that read the rest).
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

// maxShadow is the most bytes a region's shadow for its depend clauses
// takes per device (a byte per byte of a region up to it; coarser past).
const maxShadow = 1 << 16

// anyArgs are an Any-task's buffers, read from its converted arguments,
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

// runAny places kernel k's task with args and makes it, with the copies
// its inputs need.
func (a Async) runAny(k *Kernel, o launchOpts, args []any) *Task {
	rt, err := runtimeOrErr()
	if err != nil {
		return a.failed(err)
	}
	if k == nil || k.k == nil {
		return a.failed(fmt.Errorf("goffload: Any(): target: %w: nil kernel", ErrBadArgument))
	}
	if len(rt.Devices) == 0 { // nothing to place on: the initial device, as for On(0)
		a.dev = Device{num: 0, ctx: a.dev.ctx, dm: a.dev.dm, geo: a.dev.geo, geoErr: a.dev.geoErr}
		return a.run(k, o, args)
	}
	o.byAny = true
	kargs, err := kernelArgs(rt.Initial, k, a.dev.dm, o, args)
	if err != nil {
		return a.failed(fmt.Errorf("goffload: Any(): %w", err))
	}
	fail := func(err error) *Task {
		return a.failed(fmt.Errorf("goffload: Any(): target %s%s: %w", k.k.Name(), k.k.Describe(), err))
	}
	acc, bufs, argOf, size, err := anyArgs(kargs)
	if err != nil {
		return fail(fmt.Errorf("%w: %v", ErrBadArgument, err))
	}
	geo, err := a.dev.geometry()
	if err != nil {
		return fail(err)
	}
	s := anyFor(rt)
	return s.place(a, k, o, args, kargs, acc, bufs, argOf, size, geo, fail)
}
