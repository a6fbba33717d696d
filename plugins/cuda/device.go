package cuda

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"

	"github.com/google/btree"

	"github.com/goffload/offload/internal/cudadrv"
	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/internal/ptx"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/devstate"
	"github.com/goffload/offload/plugin/firepoll"
)

// Sizes of the device memory pool.
const (
	// blockAlign is what allocations are rounded up to (cuMemAlloc's
	// alignment): the pool's size classes.
	blockAlign = 512
	// poolThreshold is the largest freed block kept for reuse.
	poolThreshold = 256 << 20
)

// device is one CUDA device: a GPU's primary context.
type device struct {
	drv  cudadrv.Driver
	ord  int // the GPU's ordinal
	cu   cudadrv.Device
	ctx  cudadrv.Context
	info plugin.Info

	mem     memory
	staging stagingPool
	poller  firepoll.Poller // OnFire's
	tr      tracing         // the timing of queue operations (trace.go)

	peerMu sync.Mutex
	peers  map[*device]bool // whether this context may access a device's memory directly (peer.go)

	evmu   sync.Mutex
	evFree []cudadrv.Event     // CUDA events to reuse
	evLive map[*event]struct{} // events whose CUDA event is not released

	st devstate.State // label (read without d.mu), closed, lost (a sticky error: see Lost)

	// emulate makes kernels without PTX run their Go bodies on the host,
	// over copies of their arguments' allocations: for the tests only
	// (the conformance suite's kernels have no PTX).
	emulate bool
	pool    *plugin.Pool

	mu   sync.RWMutex
	num  int
	img  *plugin.Image
	kfns []kernelFn // by kernel index
	mods []cudadrv.Module
	kctx *plugin.KernelCtx // emulation's
}

// kernelFn is a kernel as the device launches it.
type kernelFn struct {
	fn  cudadrv.Function
	err error // why it cannot be launched (fn is 0)
	emu bool  // run the Go body (emulate)
	// bind is the declare target bind kernel (entries.BindKernelName),
	// which a GPU takes as done: a variable's device copy is present
	// memory that PTX kernels are given as an argument (its Go body tells
	// Go kernels the address, and no Go kernel runs on a GPU).
	bind bool
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
		info: plugin.Info{
			Kind: "cuda",
			Name: fmt.Sprintf("%s (GPU %d, sm_%d%d, %d SMs, CUDA driver %d.%d)", name, ord, major, minor, sms,
				version/1000, version%1000/10),
			Cores:  max(sms, 1),
			Memory: total,
			Arch:   fmt.Sprintf("sm_%d%d", major, minor),
			Host:   host,
			PID:    os.Getpid(),
		},
		num:    -1,
		evLive: map[*event]struct{}{},
	}
	d.st.SetLabel(fmt.Sprintf("cuda device (GPU %d)", ord))
	d.mem.init(total)
	return d, nil
}

func (d *device) Info() plugin.Info { return d.info }

// label names the device in errors.
func (d *device) label() string { return d.st.Label() }

// with runs f with the device's context current on the calling goroutine's
// OS thread, locked to it meanwhile.
func (d *device) with(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := d.drv.CtxSetCurrent(d.ctx); err != nil {
		return err
	}
	return f()
}

// Lost reports the sticky error that made the device unusable
// (plugin.LostReporter).
func (d *device) Lost() error { return d.st.Lost() }

// alive returns an error if the device is closed or lost.
func (d *device) alive() error { return d.st.Alive() }

// wrap turns a driver error into the plugin's: it wraps the plugin error
// that matches the CUDA error, and marks the device lost on a sticky one.
func (d *device) wrap(err error) error {
	if err == nil {
		return nil
	}
	switch r := cudadrv.Code(err); {
	case r.Sticky():
		lost := fmt.Errorf("%s: %w: %w: %w (a kernel faulted: the GPU's context is unusable until the program restarts)", d.label(), plugin.ErrDeviceLost, plugin.ErrKernelFailed, err)
		return d.st.Lose(lost)
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

// Load loads the PTX of the image's kernels: each distinct image once, in
// the device's context, and each kernel's entry, whose parameter list it
// checks against the kernel's Go parameters (checkEntry). A kernel with no
// PTX, whose PTX does not load, or whose entry does not take its
// parameters fails when it is launched, not here.
func (d *device) Load(img *plugin.Image, num int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.st.Closed() {
		return fmt.Errorf("%s: %w: device is closed", d.label(), plugin.ErrBadHandle)
	}
	if d.img != nil {
		return fmt.Errorf("%s: %w: the image is loaded already", d.label(), plugin.ErrBadKernel)
	}
	d.num, d.img = num, img
	d.st.SetLabel(fmt.Sprintf("cuda device %d (GPU %d)", num, d.ord))
	if d.emulate {
		d.pool = plugin.NewPool(d.info.Cores)
		d.info.Cores = d.pool.Workers() // what the emulated kernels' loops split over
		d.kctx = plugin.NewKernelCtx(num, d.pool)
	}
	d.kfns = make([]kernelFn, len(img.Kernels))
	type loaded struct {
		mod cudadrv.Module
		err error
		// entries are the parameter lists of the image's entries that
		// ptx.Entries could read.
		entries map[string][]ptx.Param
	}
	mods := map[string]loaded{}
	return d.with(func() error {
		for i, k := range img.Kernels {
			code, ok := k.Code("ptx")
			switch {
			case !ok && k.Name() == entries.BindKernelName && !d.emulate:
				d.kfns[i] = kernelFn{bind: true}
				continue
			case !ok:
				d.kfns[i] = kernelFn{emu: d.emulate, err: d.noCode(k)}
				continue
			}
			m, ok := mods[string(code.Image)]
			if !ok {
				mod, err := d.drv.ModuleLoadData(code.Image)
				m = loaded{mod: mod, err: d.wrap(err)}
				if err == nil {
					d.mods = append(d.mods, mod)
					// An image the driver loads and ptx cannot read
					// (all of it or an entry) goes unchecked.
					m.entries, _ = ptx.Entries(code.Image)
				}
				mods[string(code.Image)] = m
			}
			if m.err != nil {
				d.kfns[i] = kernelFn{err: fmt.Errorf("%s: kernel %q: its PTX does not load: %w", d.label(), k.Name(), m.err)}
				continue
			}
			fn, err := d.drv.ModuleGetFunction(m.mod, code.Entry)
			if err != nil {
				d.kfns[i] = kernelFn{err: noEntry(fmt.Errorf("%s: kernel %q: entry %q of its PTX: %w", d.label(), k.Name(), code.Entry, d.wrap(err)), code.Entry, m.entries)}
				continue
			}
			if params, ok := m.entries[code.Entry]; ok {
				if err := checkEntry(k, code.Entry, params); err != nil {
					d.kfns[i] = kernelFn{err: fmt.Errorf("%s: %w: kernel %q: %w", d.label(), plugin.ErrBadKernel, k.Name(), err)}
					continue
				}
			}
			d.kfns[i] = kernelFn{fn: fn}
		}
		return nil
	})
}

// noCode is the error of launching k, which has no PTX; under d.mu.
func (d *device) noCode(k plugin.Kernel) error {
	return fmt.Errorf("%s: %w: kernel %q has no PTX: a GPU cannot run its Go body (give it device code with offload.Kernel.PTX, or run it on a CPU device): %w", d.label(), plugin.ErrBadKernel, k.Name(), plugin.ErrUnsupported)
}

// kernel returns how the device launches k.
func (d *device) kernel(k plugin.Kernel) (kernelFn, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if err := d.img.Has(k); err != nil {
		return kernelFn{}, fmt.Errorf("%s: %w", d.label(), err)
	}
	kf := d.kfns[k.Index()]
	if kf.fn == 0 && !kf.emu && !kf.bind {
		return kf, kf.err
	}
	return kf, nil
}

// CanLaunch reports whether the device can launch k: it has PTX the
// device loaded (or the emulate mode runs its Go body): plugin.KernelChecker.
func (d *device) CanLaunch(k plugin.Kernel) error {
	_, err := d.kernel(k)
	return err
}

func (d *device) Alloc(size int64) (plugin.Ptr, error) {
	if err := d.alive(); err != nil {
		return 0, err
	}
	p, err := d.mem.alloc(d, size)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", d.label(), err)
	}
	return p, nil
}

func (d *device) Free(p plugin.Ptr) error {
	if err := d.alive(); err != nil {
		return err
	}
	if err := d.mem.free(d, p); err != nil {
		return fmt.Errorf("%s: %w", d.label(), err)
	}
	return nil
}

// CanWait reports whether the device's queues can wait on ev: an event of
// any CUDA device of the same driver (cuStreamWaitEvent waits across
// contexts and GPUs).
func (d *device) CanWait(ev plugin.Event) bool {
	e, ok := ev.(*event)
	return ok && e.d.drv == d.drv
}

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
	q.l.Init((*issuer)(q))
	return q, nil
}

func (d *device) NewEvent() (plugin.Event, error) {
	if err := d.alive(); err != nil {
		return nil, err
	}
	d.evmu.Lock()
	var cu cudadrv.Event
	if n := len(d.evFree); n > 0 {
		cu = d.evFree[n-1]
		d.evFree = d.evFree[:n-1]
	}
	d.evmu.Unlock()
	if cu == 0 {
		if err := d.with(func() (err error) {
			cu, err = d.drv.EventCreate(cudadrv.EventDisableTiming)
			return err
		}); err != nil {
			return nil, fmt.Errorf("%s: cannot create an event: %w", d.label(), d.wrap(err))
		}
	}
	e := &event{d: d, cu: cu, issued: make(chan struct{})}
	d.evmu.Lock()
	d.evLive[e] = struct{}{}
	d.evmu.Unlock()
	return e, nil
}

// maxFreeEvents bounds the CUDA events kept for reuse.
const maxFreeEvents = 256

// releaseEvent takes back e's CUDA event, which nothing enqueued refers to
// any more.
func (d *device) releaseEvent(e *event, cu cudadrv.Event) {
	d.evmu.Lock()
	delete(d.evLive, e)
	keep := len(d.evFree) < maxFreeEvents && d.evLive != nil
	if keep {
		d.evFree = append(d.evFree, cu)
	}
	d.evmu.Unlock()
	if !keep && d.alive() == nil {
		_ = d.drv.EventDestroy(cu)
	}
}

// Close frees everything the device allocated and releases the GPU's
// primary context.
func (d *device) Close() error {
	if !d.st.Close() {
		return nil
	}
	d.mu.Lock() // Load adds modules under it once it has seen the device open
	mods := d.mods
	d.mods = nil
	pool := d.pool
	d.mu.Unlock()
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
	d.evmu.Lock()
	evs := d.evFree
	for e := range d.evLive {
		e.mu.Lock()
		if e.cu != 0 {
			evs = append(evs, e.cu)
			e.cu = 0 // destroyed below
		}
		e.mu.Unlock()
	}
	d.evFree, d.evLive = nil, nil
	d.evmu.Unlock()
	timers, clock := d.tr.close()
	keep(d.with(func() error {
		keep(d.staging.close(d))
		keep(d.mem.close(d))
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

func (m *memory) init(total int64) {
	m.total = total
	m.live = btree.NewG(16, func(a, b allocation) bool { return a.base < b.base })
	m.pool = map[int64][]cudadrv.DevPtr{}
	m.cap = max(total/4, 1<<20)
}

func (m *memory) alloc(d *device, size int64) (plugin.Ptr, error) {
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

// drain frees the pooled blocks, with the context current; it reports
// whether there were any.
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

func (m *memory) free(d *device, p plugin.Ptr) error {
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

// check returns an error unless [p, p+size) lies inside one live
// allocation.
func (m *memory) check(p plugin.Ptr, size int64) error {
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
func (m *memory) close(d *device) error {
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
