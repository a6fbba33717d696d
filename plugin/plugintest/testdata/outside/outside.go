// Package outside is a CPU device kind that lives outside goffload's module
// and is written only against its public packages: the plugin contract
// (github.com/goffload/offload/plugin) and the queues kinds build on
// (github.com/goffload/offload/plugin/opqueue). It is the proof that a kind
// needs nothing internal, and the way to write one. It is small but
// complete: device memory is Go memory at synthetic addresses (this file),
// queues and events are opqueue's with the device's checks and names
// around them (queue.go), and kernels run on a plugin.Pool with
// plugin.Kernel.Launch.
//
// Spec in GOFFLOAD_DEVICES: "outside" (one device) or "outside:N".
// Optional capabilities: plugin.ForeignEventWaiter (every outside device
// waits on every outside device's events: they share the process),
// plugin.FireNotifier and plugin.InlineQueue.
package outside

import (
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"sync"
	"unsafe"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/opqueue"
)

// Name is the kind's name, the scheme of its GOFFLOAD_DEVICES items.
const Name = "outside"

// DefaultMemory is a device's memory unless Config says otherwise.
const DefaultMemory = 1 << 30

func init() {
	plugin.RegisterKind(plugin.Kind{
		Name: Name,
		Open: openSpec,
		Help: "outside[:N]  N CPU devices of the out-of-module example kind (default 1)",
	})
}

func openSpec(arg string) ([]plugin.Device, error) {
	n := 1
	if arg != "" {
		v, err := strconv.Atoi(arg)
		if err != nil || v < 1 || v > 64 {
			return nil, fmt.Errorf("%w: %s:%s: want %s:N with N a device count from 1 to 64", plugin.ErrBadSpec, Name, arg, Name)
		}
		n = v
	}
	devs := make([]plugin.Device, n)
	for i := range devs {
		devs[i] = New(Config{})
	}
	return devs, nil
}

// Config sets up a device.
type Config struct {
	// Cores is the number of workers a kernel's loops split over (0: the
	// number of CPUs).
	Cores int
	// Memory is the device's memory in bytes (0: DefaultMemory). An Alloc
	// beyond it fails with plugin.ErrOutOfMemory, before any Go memory is
	// asked for: Go cannot recover from running out of memory.
	Memory int64
}

// New returns a device, not loaded yet.
func New(cfg Config) plugin.Device {
	if cfg.Cores < 1 {
		cfg.Cores = runtime.NumCPU()
	}
	if cfg.Memory <= 0 {
		cfg.Memory = DefaultMemory
	}
	d := &device{
		pool:     plugin.NewPool(cfg.Cores),
		capacity: cfg.Memory,
		name:     "outside device",
		next:     firstBase,
	}
	d.cores = d.pool.Workers() // NewPool may cut the count
	d.mem = d.bytes
	return d
}

// firstBase is the first synthetic address: not 0, so that no allocation
// is at the null address.
const firstBase plugin.Ptr = 0x10_0000_0000

// allocation is one block of device memory: size bytes at base, in buf
// (which has at least one byte, so that a zero-sized allocation has an
// address inside it).
type allocation struct {
	base plugin.Ptr
	size int64
	buf  []byte
}

type device struct {
	pool     *plugin.Pool
	cores    int
	capacity int64
	mem      plugin.Mem // d.bytes, made once (a method value allocates)

	mu     sync.RWMutex
	name   string
	img    *plugin.Image
	ctx    *plugin.KernelCtx // what kernels get: set by Load
	closed bool
	allocs []*allocation // sorted by base: bases only grow
	next   plugin.Ptr    // where the next allocation starts
	inUse  int64
}

// label names the device in errors: "outside device 1" once loaded.
func (d *device) label() string {
	d.mu.RLock()
	defer d.mu.RUnlock()
	return d.name
}

func (d *device) Info() plugin.Info {
	host, _ := os.Hostname()
	return plugin.Info{
		Kind:   Name,
		Name:   fmt.Sprintf("%s (%d cores)", d.label(), d.cores),
		Cores:  d.cores,
		Memory: d.capacity,
		Arch:   runtime.GOARCH,
		Host:   host,
		PID:    os.Getpid(),
	}
}

func (d *device) Load(img *plugin.Image, num int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return fmt.Errorf("%s: %w: device is closed", d.name, plugin.ErrBadHandle)
	}
	d.img = img
	d.name = fmt.Sprintf("outside device %d", num)
	d.ctx = plugin.NewKernelCtx(num, d.pool)
	return nil
}

// alive returns an error wrapping plugin.ErrBadHandle once the device is
// closed.
func (d *device) alive() error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return fmt.Errorf("%s: %w: device is closed", d.name, plugin.ErrBadHandle)
	}
	return nil
}

// kernelCtx checks that k is a kernel of the loaded image and returns the
// context kernels run with.
func (d *device) kernelCtx(k plugin.Kernel) (*plugin.KernelCtx, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return nil, fmt.Errorf("%s: %w: device is closed", d.name, plugin.ErrBadHandle)
	}
	if d.img == nil {
		return nil, fmt.Errorf("%s: %w: no image loaded", d.name, plugin.ErrBadKernel)
	}
	if k == nil || k.Index() < 0 || k.Index() >= len(d.img.Kernels) || d.img.Kernels[k.Index()] != k {
		return nil, fmt.Errorf("%s: %w: kernel is not in the loaded image", d.name, plugin.ErrBadKernel)
	}
	return d.ctx, nil
}

func (d *device) Alloc(size int64) (plugin.Ptr, error) {
	if size < 0 {
		return 0, fmt.Errorf("%s: %w: allocation of a negative size %d", d.label(), plugin.ErrBadPointer, size)
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return 0, fmt.Errorf("%s: %w: device is closed", d.name, plugin.ErrBadHandle)
	}
	if size > d.capacity-d.inUse {
		defer d.mu.Unlock()
		return 0, fmt.Errorf("%s: %w: %d bytes with %d of %d in use", d.name, plugin.ErrOutOfMemory, size, d.inUse, d.capacity)
	}
	d.inUse += size // taken now, so that concurrent Allocs cannot overrun
	d.mu.Unlock()

	// Words, not bytes, so that the memory is aligned for any element type
	// a kernel's slice may have.
	words := make([]uint64, (max(size, 1)+7)/8)
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), 8*len(words))[:max(size, 1)]

	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return 0, fmt.Errorf("%s: %w: device is closed", d.name, plugin.ErrBadHandle)
	}
	a := &allocation{base: d.next, size: size, buf: buf}
	// The next allocation starts past this one and a gap, 64-byte aligned:
	// a range that runs past an allocation's end never lands in another.
	d.next += plugin.Ptr((max(size, 1)+63)&^63 + 64)
	d.allocs = append(d.allocs, a)
	return a.base, nil
}

// find returns the index of the allocation p is the base of, or -1; under
// d.mu.
func (d *device) find(p plugin.Ptr) int {
	i := sort.Search(len(d.allocs), func(i int) bool { return d.allocs[i].base >= p })
	if i < len(d.allocs) && d.allocs[i].base == p {
		return i
	}
	return -1
}

func (d *device) Free(p plugin.Ptr) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return fmt.Errorf("%s: %w: device is closed", d.name, plugin.ErrBadHandle)
	}
	i := d.find(p)
	if i < 0 {
		return fmt.Errorf("%s: %w: free of %#x, which is not the start of a live allocation", d.name, plugin.ErrBadPointer, uint64(p))
	}
	d.inUse -= d.allocs[i].size
	d.allocs = append(d.allocs[:i], d.allocs[i+1:]...)
	return nil
}

// bytes returns the memory [p, p+size), which must lie inside one live
// allocation (plugin.Mem). A zero-sized range keeps its address: the slice
// has room behind it where the allocation does.
func (d *device) bytes(p plugin.Ptr, size int64) ([]byte, error) {
	if size < 0 {
		return nil, fmt.Errorf("%s: %w: negative size %d at %#x", d.label(), plugin.ErrBadPointer, size, uint64(p))
	}
	d.mu.RLock()
	// The last allocation whose base is at or below p.
	i := sort.Search(len(d.allocs), func(i int) bool { return d.allocs[i].base > p }) - 1
	var a *allocation
	if i >= 0 {
		a = d.allocs[i]
	}
	d.mu.RUnlock()
	if a == nil || p >= a.base+plugin.Ptr(len(a.buf)) {
		return nil, fmt.Errorf("%s: %w: %#x is not inside a live allocation", d.label(), plugin.ErrBadPointer, uint64(p))
	}
	off := int64(p - a.base)
	if size > a.size-off { // not off+size, which can overflow
		return nil, fmt.Errorf("%s: %w: range %#x+%d runs past the end of the allocation at %#x (%d bytes)", d.label(), plugin.ErrBadPointer, uint64(p), size, uint64(a.base), a.size)
	}
	if size == 0 {
		return a.buf[off:off:len(a.buf)], nil
	}
	return a.buf[off : off+size : off+size], nil
}

func (d *device) NewQueue() (plugin.Queue, error) {
	if err := d.alive(); err != nil {
		return nil, err
	}
	return &queue{d: d, q: opqueue.New()}, nil
}

func (d *device) NewEvent() (plugin.Event, error) {
	if err := d.alive(); err != nil {
		return nil, err
	}
	return &event{d: d, Event: opqueue.NewEvent()}, nil
}

// CanWait reports whether this device's queues can wait on ev
// (plugin.ForeignEventWaiter): any outside device's event, since they all
// live in this process.
func (d *device) CanWait(ev plugin.Event) bool {
	_, ok := ev.(*event)
	return ok
}

func (d *device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.allocs, d.inUse = nil, 0
	d.mu.Unlock()
	d.pool.Close() // and with it the bindings of declare target variables
	return nil
}
