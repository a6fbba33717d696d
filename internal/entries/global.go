package entries

import (
	"errors"
	"fmt"
	"hash/fnv"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
	"weak"

	"github.com/goffload/offload/internal/workpool"
	"github.com/goffload/offload/plugin"
)

// Declare target variables (OpenMP's `declare target to(x)` and
// `declare target link(x)`): Go values that every process registers at
// package init, in the same order, like kernels. They are entries of the
// offload entries table too: a device process finds a variable by its index.
//
// A kernel finds the device copy of a variable through a table of this
// process, kept per device instance (the worker pool its kernels get, and
// the device number): the runtime core fills it by launching the hidden
// kernel BindKernel on the device, with the variable's device memory as its
// slice argument, so a device process learns the address without any change
// to the protocol. The initial device's copy is the host slice itself
// (BindHost).

// ErrDeclareTarget is wrapped by every error about declaring a variable.
var ErrDeclareTarget = errors.New("invalid declare target variable")

// Global is a declare target variable: Len elements of Elem at Host in this
// process.
type Global struct {
	Index int
	Name  string
	// Link says the variable is declared link: it has device memory only
	// while the program maps it; otherwise (to) every device has its own
	// copy from Start on.
	Link bool
	Elem reflect.Type
	Len  int
	Host unsafe.Pointer // first element of the host copy
	Size int64          // bytes
	// Sig identifies the variable (index, name, type, length, kind): a
	// device checks it when it is bound, so that a device process built from
	// other code refuses instead of taking memory for another type.
	Sig uint64
}

// Addr is the host address of the variable.
func (g *Global) Addr() uintptr { return uintptr(g.Host) }

// Kind is "to" or "link".
func (g *Global) Kind() string {
	if g.Link {
		return "link"
	}
	return "to"
}

// Describe is the variable as messages name it: `link variable "x" ([]float64, 4 elements)`.
func (g *Global) Describe() string {
	s := "s"
	if g.Len == 1 {
		s = ""
	}
	return fmt.Sprintf("%s variable %q ([]%s, %d element%s)", g.Kind(), g.Name, g.Elem, g.Len, s)
}

// BindKernelName is the name of the hidden kernel that binds variables on
// a device. It is registered with the first variable, so a program without
// declare target variables has the kernel table it always had.
const BindKernelName = "goffload.declare_target.bind"

// Operations of the bind kernel.
const (
	BindOp   = 1 // the variable's device copy is the slice argument
	UnbindOp = 2 // the variable has no device copy (a link variable not mapped)
)

var globals struct {
	sync.Mutex
	list   []*Global
	byName map[string]*Global
	frozen int // runtimes started and not stopped
	bind   *Kernel
}

// RegisterGlobal adds the variable name, n elements of elem at host, to the
// entries table. A refusal is an error wrapping ErrDeclareTarget.
// It is refused while a runtime is started, between FreezeGlobals and
// ThawGlobals. The runtime's devices set the variables up at Start, and a
// device process has only the variables of its own package init.
// It is refused too for an empty name, a name taken, an empty variable,
// elements that are not plain data, and host memory that overlaps another
// variable's.
func RegisterGlobal(name string, elem reflect.Type, host unsafe.Pointer, n int, link bool) (*Global, error) {
	kind := "to"
	if link {
		kind = "link"
	}
	if name == "" {
		return nil, fmt.Errorf("%w: declare target %s variable: the name is empty", ErrDeclareTarget, kind)
	}
	if err := plainData(elem); err != nil {
		return nil, fmt.Errorf("%w: declare target %s variable %q: elements of type %s must be plain data: %v", ErrDeclareTarget, kind, name, elem, err)
	}
	size := int64(n) * int64(elem.Size())
	if n <= 0 || host == nil || size <= 0 {
		return nil, fmt.Errorf("%w: declare target %s variable %q: the variable is empty (a scalar is a slice of length 1)", ErrDeclareTarget, kind, name)
	}
	globals.Lock()
	defer globals.Unlock()
	if globals.frozen > 0 {
		return nil, fmt.Errorf("%w: declare target %s variable %q: declared after offload.Start: the devices set up the variables at Start (device processes register theirs at their own package init); declare it at package init, in a package-level var", ErrDeclareTarget, kind, name)
	}
	if _, dup := globals.byName[name]; dup {
		return nil, fmt.Errorf("%w: declare target variable %q is declared twice", ErrDeclareTarget, name)
	}
	begin, end := uintptr(host), uintptr(host)+uintptr(size)
	for _, o := range globals.list {
		if begin < o.Addr()+uintptr(o.Size) && o.Addr() < end {
			return nil, fmt.Errorf("%w: declare target %s variable %q: its host memory overlaps that of %s", ErrDeclareTarget, kind, name, o.Describe())
		}
	}
	if globals.bind == nil {
		k, err := RegisterKernel(BindKernelName, bindBody)
		if err != nil {
			return nil, fmt.Errorf("%w: declare target %s variable %q: %w", ErrDeclareTarget, kind, name, err)
		}
		globals.bind = k
	}
	g := &Global{Index: len(globals.list), Name: name, Link: link, Elem: elem, Len: n, Host: host, Size: size}
	h := fnv.New64a()
	fmt.Fprintf(h, "%d\x00%s\x00%s\x00%d\x00%d\x00%t", g.Index, g.Name, g.Elem, g.Elem.Size(), g.Len, g.Link)
	g.Sig = h.Sum64()
	if globals.byName == nil {
		globals.byName = map[string]*Global{}
	}
	globals.list = append(globals.list, g)
	globals.byName[name] = g
	return g, nil
}

// FreezeGlobals stops registration until ThawGlobals and returns the
// variables and the bind kernel (nil if there are none). The runtime core
// calls it at Start, and ThawGlobals at Stop.
func FreezeGlobals() ([]*Global, *Kernel) {
	globals.Lock()
	defer globals.Unlock()
	globals.frozen++
	return append([]*Global(nil), globals.list...), globals.bind
}

// ThawGlobals ends one FreezeGlobals.
func ThawGlobals() {
	globals.Lock()
	defer globals.Unlock()
	if globals.frozen > 0 {
		globals.frozen--
	}
}

// Globals returns the variables registered so far and the bind kernel.
func Globals() ([]*Global, *Kernel) {
	globals.Lock()
	defer globals.Unlock()
	return append([]*Global(nil), globals.list...), globals.bind
}

func registeredGlobals() []*Global {
	globals.Lock()
	defer globals.Unlock()
	return globals.list
}

// BindArgs are the arguments of the bind kernel for g. They are op, and for
// BindOp the device memory (Len bytes at Ptr) that holds g's copy.
// gen orders the binds of one variable on one device. A bind with a lower
// generation than the one in place does nothing, so binds enqueued on
// different queues may run in any order.
func BindArgs(g *Global, op int, gen uint64, p plugin.Ptr) []plugin.Arg {
	mem := plugin.Arg{}
	if op == BindOp {
		mem = plugin.Arg{Ptr: p, Len: int(g.Size)}
	}
	return []plugin.Arg{{Scalar: op}, {Scalar: g.Index}, {Scalar: gen}, {Scalar: g.Sig}, mem}
}

// deviceCtx is the context parameter of the bind kernel.
// (It names Pool, which only the kind's *plugin.KernelCtx has, so the
// bind kernel gets that, never a front end's context: see SetContext.)
type deviceCtx interface {
	Device() int
	Pool() *plugin.Pool
}

// bindBody is the bind kernel: it runs on the device and records where the
// variable's copy is, for GlobalOn.
func bindBody(ctx deviceCtx, op, idx int, gen, sig uint64, mem []byte) {
	kc, ok := ctx.(*plugin.KernelCtx)
	if !ok {
		panic(fmt.Sprintf("goffload: %s: the context is a %T", BindKernelName, ctx))
	}
	gs := registeredGlobals()
	if idx < 0 || idx >= len(gs) || gs[idx].Sig != sig {
		panic(fmt.Sprintf("goffload: device %d: declare target variable %d of the host is not this process's (it has %d variables): host and device run different builds", kc.Device(), idx, len(gs)))
	}
	g := gs[idx]
	var b *binding
	switch op {
	case BindOp:
		if int64(len(mem)) != g.Size {
			panic(fmt.Sprintf("goffload: device %d: %s: bound to %d bytes, want %d", kc.Device(), g.Describe(), len(mem), g.Size))
		}
		if uintptr(unsafe.Pointer(unsafe.SliceData(mem)))%uintptr(g.Elem.Align()) != 0 {
			panic(fmt.Sprintf("goffload: device %d: %s: device memory %p is not aligned for %s", kc.Device(), g.Describe(), unsafe.SliceData(mem), g.Elem))
		}
		b = &binding{gen: gen, mem: mem}
	case UnbindOp:
		b = &binding{gen: gen}
	default:
		panic(fmt.Sprintf("goffload: %s: unknown operation %d", BindKernelName, op))
	}
	instanceOf(kc.Pool(), kc.Device(), len(gs), true).set(idx, b)
}

// binding is where one variable's copy is on one device instance.
type binding struct {
	gen uint64
	mem []byte // nil: none (unbound)
}

// instance is the bindings of one device instance in this process.
type instance struct {
	mu    sync.Mutex // orders sets
	slots []atomic.Pointer[binding]
}

func (in *instance) set(idx int, b *binding) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if cur := in.slots[idx].Load(); cur != nil && cur.gen > b.gen {
		return // a later bind ran first
	}
	in.slots[idx].Store(b)
}

// instKey names a device instance: its kernels' worker pool, held weakly so
// that the table of a pool never closed goes with the pool, and its device
// number. The table goes when the pool closes (plugin.Pool.Close), so kinds
// need do nothing for it.
type instKey struct {
	pool   weak.Pointer[plugin.Pool]
	device int
}

var instances struct {
	sync.RWMutex
	m map[instKey]*instance
}

func instanceOf(pool *plugin.Pool, device, n int, create bool) *instance {
	k := instKey{weak.Make(pool), device}
	instances.RLock()
	in := instances.m[k]
	instances.RUnlock()
	if in != nil || !create {
		return in
	}
	instances.Lock()
	if in = instances.m[k]; in != nil {
		instances.Unlock()
		return in
	}
	if instances.m == nil {
		instances.m = map[instKey]*instance{}
	}
	in = &instance{slots: make([]atomic.Pointer[binding], n)}
	instances.m[k] = in
	instances.Unlock()
	if pool != nil {
		runtime.AddCleanup(pool, dropKey, k)
		// The device's bindings go with its pool (plugin.Pool.Close).
		(*workpool.Pool)(pool).OnClose(func() { dropKey(k) })
	}
	return in
}

func dropKey(k instKey) {
	instances.Lock()
	delete(instances.m, k)
	instances.Unlock()
}

// BindHost makes host the copy of every variable for kernels that run with
// pool as device number device: the initial device, whose memory is the
// program's.
func BindHost(pool *plugin.Pool, device int) {
	gs := registeredGlobals()
	if len(gs) == 0 {
		return
	}
	in := instanceOf(pool, device, len(gs), true)
	for i, g := range gs {
		in.set(i, &binding{gen: 1, mem: unsafe.Slice((*byte)(g.Host), g.Size)})
	}
}

// DropGlobals forgets the bindings of the device instances whose kernels
// run on pool, before the pool closes (the initial device's, whose pool the
// runtime keeps).
func DropGlobals(pool *plugin.Pool) {
	if pool == nil {
		return
	}
	wp := weak.Make(pool)
	instances.Lock()
	for k := range instances.m {
		if k.pool == wp {
			delete(instances.m, k)
		}
	}
	instances.Unlock()
}

// GlobalInstances is the number of device instances with bindings, for
// tests.
func GlobalInstances() int {
	instances.RLock()
	defer instances.RUnlock()
	return len(instances.m)
}

// GlobalOn returns the first byte of g's copy on the device c runs on, or
// an error naming the variable and the device if it has none there.
func GlobalOn(c *plugin.KernelCtx, g *Global) (unsafe.Pointer, error) {
	if in := instanceOf(c.Pool(), c.Device(), 0, false); in != nil && g.Index < len(in.slots) {
		if b := in.slots[g.Index].Load(); b != nil && b.mem != nil {
			return unsafe.Pointer(unsafe.SliceData(b.mem)), nil
		}
	}
	if g.Link {
		return nil, fmt.Errorf("goffload: device %d: declare target %s is not mapped on the device: map its host slice there (EnterData, Data or a map clause) before the kernel runs", c.Device(), g.Describe())
	}
	return nil, fmt.Errorf("goffload: device %d: declare target %s has no copy on the device (is the device one of this runtime's?)", c.Device(), g.Describe())
}
