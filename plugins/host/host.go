// Package host is the host device kind: CPU devices inside the calling
// process. By default a device's memory is its own, separate from the
// program's buffers. So copy semantics are real: a missing "from" is visible.
// Blocks of a MiB and more are mapped outside the Go heap, and copies are
// made in chunks. So a big copy never holds up the garbage collector, nor
// with it the program. Kernels run on the device's worker pool, one worker
// per core.
//
// With GOFFLOAD_HOST_MEMORY=shared (Config.Shared), a device shares the
// program's memory instead, as OpenMP's unified shared memory has it. It
// implements plugin.HostSharer. So maps neither allocate nor copy, and
// kernels work on the program's buffers in place.
//
// Spec in GOFFLOAD_DEVICES: "host" (one device) or "host:N". When
// GOFFLOAD_DEVICES is unset, one host device is discovered.
package host

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"

	"github.com/goffload/offload/internal/workpool"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/devstate"
	"github.com/goffload/offload/plugin/hostmem"
	"github.com/goffload/offload/plugin/opqueue"
	"github.com/goffload/offload/plugin/optrace"
)

// DefaultPoolThreshold is the largest freed block a host device keeps for
// reuse unless GOFFLOAD_HOST_POOL_THRESHOLD says otherwise.
const DefaultPoolThreshold = 256 << 20

func init() {
	plugin.RegisterKind(plugin.Kind{
		Name:     "host",
		Open:     openSpec,
		Discover: func() ([]plugin.Device, error) { return openSpec("") },
		Order:    100,
		Help:     "host[:N]  N CPU devices in this process (default 1)",
	})
}

func openSpec(arg string) ([]plugin.Device, error) {
	n := 1
	if arg != "" {
		v, err := strconv.Atoi(arg)
		if err != nil || v < 1 || v > 1024 {
			return nil, fmt.Errorf("%w: host:%s: want host:N with N a device count from 1 to 1024", plugin.ErrBadSpec, arg)
		}
		n = v
	}
	cfg, err := ConfigFromEnv()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", plugin.ErrBadSpec, err)
	}
	devs := make([]plugin.Device, n)
	for i := range devs {
		devs[i] = New(cfg)
	}
	return devs, nil
}

// Config sets up a host device.
type Config struct {
	// Cores is the number of workers a kernel's loop is split over.
	Cores int
	// PoolThreshold is the largest freed block kept for reuse; 0 disables
	// the pool.
	PoolThreshold int64
	// Shared makes the device share the program's memory. The device is then
	// a plugin.HostSharer, whose kernels work on mapped buffers in place.
	Shared bool
}

// ConfigFromEnv reads three variables. GOFFLOAD_HOST_CORES defaults to the
// number of CPUs and runs from 1 to workpool.MaxWorkers().
// GOFFLOAD_HOST_POOL_THRESHOLD is in bytes, defaults to DefaultPoolThreshold,
// and runs from 0 to the machine's memory. GOFFLOAD_HOST_MEMORY is separate
// (the default) or shared. A value out of range is an error naming the
// variable, the value and the range.
func ConfigFromEnv() (Config, error) {
	cfg := Config{Cores: min(runtime.NumCPU(), workpool.MaxWorkers()), PoolThreshold: DefaultPoolThreshold}
	if s := os.Getenv("GOFFLOAD_HOST_CORES"); s != "" {
		v, err := workpool.ParseWorkers("GOFFLOAD_HOST_CORES", s)
		if err != nil {
			return cfg, err
		}
		cfg.Cores = v
	}
	if s := os.Getenv("GOFFLOAD_HOST_POOL_THRESHOLD"); s != "" {
		v, err := hostmem.ParseThreshold("GOFFLOAD_HOST_POOL_THRESHOLD", s)
		if err != nil {
			return cfg, err
		}
		cfg.PoolThreshold = v
	}
	if s := os.Getenv("GOFFLOAD_HOST_MEMORY"); s != "" {
		v, err := hostmem.ParseSharing("GOFFLOAD_HOST_MEMORY", s)
		if err != nil {
			return cfg, err
		}
		cfg.Shared = v
	}
	return cfg, nil
}

type device struct {
	st    devstate.State // label ("host device 1"), closed
	num   int
	cores int
	// mem is the device's memory. Kernels and copies pin it while they touch
	// it (hostmem.Memory.Pin), as its big blocks are mappings.
	mem    *hostmem.Memory
	bytes  plugin.Mem // mem.Bytes, made once (a method value allocates)
	pool   *plugin.Pool
	shared bool // a sharedDevice: maps lend it the program's buffers

	// tr is where timed operations are reported (see Trace).
	tr optrace.Tracer

	mu  sync.RWMutex
	img *plugin.Image
	ctx *plugin.KernelCtx // what kernels get: set by Load
	// stop is what ctx.Done() of its kernels says (CancelKernels).
	stop *plugin.StopSignal
}

// Trace sets where the queues' tagged operations report their times. The host
// device's clock is the host's.
func (d *device) Trace(f func(plugin.OpTime)) { d.tr.Trace(f) }

// New returns a host device. Cores below 1 mean the number of CPUs; more
// than workpool.MaxWorkers() are cut to that. With cfg.Shared the device
// is also a plugin.HostSharer.
func New(cfg Config) plugin.Device {
	if cfg.Cores < 1 {
		cfg.Cores = runtime.NumCPU()
	}
	cfg.Cores = min(cfg.Cores, workpool.MaxWorkers())
	d := &device{
		num:   -1,
		cores: cfg.Cores,
		mem:   hostmem.NewMapped(cfg.PoolThreshold),
		pool:  plugin.NewPool(cfg.Cores),
	}
	d.bytes = d.mem.Bytes
	d.st.SetLabel("host device")
	if cfg.Shared {
		d.shared = true
		return &sharedDevice{d}
	}
	return d
}

// sharedDevice is a host device that shares the program's memory.
type sharedDevice struct{ *device }

// ShareHost lends the device the program's buffer b (plugin.HostSharer). The
// device address is b's own, and Free of it ends the lending.
func (d *sharedDevice) ShareHost(b []byte) (plugin.Ptr, error) {
	if err := d.st.Alive(); err != nil {
		return 0, err
	}
	p, err := d.mem.Share(b)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", d.st.Label(), err)
	}
	return p, nil
}

// hostDevice returns the host device that d is, if it is one.
func hostDevice(d plugin.Device) (*device, bool) {
	switch d := d.(type) {
	case *device:
		return d, true
	case *sharedDevice:
		return d.device, true
	}
	return nil, false
}

func (d *device) Info() plugin.Info {
	host, _ := os.Hostname()
	return plugin.Info{
		Kind:   "host",
		Name:   fmt.Sprintf("Go host device (%d cores%s)", d.cores, d.memoryNote()),
		Cores:  d.cores,
		Memory: hostmem.MachineMemory(),
		Arch:   runtime.GOARCH,
		Host:   host,
		PID:    os.Getpid(),
	}
}

// memoryNote says in the device's name whether it shares the host's memory.
func (d *device) memoryNote() string {
	if d.shared {
		return ", shared memory"
	}
	return ""
}

func (d *device) Load(img *plugin.Image, num int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.st.Alive(); err != nil {
		return err
	}
	d.img, d.num = img, num
	d.st.SetLabel(fmt.Sprintf("host device %d", num))
	d.stop = plugin.NewStopSignal()
	d.ctx = plugin.NewKernelCtx(num, d.pool).WithStop(d.stop)
	return nil
}

// CancelKernels asks the device's kernels to stop: their Ctx's Done
// channel closes (plugin.Canceler).
func (d *device) CancelKernels() {
	d.mu.RLock()
	s := d.stop
	d.mu.RUnlock()
	if s != nil {
		s.Stop()
	}
}

// LimitTasks bounds how many of the device's kernels run at once
// (plugin.TaskLimiter). A launch beyond n waits on its queue for a slot.
func (d *device) LimitTasks(n int) { d.pool.SetKernelLimit(n) }

// Abandon makes every operation not begun fail with why, and every later one
// (plugin.Abandoner). Stop gave up on a kernel of the device that does not
// return. Nothing queued behind it may touch host memory once Stop has
// returned. The kernel goes on, on device memory, which stays.
func (d *device) Abandon(why error) {
	d.st.Lose(fmt.Errorf("%s: %w: %w", d.st.Label(), plugin.ErrDeviceLost, why))
	d.CancelKernels()
}

// loaded checks that k belongs to the image this device loaded.
func (d *device) loaded(k plugin.Kernel) error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if err := d.img.Has(k); err != nil {
		return fmt.Errorf("%s: %w", d.st.Label(), err)
	}
	return nil
}

func (d *device) Alloc(size int64) (plugin.Ptr, error) {
	if err := d.st.Alive(); err != nil {
		return 0, err
	}
	p, err := d.mem.Alloc(size)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", d.st.Label(), err)
	}
	return p, nil
}

func (d *device) Free(p plugin.Ptr) error {
	if err := d.st.Alive(); err != nil {
		return err
	}
	if err := d.mem.Free(p); err != nil {
		return fmt.Errorf("%s: %w", d.st.Label(), err)
	}
	return nil
}

func (d *device) NewQueue() (plugin.Queue, error) {
	if err := d.st.Alive(); err != nil {
		return nil, err
	}
	q := &queue{d: d, q: opqueue.New()}
	q.exited = q.setExited
	return q, nil
}

func (d *device) NewEvent() (plugin.Event, error) {
	if err := d.st.Alive(); err != nil {
		return nil, err
	}
	e := &event{d: d}
	e.ev = &e.own
	return e, nil
}

// CanWait reports whether this device's queues can wait on ev. Any host
// device's event can be waited on, since they all live in this process.
func (d *device) CanWait(ev plugin.Event) bool {
	_, ok := ev.(*event)
	return ok
}

func (d *device) Close() error {
	if !d.st.Close() {
		return nil
	}
	d.pool.Close() // and with it the declare target variables' bindings
	d.mem.Reset()
	return nil
}
