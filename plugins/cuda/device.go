package cuda

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"

	"github.com/google/btree"

	"github.com/goffload/offload/internal/cudadrv"
	"github.com/goffload/offload/internal/ptx"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/gpukind"
)

// Sizes of the device memory pool.
const (
	// blockAlign is what allocations are rounded up to: cuMemAlloc's
	// alignment. These are the pool's size classes.
	blockAlign = 512
	// poolThreshold is the largest freed block kept for reuse.
	poolThreshold = 256 << 20
)

// device is one CUDA device: a GPU's primary context.
type device struct {
	drv cudadrv.Driver
	ord int // the GPU's ordinal
	cu  cudadrv.Device
	ctx cudadrv.Context

	mem     memory
	staging stagingPool
	tr      tracing // the timing of queue operations (trace.go)

	peerMu sync.Mutex
	peers  map[*device]bool // whether this context may access a device's memory directly (peer.go)

	// Device is the state (label, closed, lost: a sticky error), the events
	// and the loaded image. The image is under Mu, with mods.
	gpukind.Device[cudadrv.Event, *ptxFn]
	evmu   sync.Mutex
	evFree []cudadrv.Event // CUDA events to reuse

	mods []cudadrv.Module

	// globals are where the declare target variables are, for generated
	// PTX (gocode.go).
	globals gpukind.Globals
}

// newDevice opens GPU ord: it retains the GPU's primary context.
func newDevice(drv cudadrv.Driver, ord, version int) (*device, error) {
	cu, err := drv.DeviceGet(ord)
	if err != nil {
		return nil, fmt.Errorf("GPU %d: %w", ord, err)
	}
	name, err := drv.DeviceGetName(cu)
	if err != nil {
		return nil, fmt.Errorf("GPU %d: %w", ord, err)
	}
	attr := func(a cudadrv.Attribute) int {
		if err != nil {
			return 0
		}
		var v int
		v, err = drv.DeviceGetAttribute(a, cu)
		return v
	}
	major, minor, sms := attr(cudadrv.AttrComputeCapabilityMajor), attr(cudadrv.AttrComputeCapabilityMinor), attr(cudadrv.AttrMultiprocessorCount)
	if err != nil {
		return nil, fmt.Errorf("GPU %d (%s): %w", ord, name, err)
	}
	total, err := drv.DeviceTotalMem(cu)
	if err != nil {
		return nil, fmt.Errorf("GPU %d (%s): %w", ord, name, err)
	}
	ctx, err := drv.DevicePrimaryCtxRetain(cu)
	if err != nil {
		return nil, fmt.Errorf("GPU %d (%s): cannot open its context: %w", ord, name, err)
	}
	host, _ := os.Hostname()
	d := &device{
		drv: drv, ord: ord, cu: cu, ctx: ctx,
	}
	d.Desc = plugin.Info{
		Kind: "cuda",
		Name: fmt.Sprintf("%s (GPU %d, sm_%d%d, %d SMs, CUDA driver %d.%d)", name, ord, major, minor, sms,
			version/1000, version%1000/10),
		Cores:  max(sms, 1),
		Memory: total,
		Arch:   fmt.Sprintf("sm_%d%d", major, minor),
		Host:   host,
		PID:    os.Getpid(),
	}
	d.Init(&d.mem, (*events)(d), drv) // cuStreamWaitEvent waits across contexts and GPUs
	d.St.SetLabel(fmt.Sprintf("cuda device (GPU %d)", ord))
	d.mem.init(d, total)
	return d, nil
}

// label names the device in errors.
func (d *device) label() string { return d.St.Label() }

// with runs f with the device's context current on the calling goroutine's OS
// thread. The goroutine is locked to the thread meanwhile.
func (d *device) with(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := d.drv.CtxSetCurrent(d.ctx); err != nil {
		return err
	}
	return f()
}

// alive returns an error if the device is closed or lost.
func (d *device) alive() error { return d.St.Alive() }

// wrap turns a driver error into the plugin's. It wraps the plugin error that
// matches the CUDA error, and marks the device lost on a sticky one.
func (d *device) wrap(err error) error {
	if err == nil {
		return nil
	}
	switch r := cudadrv.Code(err); {
	case r.Sticky():
		lost := fmt.Errorf("%s: %w: %w: %w (a kernel faulted: the GPU's context is unusable until the program restarts)", d.label(), plugin.ErrDeviceLost, plugin.ErrKernelFailed, err)
		return d.St.Lose(lost)
	case r == cudadrv.ErrOutOfMemory:
		return fmt.Errorf("%w: %w", plugin.ErrOutOfMemory, err)
	case r == cudadrv.ErrInvalidPTX || r == cudadrv.ErrUnsupportedPTX || r == cudadrv.ErrNoBinaryForGPU ||
		r == cudadrv.ErrInvalidImage || r == cudadrv.ErrNotFound || r == cudadrv.ErrJITCompilerNotFound ||
		r == cudadrv.ErrLaunchOutOfResources:
		return fmt.Errorf("%w: %w", plugin.ErrBadKernel, err)
	case r == cudadrv.ErrInvalidHandle || r == cudadrv.ErrContextIsDestroyed:
		return fmt.Errorf("%w: %w", plugin.ErrBadHandle, err)
	}
	return err
}

// Load loads the PTX of the image's kernels: each distinct image once, in the
// device's context. It loads each kernel's entry too. It checks the entry's
// parameter list against the kernel's Go parameters (checkEntry). Some
// kernels fail when they are launched, not here. They are those with no PTX,
// whose PTX does not load, or whose entry does not take their parameters.
func (d *device) Load(img *plugin.Image, num int) error {
	type loaded struct {
		mod cudadrv.Module
		err error
		// entries are the parameter lists of the image's entries that
		// ptx.Entries could read.
		entries map[string][]ptx.Param
	}
	mods := map[string]loaded{}
	return d.with(func() error {
		return d.Device.Load(img, num, fmt.Sprintf("cuda device %d (GPU %d)", num, d.ord), ptxFormat, func(k plugin.Kernel, code plugin.DeviceCode) gpukind.Kernel[*ptxFn] {
			m, ok := mods[string(code.Image)]
			if !ok {
				mod, err := d.drv.ModuleLoadData(code.Image)
				m = loaded{mod: mod, err: d.wrap(err)}
				if err == nil {
					d.mods = append(d.mods, mod) // under d.Mu
					// An image the driver loads and ptx cannot read goes
					// unchecked, whether all of it or an entry.
					m.entries, _ = ptx.Entries(code.Image)
				}
				mods[string(code.Image)] = m
			}
			if m.err != nil {
				return gpukind.Kernel[*ptxFn]{Err: fmt.Errorf("%s: kernel %q: its PTX does not load: %w", d.label(), k.Name(), m.err)}
			}
			fn, err := d.drv.ModuleGetFunction(m.mod, code.Entry)
			if err != nil {
				return gpukind.Kernel[*ptxFn]{Err: noEntry(fmt.Errorf("%s: kernel %q: entry %q of its PTX: %w", d.label(), k.Name(), code.Entry, d.wrap(err)), code.Entry, m.entries)}
			}
			pf := &ptxFn{fn: fn, entry: code.Entry}
			if code.Generated {
				if pf.gen, err = gpukind.NewGenCode(code, num, "generated PTX"); err != nil {
					return gpukind.Kernel[*ptxFn]{Err: fmt.Errorf("%s: %w: kernel %q: %w", d.label(), plugin.ErrBadKernel, k.Name(), err)}
				}
			}
			if params, ok := m.entries[code.Entry]; ok {
				if pf.gen != nil {
					err = checkGenerated(k, code.Entry, pf.gen, params)
				} else {
					pf.offsets, err = checkEntry(k, code.Entry, params)
				}
				if err != nil {
					return gpukind.Kernel[*ptxFn]{Err: fmt.Errorf("%s: %w: kernel %q: %w", d.label(), plugin.ErrBadKernel, k.Name(), err)}
				}
			}
			return gpukind.Kernel[*ptxFn]{Fn: pf}
		})
	})
}

// ptxFn is a kernel's PTX entry as the device launches it.
type ptxFn struct {
	fn    cudadrv.Function
	entry string
	// offsets is how many global offsets the entry takes after the Go
	// parameters. It is 0, 1 (x) or 3 (x, y, z) (see offsetParams).
	offsets int
	// gen is generated PTX's sites, variables and device number (gocode.go).
	// It is nil for hand-written PTX.
	gen *gpukind.GenCode
}

// ptxFormat is the cuda kind's device code.
var ptxFormat = gpukind.Format{Key: "ptx", Name: "PTX", Device: "a GPU", Method: "offload.Kernel.PTX"}

func (d *device) NewQueue() (plugin.Queue, error) {
	if err := d.alive(); err != nil {
		return nil, err
	}
	var s cudadrv.Stream
	if err := d.with(func() (err error) {
		s, err = d.drv.StreamCreate(cudadrv.StreamNonBlocking)
		return err
	}); err != nil {
		return nil, fmt.Errorf("%s: cannot create a queue: %w", d.label(), d.wrap(err))
	}
	q := &queue{d: d, stream: s}
	q.Init(&d.Device, (*issuer)(q), q, &d.tr.Tracer)
	return q, nil
}

// Close frees everything the device allocated and releases the GPU's
// primary context.
func (d *device) Close() error {
	if !d.St.Close() {
		return nil
	}
	d.Mu.Lock() // Load adds modules under it once it has seen the device open
	mods := d.mods
	d.mods = nil
	_, pool := d.Kernels.Close()
	d.Mu.Unlock()
	if pool != nil {
		pool.Close() // and with it the declare target variables' bindings
	}
	lost := d.Lost() != nil
	var errs []error
	keep := func(err error) {
		if err != nil && !lost {
			errs = append(errs, err)
		}
	}
	evs := d.Events.Close() // destroyed below
	d.evmu.Lock()
	evs = append(evs, d.evFree...)
	d.evFree = nil
	d.evmu.Unlock()
	timers, clock := d.tr.close()
	keep(d.with(func() error {
		keep(d.staging.close(d))
		keep(d.mem.close())
		for _, cu := range evs {
			keep(d.drv.EventDestroy(cu))
		}
		for _, cu := range timers {
			keep(d.drv.EventDestroy(cu))
		}
		if clock != 0 {
			keep(d.drv.StreamDestroy(clock))
		}
		for _, m := range mods {
			keep(d.drv.ModuleUnload(m))
		}
		return nil
	}))
	keep(d.drv.DevicePrimaryCtxRelease(d.cu))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%s: close: %w", d.label(), err)
	}
	return nil
}

// memory is a device's allocations and its pool of freed blocks.
type memory struct {
	d      *device
	mu     sync.Mutex
	total  int64
	live   *btree.BTreeG[allocation] // by base
	pool   map[int64][]cudadrv.DevPtr
	pooled int64
	cap    int64 // the most bytes pooled
}

// allocation is a live allocation: size bytes at base, in a block of
// block bytes.
type allocation struct {
	base        plugin.Ptr
	size, block int64
}

func (m *memory) init(d *device, total int64) {
	m.d, m.total = d, total
	m.live = btree.NewG(16, func(a, b allocation) bool { return a.base < b.base })
	m.pool = map[int64][]cudadrv.DevPtr{}
	m.cap = max(total/4, 1<<20)
}

// Alloc allocates size bytes (gpukind.Memory).
func (m *memory) Alloc(size int64) (plugin.Ptr, error) {
	d := m.d
	if size < 0 {
		return 0, fmt.Errorf("%w: allocation of %d bytes", plugin.ErrBadPointer, size)
	}
	if size > m.total {
		return 0, fmt.Errorf("%w: %d bytes requested, the GPU has %d", plugin.ErrOutOfMemory, size, m.total)
	}
	block := (max(size, 1) + blockAlign - 1) &^ (blockAlign - 1)
	m.mu.Lock()
	if ps := m.pool[block]; len(ps) > 0 {
		p := ps[len(ps)-1]
		m.pool[block] = ps[:len(ps)-1]
		m.pooled -= block
		m.live.ReplaceOrInsert(allocation{base: plugin.Ptr(p), size: size, block: block})
		m.mu.Unlock()
		return plugin.Ptr(p), nil
	}
	m.mu.Unlock()
	var p cudadrv.DevPtr
	err := d.with(func() (err error) {
		p, err = d.drv.MemAlloc(block)
		if cudadrv.Code(err) == cudadrv.ErrOutOfMemory && m.drain(d) {
			p, err = d.drv.MemAlloc(block)
		}
		return err
	})
	if err != nil {
		return 0, d.wrap(err)
	}
	m.mu.Lock()
	m.live.ReplaceOrInsert(allocation{base: plugin.Ptr(p), size: size, block: block})
	m.mu.Unlock()
	return plugin.Ptr(p), nil
}

// drain frees the pooled blocks, with the context current. It reports whether
// there were any.
func (m *memory) drain(d *device) bool {
	m.mu.Lock()
	pool := m.pool
	m.pool, m.pooled = map[int64][]cudadrv.DevPtr{}, 0
	m.mu.Unlock()
	any := false
	for _, ps := range pool {
		for _, p := range ps {
			_ = d.drv.MemFree(p)
			any = true
		}
	}
	return any
}

// Free frees the allocation at p (gpukind.Memory).
func (m *memory) Free(p plugin.Ptr) error {
	d := m.d
	m.mu.Lock()
	a, ok := m.live.Get(allocation{base: p})
	if !ok {
		m.mu.Unlock()
		return fmt.Errorf("%w: free of %#x, which is not the address of a live allocation", plugin.ErrBadPointer, uint64(p))
	}
	m.live.Delete(a)
	if a.block <= poolThreshold && m.pooled+a.block <= m.cap {
		m.pool[a.block] = append(m.pool[a.block], cudadrv.DevPtr(p))
		m.pooled += a.block
		m.mu.Unlock()
		return nil
	}
	m.mu.Unlock()
	return d.wrap(d.with(func() error { return d.drv.MemFree(cudadrv.DevPtr(p)) }))
}

// Check returns an error unless [p, p+size) lies inside one live
// allocation (gpukind.Memory).
func (m *memory) Check(p plugin.Ptr, size int64) error {
	if _, err := m.find(p, size); err != nil {
		return err
	}
	return nil
}

// find returns the live allocation holding [p, p+size).
func (m *memory) find(p plugin.Ptr, size int64) (allocation, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var a allocation
	found := false
	m.live.DescendLessOrEqual(allocation{base: p}, func(x allocation) bool {
		a, found = x, true
		return false
	})
	if size < 0 || !found || uint64(p-a.base) > uint64(a.size) || uint64(size) > uint64(a.size)-uint64(p-a.base) {
		return allocation{}, fmt.Errorf("%w: [%#x, +%d bytes) is not inside a live allocation", plugin.ErrBadPointer, uint64(p), size)
	}
	return a, nil
}

// close frees every allocation and pooled block, with the context current.
func (m *memory) close() error {
	d := m.d
	m.drain(d)
	m.mu.Lock()
	var ps []plugin.Ptr
	m.live.Ascend(func(a allocation) bool { ps = append(ps, a.base); return true })
	m.live.Clear(false)
	m.mu.Unlock()
	var errs []error
	for _, p := range ps {
		if err := d.drv.MemFree(cudadrv.DevPtr(p)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
