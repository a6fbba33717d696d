// Package cudafake is an in-memory CUDA driver (a cudadrv.Driver) for tests
// without a GPU: fake GPUs with device memory in Go slices at synthetic
// addresses (one address space, as unified addressing gives), streams that
// run their operations in order on goroutines of their own — so copies and
// kernels really are asynchronous, and a caller that reads a staging buffer
// before the copy into it is done reads stale bytes (and the race detector
// says so) — events with the driver's semantics (a record replaces the
// last; a wait takes the record of the time of the call), primary contexts
// with reference counts, a current context per OS thread, and sticky
// errors.
//
// Modules are PTX text: ModuleLoadData parses each .entry's parameter list
// (sizes and alignments as PTX declares them, read by internal/ptx) and
// checks .version and .target against the GPU. A launch reads each parameter's bytes through
// the kernelParams array as cuLaunchKernel does, and runs the Go function
// registered for the entry with SetKernel, if any, on the stream: it sees
// the parameters as the PTX entry would, and device memory by address.
// An entry with no function registered does nothing (an empty kernel).
package cudafake

import (
	"fmt"
	"math"
	"sort"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/goffload/offload/internal/cudadrv"
	"github.com/goffload/offload/internal/ptx"
)

// GPU describes a fake GPU.
type GPU struct {
	Name         string
	Major, Minor int   // compute capability
	SMs          int   // multiprocessors
	Memory       int64 // bytes
}

// Config describes the fake driver.
type Config struct {
	GPUs []GPU
	// Version is what cuDriverGetVersion returns (default 12040: 12.4).
	Version int
	// InitErr, if set, is what cuInit fails with (ErrNoDevice: a machine
	// with the driver and no GPU).
	InitErr cudadrv.Result
	// OpDelay is how long each stream operation waits before it runs.
	OpDelay time.Duration
	// Isolated lists the GPUs (by ordinal) with no peer-to-peer link:
	// cuDeviceCanAccessPeer says no to and from them. Every other pair
	// can access each other, as GPUs on NVLink.
	Isolated []int
}

// H100 is a GPU like an H100 (compute capability 9.0, 132 SMs) with 1 GiB
// of fake memory.
var H100 = GPU{Name: "Fake NVIDIA H100 80GB HBM3", Major: 9, Minor: 0, SMs: 132, Memory: 1 << 30}

// KernelFunc runs a kernel launch on the fake GPU. An error makes the launch
// fail as a faulting kernel does: the context's sticky
// CUDA_ERROR_ILLEGAL_ADDRESS.
type KernelFunc func(l *Launch) error

// Driver is the fake driver.
type Driver struct {
	cfg Config

	mu      sync.Mutex
	changed *sync.Cond // an event completed
	inited  bool
	next    uintptr
	primary []*context // per GPU: the live primary context, nil if released
	ctxs    map[cudadrv.Context]*context
	current map[int]*context // by OS thread id
	allocs  []*alloc         // live device allocations, by base address
	host    map[uintptr][]byte
	modules map[cudadrv.Module]*module
	funcs   map[cudadrv.Function]*function
	streams map[cudadrv.Stream]*stream
	events  map[cudadrv.Event]*event
	kernels map[string]KernelFunc
	calls   map[string]int
	// pageable counts async copies from or to host memory that
	// MemHostAlloc did not allocate.
	pageable int
	launches map[string]int
	// peerCopies counts cuMemcpyPeerAsync copies between two contexts:
	// [0] through host memory, [1] direct (peer access enabled).
	peerCopies [2]int
}

type context struct {
	handle   cudadrv.Context
	gpu      int
	refs     int
	sticky   cudadrv.Result
	used     int64
	nextAddr uint64
	peers    map[*context]bool // contexts whose memory it may access (cuCtxEnablePeerAccess)
}

type alloc struct {
	base cudadrv.DevPtr
	size int64
	data []byte
	ctx  *context
}

type module struct {
	ctx     *context
	entries map[string][]Param
}

// Param is a PTX kernel parameter: its size and alignment in bytes (a
// pointer's own alignment, not its .align's).
type Param struct {
	Size, Align int
}

type function struct {
	ctx    *context
	entry  string
	params []Param
}

type stream struct {
	ctx  *context
	mu   sync.Mutex
	cond *sync.Cond
	ops  []func()
	busy int // operations enqueued and not done
	run  bool
	dead bool
}

type event struct {
	ctx      *context
	timing   bool      // created without EventDisableTiming
	recorded uint64    // generation of the last record
	done     uint64    // generation reached
	at       time.Time // when the stream ran the record of generation done
	dead     bool
}

// New returns a fake driver with cfg's GPUs.
func New(cfg Config) *Driver {
	if cfg.Version == 0 {
		cfg.Version = 12040
	}
	d := &Driver{
		cfg:      cfg,
		next:     0x1000,
		primary:  make([]*context, len(cfg.GPUs)),
		ctxs:     map[cudadrv.Context]*context{},
		current:  map[int]*context{},
		host:     map[uintptr][]byte{},
		modules:  map[cudadrv.Module]*module{},
		funcs:    map[cudadrv.Function]*function{},
		streams:  map[cudadrv.Stream]*stream{},
		events:   map[cudadrv.Event]*event{},
		kernels:  map[string]KernelFunc{},
		calls:    map[string]int{},
		launches: map[string]int{},
	}
	d.changed = sync.NewCond(&d.mu)
	return d
}

var _ cudadrv.Driver = (*Driver)(nil)

// SetKernel makes launches of entry run fn.
func (d *Driver) SetKernel(entry string, fn KernelFunc) {
	d.mu.Lock()
	d.kernels[entry] = fn
	d.mu.Unlock()
}

// Calls returns how many times the driver function fn ("cuModuleLoadData")
// was called.
func (d *Driver) Calls(fn string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.calls[fn]
}

// Launches returns how many launches of entry ran.
func (d *Driver) Launches(entry string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.launches[entry]
}

// PageableCopies returns how many asynchronous copies used host memory
// that MemHostAlloc did not allocate (pageable memory: the real driver
// copies it synchronously, and Go memory could be moved or freed under
// it).
func (d *Driver) PageableCopies() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pageable
}

// Live returns the numbers of live device allocations, pinned host
// allocations, streams, events and modules: what a test checks is back to
// zero after closing everything.
func (d *Driver) Live() (allocs, host, streams, events, modules int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.allocs), len(d.host), len(d.streams), len(d.events), len(d.modules)
}

// Fault makes the context of GPU gpu fail as after a faulting kernel: every
// later call in it returns CUDA_ERROR_ILLEGAL_ADDRESS.
func (d *Driver) Fault(gpu int) {
	d.mu.Lock()
	if c := d.primary[gpu]; c != nil {
		c.sticky = cudadrv.ErrIllegalAddress
	}
	d.mu.Unlock()
}

func (d *Driver) handle() uintptr {
	d.next += 0x10
	return d.next
}

// enter counts a call of fn; under d.mu.
func (d *Driver) enter(fn string) { d.calls[fn]++ }

func fail(fn string, r cudadrv.Result) error {
	return cudadrv.NewError(fn, r, "fake driver")
}

// ready checks that the driver is initialized; under d.mu.
func (d *Driver) ready(fn string) error {
	d.enter(fn)
	if !d.inited {
		return fail(fn, cudadrv.ErrNotInitialized)
	}
	return nil
}

// cur returns the current context of the calling OS thread; under d.mu.
func (d *Driver) cur(fn string) (*context, error) {
	if err := d.ready(fn); err != nil {
		return nil, err
	}
	c := d.current[syscall.Gettid()]
	if c == nil || c.refs == 0 {
		return nil, fail(fn, cudadrv.ErrInvalidContext)
	}
	if c.sticky != 0 {
		return nil, fail(fn, c.sticky)
	}
	return c, nil
}

// Init is the fake cuInit.
func (d *Driver) Init() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.enter("cuInit")
	if d.cfg.InitErr != 0 {
		return fail("cuInit", d.cfg.InitErr)
	}
	d.inited = true
	return nil
}

// DriverGetVersion is the fake cuDriverGetVersion.
func (d *Driver) DriverGetVersion() (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.enter("cuDriverGetVersion")
	return d.cfg.Version, nil
}

// DeviceGetCount is the fake cuDeviceGetCount.
func (d *Driver) DeviceGetCount() (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.ready("cuDeviceGetCount"); err != nil {
		return 0, err
	}
	return len(d.cfg.GPUs), nil
}

func (d *Driver) gpu(fn string, dev cudadrv.Device) (GPU, error) {
	if err := d.ready(fn); err != nil {
		return GPU{}, err
	}
	if dev < 0 || int(dev) >= len(d.cfg.GPUs) {
		return GPU{}, fail(fn, cudadrv.ErrInvalidDevice)
	}
	return d.cfg.GPUs[dev], nil
}

// DeviceGet is the fake cuDeviceGet.
func (d *Driver) DeviceGet(ordinal int) (cudadrv.Device, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	_, err := d.gpu("cuDeviceGet", cudadrv.Device(ordinal))
	return cudadrv.Device(ordinal), err
}

// DeviceGetName is the fake cuDeviceGetName.
func (d *Driver) DeviceGetName(dev cudadrv.Device) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	g, err := d.gpu("cuDeviceGetName", dev)
	return g.Name, err
}

// DeviceGetAttribute is the fake cuDeviceGetAttribute.
func (d *Driver) DeviceGetAttribute(attr cudadrv.Attribute, dev cudadrv.Device) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	g, err := d.gpu("cuDeviceGetAttribute", dev)
	if err != nil {
		return 0, err
	}
	switch attr {
	case cudadrv.AttrComputeCapabilityMajor:
		return g.Major, nil
	case cudadrv.AttrComputeCapabilityMinor:
		return g.Minor, nil
	case cudadrv.AttrMultiprocessorCount:
		return g.SMs, nil
	case cudadrv.AttrMaxThreadsPerBlock:
		return 1024, nil
	case cudadrv.AttrUnifiedAddressing:
		return 1, nil
	}
	return 0, fail("cuDeviceGetAttribute", cudadrv.ErrInvalidValue)
}

// DeviceTotalMem is the fake cuDeviceTotalMem.
func (d *Driver) DeviceTotalMem(dev cudadrv.Device) (int64, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	g, err := d.gpu("cuDeviceTotalMem_v2", dev)
	return g.Memory, err
}

// DevicePrimaryCtxRetain is the fake cuDevicePrimaryCtxRetain.
func (d *Driver) DevicePrimaryCtxRetain(dev cudadrv.Device) (cudadrv.Context, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.gpu("cuDevicePrimaryCtxRetain", dev); err != nil {
		return 0, err
	}
	c := d.primary[dev]
	if c == nil {
		c = &context{handle: cudadrv.Context(d.handle()), gpu: int(dev), nextAddr: 0x7000_0000_0000 + uint64(dev)<<40}
		d.primary[dev] = c
		d.ctxs[c.handle] = c
	}
	c.refs++
	return c.handle, nil
}

// DevicePrimaryCtxRelease is the fake cuDevicePrimaryCtxRelease.
func (d *Driver) DevicePrimaryCtxRelease(dev cudadrv.Device) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.gpu("cuDevicePrimaryCtxRelease", dev); err != nil {
		return err
	}
	c := d.primary[dev]
	if c == nil {
		return fail("cuDevicePrimaryCtxRelease", cudadrv.ErrInvalidContext)
	}
	c.refs--
	if c.refs > 0 {
		return nil
	}
	// The last release destroys the context and everything in it.
	d.primary[dev] = nil
	delete(d.ctxs, c.handle)
	for _, o := range d.ctxs {
		delete(o.peers, c)
	}
	kept := d.allocs[:0]
	for _, a := range d.allocs {
		if a.ctx != c {
			kept = append(kept, a)
		}
	}
	d.allocs = kept
	for h, s := range d.streams {
		if s.ctx == c {
			s.mu.Lock()
			s.dead = true
			s.mu.Unlock()
			delete(d.streams, h)
		}
	}
	for h, e := range d.events {
		if e.ctx == c {
			e.dead = true
			delete(d.events, h)
		}
	}
	d.changed.Broadcast()
	for h, m := range d.modules {
		if m.ctx == c {
			delete(d.modules, h)
		}
	}
	for h, f := range d.funcs {
		if f.ctx == c {
			delete(d.funcs, h)
		}
	}
	return nil
}

// CtxSetCurrent is the fake cuCtxSetCurrent.
func (d *Driver) CtxSetCurrent(h cudadrv.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.ready("cuCtxSetCurrent"); err != nil {
		return err
	}
	tid := syscall.Gettid()
	if h == 0 {
		delete(d.current, tid)
		return nil
	}
	c := d.ctxs[h]
	if c == nil {
		return fail("cuCtxSetCurrent", cudadrv.ErrInvalidContext)
	}
	d.current[tid] = c
	return nil
}

// CtxSynchronize is the fake cuCtxSynchronize.
func (d *Driver) CtxSynchronize() error {
	d.mu.Lock()
	c, err := d.cur("cuCtxSynchronize")
	var ss []*stream
	for _, s := range d.streams {
		if s.ctx == c {
			ss = append(ss, s)
		}
	}
	d.mu.Unlock()
	if err != nil {
		return err
	}
	for _, s := range ss {
		s.drain()
	}
	return d.sticky("cuCtxSynchronize", c)
}

// sticky returns c's sticky error as fn's.
func (d *Driver) sticky(fn string, c *context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c.sticky != 0 {
		return fail(fn, c.sticky)
	}
	return nil
}

// ParsePTX returns the parameter lists of the .entry functions of a PTX
// image, and the compute capability of its .target (90 for sm_90): what
// internal/ptx reads, which the real driver would refuse if it cannot.
func ParsePTX(image []byte) (entries map[string][]Param, target int, err error) {
	target, err = ptx.Target(image)
	if err != nil {
		return nil, 0, err
	}
	es, err := ptx.Entries(image)
	if err != nil {
		return nil, 0, err
	}
	if len(es) == 0 {
		return nil, 0, fmt.Errorf("no .entry")
	}
	entries = make(map[string][]Param, len(es))
	for name, ps := range es {
		var params []Param
		for _, p := range ps {
			params = append(params, Param{Size: p.Size, Align: p.Align})
		}
		entries[name] = params
	}
	return entries, target, nil
}

// ModuleLoadData is the fake cuModuleLoadData.
func (d *Driver) ModuleLoadData(image []byte) (cudadrv.Module, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, err := d.cur("cuModuleLoadData")
	if err != nil {
		return 0, err
	}
	entries, target, err := ParsePTX(image)
	if err != nil {
		return 0, cudadrv.NewError("cuModuleLoadData", cudadrv.ErrInvalidPTX, "fake driver: "+err.Error())
	}
	g := d.cfg.GPUs[c.gpu]
	if target > g.Major*10+g.Minor {
		return 0, cudadrv.NewError("cuModuleLoadData", cudadrv.ErrInvalidPTX, fmt.Sprintf("fake driver: .target sm_%d is higher than the GPU's sm_%d%d", target, g.Major, g.Minor))
	}
	h := cudadrv.Module(d.handle())
	d.modules[h] = &module{ctx: c, entries: entries}
	return h, nil
}

// ModuleUnload is the fake cuModuleUnload.
func (d *Driver) ModuleUnload(h cudadrv.Module) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.ready("cuModuleUnload"); err != nil {
		return err
	}
	if _, ok := d.modules[h]; !ok {
		return fail("cuModuleUnload", cudadrv.ErrInvalidHandle)
	}
	delete(d.modules, h)
	return nil
}

// ModuleGetFunction is the fake cuModuleGetFunction.
func (d *Driver) ModuleGetFunction(h cudadrv.Module, name string) (cudadrv.Function, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.ready("cuModuleGetFunction"); err != nil {
		return 0, err
	}
	m, ok := d.modules[h]
	if !ok {
		return 0, fail("cuModuleGetFunction", cudadrv.ErrInvalidHandle)
	}
	params, ok := m.entries[name]
	if !ok {
		return 0, fail("cuModuleGetFunction", cudadrv.ErrNotFound)
	}
	f := cudadrv.Function(d.handle())
	d.funcs[f] = &function{ctx: m.ctx, entry: name, params: params}
	return f, nil
}

// Launch is a kernel launch as the fake runs it.
type Launch struct {
	Entry       string
	Grid, Block [3]uint32
	// Params holds each parameter's bytes, as the PTX entry declares it.
	Params [][]byte
	d      *Driver
}

// Threads is the number of threads along x: grid times block.
func (l *Launch) Threads() int64 { return int64(l.Grid[0]) * int64(l.Block[0]) }

func (l *Launch) word(i, size int) uint64 {
	b := l.Params[i]
	if len(b) != size {
		panic(fmt.Sprintf("cudafake: %s: parameter %d has %d bytes, read as %d", l.Entry, i, len(b), size))
	}
	var v uint64
	for j := size - 1; j >= 0; j-- {
		v = v<<8 | uint64(b[j])
	}
	return v
}

// Uint32 reads parameter i, whose size must be the type's.
func (l *Launch) Uint32(i int) uint32 { return uint32(l.word(i, 4)) }

// Uint64 reads parameter i, whose size must be the type's.
func (l *Launch) Uint64(i int) uint64 { return l.word(i, 8) }

// Int64 reads parameter i, whose size must be the type's.
func (l *Launch) Int64(i int) int64 { return int64(l.word(i, 8)) }

// Float32 reads parameter i, whose size must be the type's.
func (l *Launch) Float32(i int) float32 { return math.Float32frombits(uint32(l.word(i, 4))) }

// Float64 reads parameter i, whose size must be the type's.
func (l *Launch) Float64(i int) float64 { return math.Float64frombits(l.word(i, 8)) }

// Ptr reads parameter i, whose size must be the type's.
func (l *Launch) Ptr(i int) cudadrv.DevPtr { return cudadrv.DevPtr(l.word(i, 8)) }

// Slice returns the n elements of type T at the device address that
// parameter i of l holds, or an error if they are not inside one
// allocation (the kernel would fault): a kernel's view of a pointer
// argument.
func Slice[T any](l *Launch, i int, n int64) ([]T, error) {
	b, err := l.Mem(l.Ptr(i), int64(unsafe.Sizeof(*new(T)))*n)
	if err != nil {
		return nil, err
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n), nil
}

// Mem returns the n bytes of device memory at p, or an error if they are
// not inside one allocation (the kernel would fault).
func (l *Launch) Mem(p cudadrv.DevPtr, n int64) ([]byte, error) {
	l.d.mu.Lock()
	defer l.d.mu.Unlock()
	a := l.d.find(p)
	if a == nil || n < 0 || int64(p-a.base)+n > a.size {
		return nil, fmt.Errorf("illegal address %#x (+%d bytes)", uint64(p), n)
	}
	off := int64(p - a.base)
	return a.data[off : off+n : a.size], nil
}

// LaunchKernel is the fake cuLaunchKernel.
func (d *Driver) LaunchKernel(fh cudadrv.Function, grid, block [3]uint32, sharedMem uint32, sh cudadrv.Stream, params unsafe.Pointer) error {
	const fn = "cuLaunchKernel"
	d.mu.Lock()
	if err := d.ready(fn); err != nil {
		d.mu.Unlock()
		return err
	}
	f, s := d.funcs[fh], d.streams[sh]
	if f == nil || s == nil {
		d.mu.Unlock()
		return fail(fn, cudadrv.ErrInvalidHandle)
	}
	if f.ctx != s.ctx {
		d.mu.Unlock()
		return fail(fn, cudadrv.ErrInvalidContext)
	}
	if f.ctx.sticky != 0 {
		d.mu.Unlock()
		return fail(fn, f.ctx.sticky)
	}
	impl := d.kernels[f.entry]
	d.mu.Unlock()
	threads := uint64(block[0]) * uint64(block[1]) * uint64(block[2])
	if threads == 0 || threads > 1024 || grid[0] == 0 || grid[1] == 0 || grid[2] == 0 ||
		grid[0] > math.MaxInt32 || grid[1] > 65535 || grid[2] > 65535 || block[2] > 64 {
		return fail(fn, cudadrv.ErrInvalidValue)
	}
	l := &Launch{Entry: f.entry, Grid: grid, Block: block, d: d}
	if len(f.params) > 0 {
		if params == nil {
			return fail(fn, cudadrv.ErrInvalidValue)
		}
		ptrs := unsafe.Slice((*unsafe.Pointer)(params), len(f.params))
		for i, p := range f.params {
			if ptrs[i] == nil {
				return fail(fn, cudadrv.ErrInvalidValue)
			}
			l.Params = append(l.Params, append([]byte(nil), unsafe.Slice((*byte)(ptrs[i]), p.Size)...))
		}
	}
	c := f.ctx
	s.enqueue(d, func() {
		d.mu.Lock()
		d.launches[f.entry]++
		faulted := c.sticky != 0
		d.mu.Unlock()
		if impl == nil || faulted {
			return
		}
		if err := impl(l); err != nil {
			d.mu.Lock()
			c.sticky = cudadrv.ErrIllegalAddress
			d.mu.Unlock()
		}
	})
	return nil
}

// find returns the live allocation holding p; under d.mu.
func (d *Driver) find(p cudadrv.DevPtr) *alloc {
	i := sort.Search(len(d.allocs), func(i int) bool { return d.allocs[i].base > p }) - 1
	if i < 0 {
		return nil
	}
	a := d.allocs[i]
	if p >= a.base+cudadrv.DevPtr(max(a.size, 1)) {
		return nil
	}
	return a
}

// MemAlloc is the fake cuMemAlloc.
func (d *Driver) MemAlloc(size int64) (cudadrv.DevPtr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, err := d.cur("cuMemAlloc_v2")
	if err != nil {
		return 0, err
	}
	if size <= 0 {
		return 0, fail("cuMemAlloc_v2", cudadrv.ErrInvalidValue)
	}
	if size > d.cfg.GPUs[c.gpu].Memory-c.used {
		return 0, fail("cuMemAlloc_v2", cudadrv.ErrOutOfMemory)
	}
	c.used += size
	a := &alloc{base: cudadrv.DevPtr(c.nextAddr), size: size, data: make([]byte, size), ctx: c}
	c.nextAddr += (uint64(size) + 4096 + 511) &^ 511 // a gap after each, as overruns would fault
	i := sort.Search(len(d.allocs), func(i int) bool { return d.allocs[i].base > a.base })
	d.allocs = append(d.allocs, nil)
	copy(d.allocs[i+1:], d.allocs[i:])
	d.allocs[i] = a
	return a.base, nil
}

// MemFree is the fake cuMemFree.
func (d *Driver) MemFree(p cudadrv.DevPtr) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.ready("cuMemFree_v2"); err != nil {
		return err
	}
	a := d.find(p)
	if a == nil || a.base != p {
		return fail("cuMemFree_v2", cudadrv.ErrInvalidValue)
	}
	if a.ctx.sticky != 0 {
		return fail("cuMemFree_v2", a.ctx.sticky)
	}
	a.ctx.used -= a.size
	i := sort.Search(len(d.allocs), func(i int) bool { return d.allocs[i].base >= p })
	d.allocs = append(d.allocs[:i], d.allocs[i+1:]...)
	return nil
}

// MemHostAlloc is the fake cuMemHostAlloc.
func (d *Driver) MemHostAlloc(size int64, flags uint32) (unsafe.Pointer, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.cur("cuMemHostAlloc"); err != nil {
		return nil, err
	}
	if size <= 0 {
		return nil, fail("cuMemHostAlloc", cudadrv.ErrInvalidValue)
	}
	b := make([]byte, size)
	p := unsafe.Pointer(&b[0])
	d.host[uintptr(p)] = b
	return p, nil
}

// MemFreeHost is the fake cuMemFreeHost.
func (d *Driver) MemFreeHost(p unsafe.Pointer) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.ready("cuMemFreeHost"); err != nil {
		return err
	}
	if _, ok := d.host[uintptr(p)]; !ok {
		return fail("cuMemFreeHost", cudadrv.ErrInvalidValue)
	}
	delete(d.host, uintptr(p))
	return nil
}

// pinned reports whether [p, p+n) lies in one MemHostAlloc allocation;
// under d.mu.
func (d *Driver) pinned(p unsafe.Pointer, n int64) bool {
	for base, b := range d.host {
		if uintptr(p) >= base && uintptr(p)+uintptr(n) <= base+uintptr(len(b)) {
			return true
		}
	}
	return false
}

// devRange returns the device bytes [p, p+n) for fn, or an error; under
// d.mu.
func (d *Driver) devRange(fn string, p cudadrv.DevPtr, n int64) ([]byte, *context, error) {
	a := d.find(p)
	if a == nil || n < 0 || int64(p-a.base)+n > a.size {
		return nil, nil, fail(fn, cudadrv.ErrInvalidValue)
	}
	off := int64(p - a.base)
	return a.data[off : off+n], a.ctx, nil
}

// copyOp checks a copy's stream and enqueues it.
func (d *Driver) copyOp(fn string, sh cudadrv.Stream, host unsafe.Pointer, n int64, devs []cudadrv.DevPtr, run func(dev [][]byte)) error {
	d.mu.Lock()
	if err := d.ready(fn); err != nil {
		d.mu.Unlock()
		return err
	}
	s := d.streams[sh]
	if s == nil {
		d.mu.Unlock()
		return fail(fn, cudadrv.ErrInvalidHandle)
	}
	if s.ctx.sticky != 0 {
		d.mu.Unlock()
		return fail(fn, s.ctx.sticky)
	}
	var bs [][]byte
	for _, p := range devs {
		b, _, err := d.devRange(fn, p, n)
		if err != nil {
			d.mu.Unlock()
			return err
		}
		bs = append(bs, b)
	}
	if host != nil && !d.pinned(host, n) {
		d.pageable++
	}
	d.mu.Unlock()
	if n == 0 {
		return nil
	}
	s.enqueue(d, func() { run(bs) })
	return nil
}

// MemcpyHtoD is the fake cuMemcpyHtoD.
func (d *Driver) MemcpyHtoD(dst cudadrv.DevPtr, src unsafe.Pointer, n int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.cur("cuMemcpyHtoD_v2"); err != nil {
		return err
	}
	b, _, err := d.devRange("cuMemcpyHtoD_v2", dst, n)
	if err != nil {
		return err
	}
	copy(b, unsafe.Slice((*byte)(src), n))
	return nil
}

// MemcpyHtoDAsync is the fake cuMemcpyHtoDAsync.
func (d *Driver) MemcpyHtoDAsync(dst cudadrv.DevPtr, src unsafe.Pointer, n int64, s cudadrv.Stream) error {
	return d.copyOp("cuMemcpyHtoDAsync_v2", s, src, n, []cudadrv.DevPtr{dst}, func(b [][]byte) {
		copy(b[0], unsafe.Slice((*byte)(src), n))
	})
}

// MemcpyDtoHAsync is the fake cuMemcpyDtoHAsync.
func (d *Driver) MemcpyDtoHAsync(dst unsafe.Pointer, src cudadrv.DevPtr, n int64, s cudadrv.Stream) error {
	return d.copyOp("cuMemcpyDtoHAsync_v2", s, dst, n, []cudadrv.DevPtr{src}, func(b [][]byte) {
		copy(unsafe.Slice((*byte)(dst), n), b[0])
	})
}

// MemcpyDtoDAsync is the fake cuMemcpyDtoDAsync.
func (d *Driver) MemcpyDtoDAsync(dst, src cudadrv.DevPtr, n int64, s cudadrv.Stream) error {
	return d.copyOp("cuMemcpyDtoDAsync_v2", s, nil, n, []cudadrv.DevPtr{dst, src}, func(b [][]byte) {
		copy(b[0], b[1])
	})
}

// MemcpyPeerAsync is the fake cuMemcpyPeerAsync.
func (d *Driver) MemcpyPeerAsync(dst cudadrv.DevPtr, dstCtx cudadrv.Context, src cudadrv.DevPtr, srcCtx cudadrv.Context, n int64, s cudadrv.Stream) error {
	const fn = "cuMemcpyPeerAsync"
	d.mu.Lock()
	_, dc, err1 := d.devRange(fn, dst, n)
	_, sc, err2 := d.devRange(fn, src, n)
	ok := err1 == nil && err2 == nil && dc.handle == dstCtx && sc.handle == srcCtx
	if ok && dc != sc {
		direct := 0
		if dc.peers[sc] || sc.peers[dc] {
			direct = 1
		}
		d.peerCopies[direct]++
	}
	d.mu.Unlock()
	if !ok {
		return fail(fn, cudadrv.ErrInvalidValue)
	}
	return d.copyOp(fn, s, nil, n, []cudadrv.DevPtr{dst, src}, func(b [][]byte) {
		copy(b[0], b[1])
	})
}

// StreamCreate is the fake cuStreamCreate.
func (d *Driver) StreamCreate(flags uint32) (cudadrv.Stream, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, err := d.cur("cuStreamCreate")
	if err != nil {
		return 0, err
	}
	s := &stream{ctx: c}
	s.cond = sync.NewCond(&s.mu)
	h := cudadrv.Stream(d.handle())
	d.streams[h] = s
	return h, nil
}

// enqueue adds op to the stream; its goroutine runs the operations in
// order.
func (s *stream) enqueue(d *Driver, op func()) {
	s.mu.Lock()
	s.ops = append(s.ops, op)
	s.busy++
	if !s.run {
		s.run = true
		go s.loop(d.cfg.OpDelay)
	}
	s.mu.Unlock()
}

func (s *stream) loop(delay time.Duration) {
	for {
		s.mu.Lock()
		if len(s.ops) == 0 {
			s.run = false
			s.mu.Unlock()
			return
		}
		op := s.ops[0]
		s.ops = s.ops[1:]
		s.mu.Unlock()
		if delay > 0 {
			time.Sleep(delay)
		}
		op()
		s.mu.Lock()
		s.busy--
		s.cond.Broadcast()
		s.mu.Unlock()
	}
}

// drain waits until every operation enqueued so far is done.
func (s *stream) drain() {
	s.mu.Lock()
	for s.busy > 0 {
		s.cond.Wait()
	}
	s.mu.Unlock()
}

func (d *Driver) stream(fn string, h cudadrv.Stream) (*stream, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.ready(fn); err != nil {
		return nil, err
	}
	s := d.streams[h]
	if s == nil {
		return nil, fail(fn, cudadrv.ErrInvalidHandle)
	}
	return s, nil
}

// StreamSynchronize is the fake cuStreamSynchronize.
func (d *Driver) StreamSynchronize(h cudadrv.Stream) error {
	s, err := d.stream("cuStreamSynchronize", h)
	if err != nil {
		return err
	}
	s.drain()
	return d.sticky("cuStreamSynchronize", s.ctx)
}

// StreamQuery is the fake cuStreamQuery.
func (d *Driver) StreamQuery(h cudadrv.Stream) error {
	s, err := d.stream("cuStreamQuery", h)
	if err != nil {
		return err
	}
	s.mu.Lock()
	busy := s.busy > 0
	s.mu.Unlock()
	if err := d.sticky("cuStreamQuery", s.ctx); err != nil {
		return err
	}
	if busy {
		return fail("cuStreamQuery", cudadrv.ErrNotReady)
	}
	return nil
}

// StreamWaitEvent is the fake cuStreamWaitEvent.
func (d *Driver) StreamWaitEvent(sh cudadrv.Stream, eh cudadrv.Event, flags uint32) error {
	const fn = "cuStreamWaitEvent"
	d.mu.Lock()
	if err := d.ready(fn); err != nil {
		d.mu.Unlock()
		return err
	}
	s, e := d.streams[sh], d.events[eh]
	if s == nil || e == nil {
		d.mu.Unlock()
		return fail(fn, cudadrv.ErrInvalidHandle)
	}
	if s.ctx.sticky != 0 {
		d.mu.Unlock()
		return fail(fn, s.ctx.sticky)
	}
	gen := e.recorded // the record of the time of the call
	d.mu.Unlock()
	s.enqueue(d, func() {
		d.mu.Lock()
		for e.done < gen && !e.dead {
			d.changed.Wait()
		}
		d.mu.Unlock()
	})
	return nil
}

// StreamDestroy is the fake cuStreamDestroy.
func (d *Driver) StreamDestroy(h cudadrv.Stream) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.ready("cuStreamDestroy_v2"); err != nil {
		return err
	}
	s := d.streams[h]
	if s == nil {
		return fail("cuStreamDestroy_v2", cudadrv.ErrInvalidHandle)
	}
	delete(d.streams, h) // its pending work still runs, as the driver's does
	return nil
}

// EventCreate is the fake cuEventCreate.
func (d *Driver) EventCreate(flags uint32) (cudadrv.Event, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, err := d.cur("cuEventCreate")
	if err != nil {
		return 0, err
	}
	h := cudadrv.Event(d.handle())
	d.events[h] = &event{ctx: c, timing: flags&cudadrv.EventDisableTiming == 0}
	return h, nil
}

// EventRecord is the fake cuEventRecord.
func (d *Driver) EventRecord(eh cudadrv.Event, sh cudadrv.Stream) error {
	const fn = "cuEventRecord"
	d.mu.Lock()
	if err := d.ready(fn); err != nil {
		d.mu.Unlock()
		return err
	}
	e, s := d.events[eh], d.streams[sh]
	if e == nil || s == nil {
		d.mu.Unlock()
		return fail(fn, cudadrv.ErrInvalidHandle)
	}
	if e.ctx != s.ctx {
		d.mu.Unlock()
		return fail(fn, cudadrv.ErrInvalidContext)
	}
	if s.ctx.sticky != 0 {
		d.mu.Unlock()
		return fail(fn, s.ctx.sticky)
	}
	e.recorded++
	gen := e.recorded
	d.mu.Unlock()
	s.enqueue(d, func() {
		d.mu.Lock()
		if e.done < gen {
			e.done, e.at = gen, time.Now()
		}
		d.changed.Broadcast()
		d.mu.Unlock()
	})
	return nil
}

// EventSynchronize is the fake cuEventSynchronize.
func (d *Driver) EventSynchronize(h cudadrv.Event) error {
	const fn = "cuEventSynchronize"
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.ready(fn); err != nil {
		return err
	}
	e := d.events[h]
	if e == nil {
		return fail(fn, cudadrv.ErrInvalidHandle)
	}
	gen := e.recorded
	for e.done < gen && !e.dead {
		d.changed.Wait()
	}
	if e.ctx.sticky != 0 {
		return fail(fn, e.ctx.sticky)
	}
	return nil
}

// EventQuery is the fake cuEventQuery.
func (d *Driver) EventQuery(h cudadrv.Event) error {
	const fn = "cuEventQuery"
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.ready(fn); err != nil {
		return err
	}
	e := d.events[h]
	if e == nil {
		return fail(fn, cudadrv.ErrInvalidHandle)
	}
	if e.ctx.sticky != 0 {
		return fail(fn, e.ctx.sticky)
	}
	if e.done < e.recorded {
		return fail(fn, cudadrv.ErrNotReady)
	}
	return nil
}

// EventElapsedTime is the fake cuEventElapsedTime: the time between the
// moments the streams ran the two events' last records, rounded to 0.5 µs
// (the real driver's resolution).
func (d *Driver) EventElapsedTime(start, end cudadrv.Event) (float32, error) {
	const fn = "cuEventElapsedTime"
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.ready(fn); err != nil {
		return 0, err
	}
	s, e := d.events[start], d.events[end]
	if s == nil || e == nil || !s.timing || !e.timing || s.recorded == 0 || e.recorded == 0 {
		return 0, fail(fn, cudadrv.ErrInvalidHandle)
	}
	for _, c := range []*context{s.ctx, e.ctx} {
		if c.sticky != 0 {
			return 0, fail(fn, c.sticky)
		}
	}
	if s.done < s.recorded || e.done < e.recorded {
		return 0, fail(fn, cudadrv.ErrNotReady)
	}
	const res = 500 * time.Nanosecond
	return float32(e.at.Sub(s.at).Round(res).Seconds() * 1e3), nil
}

// EventDestroy is the fake cuEventDestroy.
func (d *Driver) EventDestroy(h cudadrv.Event) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.ready("cuEventDestroy_v2"); err != nil {
		return err
	}
	if _, ok := d.events[h]; !ok {
		return fail("cuEventDestroy_v2", cudadrv.ErrInvalidHandle)
	}
	delete(d.events, h) // a pending record still completes for waits already issued
	return nil
}
