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
	"sync"
	"syscall"
	"time"

	"github.com/goffload/offload/internal/cudadrv"
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
