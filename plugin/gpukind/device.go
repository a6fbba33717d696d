package gpukind

import (
	"fmt"
	"sync"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/devstate"
)

// Memory is a device's allocator, as Device's Alloc and Free call it. The
// kind promises errors in the plugin contract's terms. They lack the device's
// label: Device adds it.
type Memory interface {
	Alloc(size int64) (plugin.Ptr, error)
	Free(p plugin.Ptr) error
	// Check returns an error unless [p, p+size) lies inside one live
	// allocation.
	Check(p plugin.Ptr, size int64) error
}

// Device is what a GPU kind's devices share: the device's state, its events,
// and its loaded image (Kernels, under Mu). A kind's device embeds one, made
// ready by Init. From it the device gets plugin.Device's Alloc, Free and
// NewEvent. It gets plugin.KernelChecker, plugin.ForeignEventWaiter and
// plugin.LostReporter too. The kind adds Info, Load, NewQueue and Close.
type Device[H, F comparable] struct {
	St     devstate.State // the label, closed, lost
	Desc   plugin.Info    // what Info returns
	Events Events[H]
	// Emulate makes Load run the Go bodies of kernels without device code on
	// the host (Emulate), for tests. Stop, if not nil, is their contexts'
	// stop signal (plugin.Canceler). Set both before Load.
	Emulate bool
	Stop    *plugin.StopSignal
	// Mu guards Kernels, and what the kind loads with it.
	Mu      sync.RWMutex
	Kernels Kernels[F]

	mem Memory
}

// Init makes d ready. mem allocates its memory, and drv is its events'
// driver. domain says whose events its queues can wait on (see Events.Init).
func (d *Device[H, F]) Init(mem Memory, drv EventDriver[H], domain any) {
	d.mem = mem
	d.Kernels.Num = -1
	d.Events.Init(drv, &d.St, domain)
}

// Info describes the device: Desc.
func (d *Device[H, F]) Info() plugin.Info { return d.Desc }

// Format names a kind's device code, for Load and its errors.
type Format struct {
	Key    string // its format in plugin.Kernel.Code: "ptx", "opencl"
	Name   string // its name in errors: "PTX", "OpenCL C"
	Device string // the device in errors: "a GPU", "an OpenCL device"
	Method string // how a program gives it: "offload.Kernel.PTX"
}

// Load loads img as the device's image, for the kind's plugin.Device.Load.
// The device is number num of the program, labelled label from then on. Under
// Mu, Load starts the emulate mode if Emulate is set; Desc.Cores becomes its
// workers. Then it sets each kernel. One with code of format f gets it from
// load. The declare target bind kernel without code is set as Bind (unless
// emulated). Any other kernel without code runs its Go body in the emulate
// mode. Else its launches fail with an error saying it has no code. That
// error wraps plugin.ErrBadKernel and plugin.ErrUnsupported.
func (d *Device[H, F]) Load(img *plugin.Image, num int, label string, f Format, load func(k plugin.Kernel, code plugin.DeviceCode) Kernel[F]) error {
	d.Mu.Lock()
	defer d.Mu.Unlock()
	if err := d.Kernels.Load(&d.St, img, num); err != nil {
		return err
	}
	d.St.SetLabel(label)
	if d.Emulate {
		d.Desc.Cores = d.Kernels.StartEmulation(d.Desc.Cores, d.Stop) // what emulated loops split over
	}
	for i, k := range img.Kernels {
		code, ok := k.Code(f.Key)
		switch {
		case ok:
			d.Kernels.Set(i, load(k, code))
		case k.Name() == entries.BindKernelName && !d.Emulate:
			d.Kernels.Set(i, Kernel[F]{Bind: true})
		default:
			d.Kernels.Set(i, Kernel[F]{Emulate: d.Emulate, Err: fmt.Errorf("%s: %w: kernel %q has no %s: %s cannot run its Go body (give it device code with %s, or run it on a CPU device): %w",
				label, plugin.ErrBadKernel, k.Name(), f.Name, f.Device, f.Method, plugin.ErrUnsupported)})
		}
	}
	return nil
}

// Lost reports the sticky error that made the device unusable
// (plugin.LostReporter).
func (d *Device[H, F]) Lost() error { return d.St.Lost() }

// Alloc allocates size bytes of device memory.
func (d *Device[H, F]) Alloc(size int64) (plugin.Ptr, error) {
	if err := d.St.Alive(); err != nil {
		return 0, err
	}
	p, err := d.mem.Alloc(size)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", d.St.Label(), err)
	}
	return p, nil
}

// Free frees the allocation at p.
func (d *Device[H, F]) Free(p plugin.Ptr) error {
	if err := d.St.Alive(); err != nil {
		return err
	}
	if err := d.mem.Free(p); err != nil {
		return fmt.Errorf("%s: %w", d.St.Label(), err)
	}
	return nil
}

// NewEvent returns a new, unrecorded event.
func (d *Device[H, F]) NewEvent() (plugin.Event, error) { return d.Events.NewEvent() }

// Alive returns an error if the device is closed or lost.
func (d *Device[H, F]) Alive() error { return d.St.Alive() }

// CanWait reports whether the device's queues can wait on ev
// (plugin.ForeignEventWaiter). They can for an event of a device of the same
// domain.
func (d *Device[H, F]) CanWait(ev plugin.Event) bool { return d.Events.CanWait(ev) }

// Kernel returns how the device launches k, or why it cannot.
func (d *Device[H, F]) Kernel(k plugin.Kernel) (Kernel[F], error) {
	d.Mu.RLock()
	defer d.Mu.RUnlock()
	return d.Kernels.Lookup(&d.St, k)
}

// CanLaunch reports whether the device can launch k (plugin.KernelChecker).
// It can if it loaded device code for k, or if the emulate mode runs k's Go
// body.
func (d *Device[H, F]) CanLaunch(k plugin.Kernel) error {
	_, err := d.Kernel(k)
	return err
}
