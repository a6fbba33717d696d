// Package outside is a CPU device kind that lives outside goffload's module
// and is written only against its public packages: the plugin contract
// (github.com/goffload/offload/plugin), the queues kinds build on
// (github.com/goffload/offload/plugin/opqueue), the device state they
// share (github.com/goffload/offload/plugin/devstate) and Go memory as
// device memory (github.com/goffload/offload/plugin/hostmem). It is the
// proof that a kind needs nothing internal, and the way to write one. It is
// small but complete: device memory is hostmem's, with a capacity (this
// file), queues and events are opqueue's with the device's checks and
// names around them (queue.go), and kernels run on a plugin.Pool with
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
	"strconv"
	"sync"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/devstate"
	"github.com/goffload/offload/plugin/hostmem"
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
		memory:   hostmem.New(0),
	}
	d.cores = d.pool.Workers() // NewPool may cut the count
	d.mem = d.bytes
	d.st.SetLabel("outside device")
	return d
}

type device struct {
	st       devstate.State // label ("outside device 1" once loaded), closed
	pool     *plugin.Pool
	cores    int
	capacity int64
	mem      plugin.Mem // d.bytes, made once (a method value allocates)

	memory  *hostmem.Memory
	allocMu sync.Mutex // orders Allocs, for the capacity

	mu  sync.RWMutex
	img *plugin.Image
	ctx *plugin.KernelCtx // what kernels get: set by Load
}

func (d *device) Info() plugin.Info {
	host, _ := os.Hostname()
	return plugin.Info{
		Kind:   Name,
		Name:   fmt.Sprintf("%s (%d cores)", d.st.Label(), d.cores),
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
	if err := d.st.Alive(); err != nil {
		return err
	}
	d.img = img
	d.st.SetLabel(fmt.Sprintf("outside device %d", num))
	d.ctx = plugin.NewKernelCtx(num, d.pool)
	return nil
}

// kernelCtx checks that k is a kernel of the loaded image and returns the
// context kernels run with.
func (d *device) kernelCtx(k plugin.Kernel) (*plugin.KernelCtx, error) {
	if err := d.st.Alive(); err != nil {
		return nil, err
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.img == nil {
		return nil, fmt.Errorf("%s: %w: no image loaded", d.st.Label(), plugin.ErrBadKernel)
	}
	if k == nil || k.Index() < 0 || k.Index() >= len(d.img.Kernels) || d.img.Kernels[k.Index()] != k {
		return nil, fmt.Errorf("%s: %w: kernel is not in the loaded image", d.st.Label(), plugin.ErrBadKernel)
	}
	return d.ctx, nil
}

func (d *device) Alloc(size int64) (plugin.Ptr, error) {
	if err := d.st.Alive(); err != nil {
		return 0, err
	}
	d.allocMu.Lock() // the check and the allocation as one, against other Allocs
	defer d.allocMu.Unlock()
	if _, _, inUse := d.memory.Stats(); size > d.capacity-inUse {
		return 0, fmt.Errorf("%s: %w: %d bytes with %d of %d in use", d.st.Label(), plugin.ErrOutOfMemory, size, inUse, d.capacity)
	}
	p, err := d.memory.Alloc(size)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", d.st.Label(), err)
	}
	return p, nil
}

func (d *device) Free(p plugin.Ptr) error {
	if err := d.st.Alive(); err != nil {
		return err
	}
	if err := d.memory.Free(p); err != nil {
		return fmt.Errorf("%s: %w", d.st.Label(), err)
	}
	return nil
}

// bytes is the memory [p, p+size) (plugin.Mem).
func (d *device) bytes(p plugin.Ptr, size int64) ([]byte, error) {
	b, err := d.memory.Bytes(p, size)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", d.st.Label(), err)
	}
	return b, nil
}

func (d *device) NewQueue() (plugin.Queue, error) {
	if err := d.st.Alive(); err != nil {
		return nil, err
	}
	return &queue{d: d, q: opqueue.New()}, nil
}

func (d *device) NewEvent() (plugin.Event, error) {
	if err := d.st.Alive(); err != nil {
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
	if !d.st.Close() {
		return nil
	}
	d.memory.Reset()
	d.pool.Close() // and with it the bindings of declare target variables
	return nil
}
