package offload

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/goffload/offload/internal/anyrun"
	"github.com/goffload/offload/internal/config"
	"github.com/goffload/offload/internal/core"
	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
	_ "github.com/goffload/offload/plugins/host"   // the host device kind
	_ "github.com/goffload/offload/plugins/remote" // device processes: the local, tcp and mpi kinds
	"github.com/goffload/offload/tool"
)

var (
	startMu sync.Mutex
	current atomic.Pointer[core.Runtime]
)

// An Option changes the configuration Start reads from the environment.
type Option struct {
	apply func(*config.Config) error
}

// WithDevices sets the device list, overriding GOFFLOAD_DEVICES: for
// example "host" or "host:2". An empty string means no devices.
func WithDevices(spec string) Option {
	return Option{func(c *config.Config) error { c.Devices, c.DevicesSet = spec, true; return nil }}
}

// WithOffload sets the offload policy, overriding OMP_TARGET_OFFLOAD:
// "MANDATORY", "DISABLED" or "DEFAULT".
func WithOffload(policy string) Option {
	return Option{func(c *config.Config) (err error) { c.Policy, err = config.ParsePolicy(policy); return err }}
}

// WithDefaultDevice sets the default device number, overriding
// OMP_DEFAULT_DEVICE.
func WithDefaultDevice(n int) Option {
	return Option{func(c *config.Config) error {
		if n < 0 {
			return fmt.Errorf("%w: default device %d: want a non-negative device number", ErrConfig, n)
		}
		c.DefaultDevice = n
		return nil
	}}
}

// WithInfo sets what the info output shows, overriding GOFFLOAD_INFO, and
// where it goes: w, or standard error if w is nil. flags holds names such
// as "copies,mapping" or "all", or a number of LIBOMPTARGET_INFO bits.
// With "" it shows nothing; GOFFLOAD_CHECK's reports still go to w.
//
//	var info bytes.Buffer
//	err := offload.Start(offload.WithInfo("copies", &info))
func WithInfo(flags string, w io.Writer) Option {
	return Option{func(c *config.Config) (err error) {
		c.InfoOut = w
		c.Info, err = config.ParseInfo(flags)
		return err
	}}
}

// WithTool makes t receive the runtime's events, the role OMPT plays.
// The events are constructs beginning and ending, copies and mapping
// changes, and kernel launches and waits. A tool.DeviceOpTool also gets the
// devices' own times of their operations. Package tool declares the events.
func WithTool(t tool.Tool) Option {
	return Option{func(c *config.Config) error { c.Tool = t; return nil }}
}

// WithProfile writes a trace of the run to path at Stop, overriding
// GOFFLOAD_PROFILE. The trace is in Chrome's Trace Event Format: open it in
// Perfetto or chrome://tracing. A path that cannot be written fails Start.
func WithProfile(path string) Option {
	return Option{func(c *config.Config) error { c.Profile = path; return nil }}
}

// WithDeviceTasks bounds how many tasks (kernels) run at once on one
// device, overriding GOFFLOAD_DEVICE_TASKS. The spec is "N" for every kind,
// or KIND=N items ("host=2", "4,host=1"). The default, "", sets no bound.
// A launch beyond the bound waits on its device's queue for a running
// kernel to end, not in the program.
// The host kind takes the bound from here. Device processes take
// GOFFLOAD_DEVICE_TASKS from their own environment; local devices inherit
// this process's. See docs/environment.md for why there is no bound by
// default.
func WithDeviceTasks(spec string) Option {
	return Option{func(c *config.Config) (err error) { c.DeviceTasks, err = config.ParseDeviceTasks(spec); return err }}
}

// Start reads the configuration from the environment (then opts), opens the
// devices and loads the kernels on them. It is the first call in main.
// Calling it again before Stop is an error.
//
// In a device process Start does not return: it serves the host, then ends
// the process. A device process is one that a host started, or one started
// with GOFFLOAD_ROLE=device.
func Start(opts ...Option) error {
	core.ServeDevice()
	startMu.Lock()
	defer startMu.Unlock()
	if current.Load() != nil {
		return core.Errorf("goffload: Start called twice: %w", ErrConfig)
	}
	cfg, err := config.ConfigFromEnv()
	if err != nil {
		return core.Errorf("goffload: %w", err)
	}
	for _, o := range opts {
		if o.apply == nil {
			continue
		}
		if err := o.apply(&cfg); err != nil {
			return core.Errorf("goffload: %w", err)
		}
	}
	rt, err := core.Start(cfg)
	if err != nil {
		if !strings.HasPrefix(err.Error(), "goffload:") {
			err = core.Errorf("goffload: %w", err)
		}
		return err
	}
	current.Store(rt)
	return nil
}

// Stop ends the runtime. It asks running kernels to stop: their Ctx's Done
// channel closes. It waits for the work going on: tasks, and constructs
// that went on after their context ended. Then it releases every device.
// Constructs after Stop return ErrNotStarted. Start may be called again
// after Stop.
//
// Stop cannot hang on a kernel that does not stop. Work may still be going
// on GOFFLOAD_STOP_GRACE (10s by default) after Stop began. Stop then kills
// the device processes that still have work, and their pending operations
// fail with ErrDeviceLost. It returns an error that wraps
// context.DeadlineExceeded and names them.
//
// A kernel on a goroutine of this process (a host device, the initial
// device) cannot be killed. Stop returns the same error naming it and
// leaves it running. It does not close the kernel's device, but abandons
// it: the task's Wait returns an error wrapping ErrDeviceLost and
// context.DeadlineExceeded, and nothing queued behind the kernel runs.
// So no copy writes into the program's memory once Stop has returned; only
// the kernel goes on, on its device's memory. StopContext is Stop with a
// context that ends the wait sooner.
//
// On the host rank of an MPI job, Stop also tells the device ranks to exit.
// It finalizes MPI, as an MPI program must before it exits. MPI cannot
// start again, so a later Start that would open MPI devices fails with an
// error wrapping ErrConfig. Such a Start is one under the launcher with
// the default devices, or one naming mpi. It fails under every offload policy but
// DISABLED: falling back to the initial device would run the job's work on
// the host rank without a word. A Start naming other devices
// (WithDevices("host:2")) works.
//
// Called from inside a task (host work, see Async.Go), Stop returns an
// error wrapping ErrInTask and stops nothing.
func Stop() error { return StopContext(context.Background()) }

// StopContext is Stop that also stops waiting when ctx ends.
// The work still going on then is ended as at the end of the grace period:
// device processes are killed, and kernels of this process left running.
// The error wraps ctx's error. It names what was still running, on which
// devices.
func StopContext(ctx context.Context) error {
	if core.InTask() {
		return core.Errorf("goffload: Stop: %w", ErrInTask)
	}
	if ctx == nil {
		return nilCtx("StopContext")
	}
	startMu.Lock()
	defer startMu.Unlock()
	rt := current.Load()
	var err error
	if rt != nil {
		// What Any-tasks wrote, back in the program's memory before the
		// devices go.
		err = anyrun.AnyHandback(rt, ctx, false)
	}
	rt = current.Swap(nil)
	if rt != nil {
		if serr := rt.StopContext(ctx); err == nil {
			err = serr
		} else if serr != nil {
			err = errors.Join(err, serr)
		}
	}
	for _, k := range plugin.Kinds() {
		if k.Finish == nil {
			continue
		}
		if ferr := k.Finish(); err == nil && ferr != nil {
			err = core.Errorf("goffload: %w", ferr)
		}
	}
	return err
}

func runtimeOrErr() (*core.Runtime, error) {
	rt := current.Load()
	if rt == nil {
		if core.Serving() {
			return nil, core.Errorf("goffload: %w: this process serves as a device (pid %d): the runtime runs in the host's process, and a kernel running here cannot launch, map, copy or wait", ErrNotStarted, os.Getpid())
		}
		return nil, core.Errorf("goffload: %w: call offload.Start first", ErrNotStarted)
	}
	return rt, nil
}

// NumDevices is the number of devices, not counting the initial device
// (omp_get_num_devices). It is 0 before Start and under
// OMP_TARGET_OFFLOAD=DISABLED.
func NumDevices() int {
	rt := current.Load()
	if rt == nil {
		return 0
	}
	return len(rt.Devices)
}

// Device is a device by number.
// A number that does not name a device is resolved when it is used,
// following OMP_TARGET_OFFLOAD. It is an error under MANDATORY, and the
// initial device under DEFAULT and DISABLED.
type Device struct {
	num    int
	ctx    context.Context // see WithContext
	ctxSet bool            // WithContext was called (with nil: an error at each construct)
	dm     defaultmap      // see Defaultmap
	// geo is the num_teams and thread_limit clauses (clauses.go). clauseErr
	// is the first of the launch clauses that cannot be used (clauses.go's,
	// Defaultmap's): it fails every launch.
	geo       plugin.Geometry
	clauseErr error
}

// On returns device number n (the device clause of OpenMP constructs).
func On(n int) Device { return Device{num: n} }

// Default returns the default device: OMP_DEFAULT_DEVICE, 0 if unset.
func Default() Device {
	rt := current.Load()
	if rt == nil {
		return Device{}
	}
	return Device{num: rt.Cfg.DefaultDevice}
}

// Initial returns the initial device: the calling process itself, where a
// kernel runs directly on the program's memory (omp_get_initial_device).
func Initial() Device { return Device{num: NumDevices()} }

// Num is the device number.
func (d Device) Num() int { return d.num }

// IsInitial reports whether d is the initial device.
func (d Device) IsInitial() bool { return d.num == NumDevices() }

// String is "device N", or "Any()".
func (d Device) String() string {
	if d.IsAny() {
		return "Any()"
	}
	return fmt.Sprintf("device %d", d.num)
}

// resolve finds the runtime device d stands for.
func (d Device) resolve() (*core.Device, bool, error) {
	rt, err := runtimeOrErr()
	if err != nil {
		return nil, false, err
	}
	if d.IsAny() {
		return nil, false, core.Errorf("goffload: Any(): %w: Any() names no one device: it takes target tasks (Run, Nowait launches), EnterData(To(x)) and Update(From(x)), not this construct", ErrBadArgument)
	}
	return rt.Resolve(d.num)
}

// DeviceInfo describes a device.
type DeviceInfo struct {
	Num     int    // device number
	Kind    string // "host", "initial", …
	Name    string
	Cores   int
	Memory  int64  // bytes, 0 if unknown
	Arch    string // GOARCH of the device, or the GPU architecture
	Host    string // host name of the machine it is on
	PID     int    // process serving it, 0 if none
	Serves  string // the kind of device that process drives for it ("opencl"), empty if its CPUs
	Spec    string // the GOFFLOAD_DEVICES item it came from
	Initial bool   // it is the initial device
}

// Info describes the device. Its error depends on the device:
//   - for a number that is not a device, it wraps ErrNoDevice, whatever the
//     offload policy;
//   - for a device that could not be opened, it wraps ErrMandatory with the
//     cause under OMP_TARGET_OFFLOAD=MANDATORY, and ErrUnavailable otherwise
//     (the device's constructs run on the initial device);
//   - for a device that was lost (its process died, its link broke), Info
//     returns the description and an error wrapping ErrDeviceLost with the
//     cause.
func (d Device) Info() (DeviceInfo, error) {
	info, err := d.info()
	return info, err
}

func (d Device) info() (DeviceInfo, error) {
	rt, err := runtimeOrErr()
	if err != nil {
		return DeviceInfo{}, err
	}
	var cd *core.Device
	switch {
	case d.num == len(rt.Devices):
		cd = rt.Initial
	case d.num < 0 || d.num > len(rt.Devices):
		return DeviceInfo{}, core.Errorf("goffload: %w: device number %d (there are %d devices)", ErrNoDevice, d.num, len(rt.Devices))
	default:
		cd = rt.Devices[d.num]
		if cd.Unavailable != nil {
			why := ErrUnavailable
			if rt.Cfg.Policy == config.PolicyMandatory {
				why = ErrMandatory
			}
			return DeviceInfo{}, core.Errorf("goffload: %s: %w: %w", cd.Label(), why, cd.Unavailable)
		}
	}
	i := cd.Info
	info := DeviceInfo{Num: cd.Num, Kind: i.Kind, Name: i.Name, Cores: i.Cores, Memory: i.Memory, Arch: i.Arch,
		Host: i.Host, PID: i.PID, Serves: i.Serves, Spec: cd.Spec, Initial: cd.IsInitial()}
	if !cd.IsInitial() {
		if lost := cd.Lost(); lost != nil {
			if errors.Is(lost, plugin.ErrDeviceLost) {
				return info, core.Errorf("goffload: %s (pid %d): %w", cd.Label(), i.PID, lost)
			}
			return info, core.Errorf("goffload: %s (pid %d): %w: %w", cd.Label(), i.PID, ErrDeviceLost, lost)
		}
	}
	return info, nil
}

// Errors returned by the runtime, wrapped with detail; compare with
// errors.Is. Each is the value the runtime's packages and the device kinds
// wrap, so an error from any of them matches. A message says "goffload: "
// once, at its start, also where it quotes another of the runtime's errors.
var (
	// ErrNotStarted: a construct before Start or after Stop.
	ErrNotStarted = core.ErrNotStarted
	// ErrConfig: an environment variable or option that cannot be used.
	ErrConfig = config.ErrConfig
	// ErrNoDevice: a device number that does not exist.
	ErrNoDevice = core.ErrNoDevice
	// ErrMandatory: OMP_TARGET_OFFLOAD=MANDATORY and the device cannot run
	// the construct.
	ErrMandatory = core.ErrMandatory
	// ErrUnavailable: Info of a device that could not be opened, under an
	// offload policy that is not MANDATORY: its constructs run on the
	// initial device.
	ErrUnavailable = core.ErrUnavailable
	// ErrNotPresent: a present modifier on a buffer that is not mapped.
	ErrNotPresent = core.ErrNotPresent
	// ErrExtension: a section that partly overlaps a mapping. An explicit
	// map clause would extend the mapping (libomptarget: "explicit
	// extension not allowed"); the error of an implicit map (a slice passed
	// bare), a target update, a target exit data or Associate says which
	// it was ("update of a range that is only partly mapped", …).
	ErrExtension = core.ErrExtension
	// ErrBadMap: a map clause that the construct does not allow, or a value
	// that cannot be mapped.
	ErrBadMap = core.ErrBadMap
	// ErrBadArgument: a kernel argument or memory routine argument of the
	// wrong kind.
	ErrBadArgument = core.ErrBadArgument
	// ErrKernelSignature: a kernel function that cannot be offloaded, or a
	// duplicate kernel name.
	ErrKernelSignature = entries.ErrKernelSignature
	// ErrKernelFailed: a kernel that failed on its device (it panicked or
	// called runtime.Goexit); errors.As finds a *KernelPanic with the panic
	// value and stack.
	ErrKernelFailed = plugin.ErrKernelFailed
	// ErrDeviceLost: a device that stopped working.
	ErrDeviceLost = plugin.ErrDeviceLost
	// ErrBadPointer: a device pointer outside any live allocation.
	ErrBadPointer = plugin.ErrBadPointer
)

// MapError is the error of a map clause or data routine that cannot be
// done. It names the device, the buffer and what was expected.
// errors.As finds one in the error of the construct or routine, in a task's
// error, and in the Err of a tool.TargetEvent. errors.Is matches its cause.
// Package plugin declares it, beside the errors it wraps.
type MapError = plugin.MapError

// KernelPanic is the error of a kernel that panicked, or called
// runtime.Goexit, on its device: the initial device, a host device or a
// device process. errors.As finds one.
// Its text is one line: the kernel, where it panicked and the panic value.
// Its Stack field holds the stack of the goroutine that panicked, without
// the runtime's, reflect's and goffload's frames.
// It wraps ErrKernelFailed. Where the kernel ran in this process and the
// panic value is an error, it wraps that value too; Recovered returns the
// value.
type KernelPanic = plugin.KernelPanic

// nilCtx is the error of a call given a nil context.Context: every call
// that takes a context returns it (wrapping ErrBadArgument), as net/http's
// NewRequestWithContext does, instead of panicking or taking nil for "no
// context" (issue 34).
func nilCtx(call string) error {
	return core.Errorf("goffload: %s: %w: nil context.Context (use context.Background() or context.TODO())", call, ErrBadArgument)
}
