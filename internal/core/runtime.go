package core

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/goffload/offload/internal/config"
	"github.com/goffload/offload/internal/mapping"
	"github.com/goffload/offload/internal/tracefile"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
)

// Runtime is a started device table.
type Runtime struct {
	Cfg     config.Config
	Log     *config.Logger
	Image   *plugin.Image
	Devices []*Device // numbered 0..n-1
	Initial *Device   // number n

	tasks tasks
	trace *tracefile.Trace // GOFFLOAD_PROFILE's
	ids   atomic.Uint64    // numbers tasks and synchronous constructs

	unseal sync.Once // Stop ends Start's entries.Seal once

	anys atomic.Value // package anyrun's state: Any-tasks' placement, made at the first
}

// Start opens the devices the configuration names and loads the kernel
// image on them.
func Start(cfg config.Config) (*Runtime, error) {
	info := cfg.Info
	if cfg.CheckMaps {
		info |= InfoCheck
	}
	if cfg.Profile != "" {
		// Before the kernel table is sealed: a Start refused here has
		// nothing to undo (it left the table sealed, so that no kernel
		// could be registered again).
		if err := checkWritable(cfg.Profile); err != nil {
			return nil, err
		}
	}
	r := &Runtime{Cfg: cfg, Log: config.NewLogger(info, cfg.InfoOut), Image: entries.Seal()}
	if cfg.Profile != "" {
		r.trace = tracefile.NewTrace()
		if cfg.Tool != nil {
			r.Cfg.Tool = tools{cfg.Tool, r.trace}
		} else {
			r.Cfg.Tool = r.trace
		}
	}
	cfg = r.Cfg
	if cfg.Policy != config.PolicyDisabled {
		if err := r.open(); err != nil {
			r.Stop()
			return nil, err
		}
	}
	n := len(r.Devices)
	r.Initial = &Device{Num: n, Info: initialInfo(), log: r.Log, pool: plugin.NewPool(runtime.NumCPU()), tool: cfg.Tool, ids: &r.ids, stop: plugin.NewStopSignal()}
	for _, d := range r.Devices {
		if d.Unavailable != nil {
			continue
		}
		if err := d.Dev.Load(r.Image, d.Num); err != nil {
			if err := r.unavailable(d, fmt.Errorf("cannot load the kernel image: %w", err)); err != nil {
				r.Stop()
				return nil, err
			}
			continue
		}
		d.Info = d.Dev.Info()
		d.traceOps()
	}
	r.limitTasks()
	if err := r.declareGlobals(); err != nil { // declare target variables (declare.go)
		r.Stop()
		return nil, err
	}
	r.Log.Printf(config.InfoOffload, -1, "OMP_TARGET_OFFLOAD=%s, %d devices, default device %d, initial device %d, image %s with %d kernels",
		cfg.Policy, n, cfg.DefaultDevice, n, r.Image.Digest, len(r.Image.Kernels))
	for _, d := range r.Devices {
		if d.Unavailable != nil {
			r.Log.Printf(config.InfoOffload, d.Num, "unavailable (%s): %v", d.Spec, d.Unavailable)
		} else {
			r.Log.Printf(config.InfoOffload, d.Num, "%s: %s, %d cores, host %s, pid %d", d.Spec, d.Info.Name, d.Info.Cores, d.Info.Host, d.Info.PID)
		}
	}
	return r, nil
}

func initialInfo() plugin.Info {
	host, _ := os.Hostname()
	return plugin.Info{Kind: "initial", Name: "initial device (this process)", Cores: runtime.NumCPU(),
		Arch: runtime.GOARCH, Host: host, PID: os.Getpid()}
}

// open fills r.Devices from GOFFLOAD_DEVICES or by discovery.
func (r *Runtime) open() error {
	if r.Cfg.DevicesSet {
		specs, err := config.ParseDevices(r.Cfg.Devices)
		if err != nil {
			return err
		}
		for _, sp := range specs {
			k, _ := plugin.LookupKind(sp.Kind)
			devs, err := k.Open(sp.Arg)
			if err := r.add(sp.String(), devs, err); err != nil {
				return err
			}
		}
		return nil
	}
	kinds := plugin.Kinds()
	for _, k := range kinds {
		if k.Discover != nil && k.Sole != nil && k.Sole() {
			kinds = []*plugin.Kind{k}
			break
		}
	}
	for _, k := range kinds {
		if k.Discover == nil {
			continue
		}
		devs, err := k.Discover()
		if err := r.add(k.Name, devs, err); err != nil {
			return err
		}
	}
	return nil
}

func (r *Runtime) add(spec string, devs []plugin.Device, err error) error {
	if errors.Is(err, plugin.ErrNoDevices) {
		// A kind with no devices, saying why (no driver, no GPU): nothing
		// to add; an error only if the program demanded them.
		for _, pd := range devs {
			pd.Close()
		}
		if r.Cfg.Policy == config.PolicyMandatory && r.Cfg.DevicesSet {
			return Errorf("goffload: GOFFLOAD_DEVICES item %q: %w: %w", spec, ErrMandatory, err)
		}
		r.Log.Printf(config.InfoOffload, -1, "%s: %v", spec, err)
		return nil
	}
	for _, pd := range devs {
		r.Devices = append(r.Devices, &Device{Num: len(r.Devices), Dev: pd, tool: r.Cfg.Tool, Info: plugin.Info{Kind: strings.SplitN(spec, ":", 2)[0]}, Spec: spec, table: mapping.NewTable(), log: r.Log, ids: &r.ids})
	}
	if errors.Is(err, plugin.ErrBadSpec) || errors.Is(err, plugin.ErrKindEnded) {
		return fmt.Errorf("%w: GOFFLOAD_DEVICES item %q: %w", config.ErrConfig, spec, err)
	}
	if err != nil {
		d := &Device{Num: len(r.Devices), Spec: spec, Info: plugin.Info{Kind: strings.SplitN(spec, ":", 2)[0]}, log: r.Log, ids: &r.ids}
		r.Devices = append(r.Devices, d)
		return r.unavailable(d, fmt.Errorf("cannot open %q: %w", spec, err))
	}
	return nil
}

// unavailable marks d unusable: an error under MANDATORY, a fallback to the
// initial device otherwise.
func (r *Runtime) unavailable(d *Device, why error) error {
	d.Unavailable = why
	if r.Cfg.Policy == config.PolicyMandatory {
		return Errorf("goffload: %s: %w: %w", d.Label(), ErrMandatory, why)
	}
	return nil
}

// Resolve returns the device a construct with device number num runs on,
// following OMP_TARGET_OFFLOAD; fallback reports a fall back to the initial
// device.
func (r *Runtime) Resolve(num int) (d *Device, fallback bool, err error) {
	n := len(r.Devices)
	switch {
	case r.Cfg.Policy == config.PolicyDisabled || num == n:
		return r.Initial, false, nil
	case num < 0 || num > n:
		why := fmt.Errorf("%w: device number %d: %s", ErrNoDevice, num, r.validNumbers())
		if r.Cfg.Policy == config.PolicyMandatory {
			return nil, false, Errorf("goffload: %w (OMP_TARGET_OFFLOAD=MANDATORY)", why)
		}
		r.Log.Printf(config.InfoOffload, num, "%v; running on the initial device", why)
		return r.Initial, true, nil
	}
	d = r.Devices[num]
	if d.Unavailable != nil {
		if r.Cfg.Policy == config.PolicyMandatory {
			return nil, false, Errorf("goffload: %s: %w: %w", d.Label(), ErrMandatory, d.Unavailable)
		}
		r.Log.Printf(config.InfoOffload, num, "unavailable (%v); running on the initial device", d.Unavailable)
		return r.Initial, true, nil
	}
	return d, false, nil
}

func (r *Runtime) validNumbers() string {
	n := len(r.Devices)
	if n == 0 {
		return "there are no devices; 0 is the initial device"
	}
	return fmt.Sprintf("devices are 0 to %d, and %d is the initial device", n-1, n)
}

// Stop is StopContext(context.Background()).
func (r *Runtime) Stop() error { return r.StopContext(context.Background()) }

// StopContext asks the kernels to stop, waits for the work going on,
// synchronizes and closes every device (see stop.go for the way out when
// work does not end). With the table info flag it dumps each present table
// first.
func (r *Runtime) StopContext(ctx context.Context) error {
	defer r.unseal.Do(entries.Unseal)
	var errs []error
	stuck, err := r.endWork(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	for _, d := range r.Devices {
		if d.Dev == nil || stuck[d] {
			continue // its kernels still run in this process: its memory stays
		}
		if r.Log.On(config.InfoDumpTable) {
			d.dumpTable("Host-device pointer mappings at Stop:")
		}
		d.qmu.Lock()
		for _, q := range d.queues {
			if err := q.Queue.Close(); err != nil {
				errs = append(errs, err)
			}
		}
		d.queues = nil
		d.qmu.Unlock()
		if err := d.Dev.Close(); err != nil {
			errs = append(errs, Errorf("goffload: %s: close: %w", d.Label(), err))
		}
	}
	if r.Initial != nil && !stuck[r.Initial] {
		r.Initial.pool.Close()
	}
	r.dropGlobals()
	if r.trace != nil {
		for _, d := range r.Devices {
			r.trace.Name(d.Num, fmt.Sprintf("%s: %s (pid %d)", d.Label(), d.Info.Name, d.Info.PID))
		}
		if r.Initial != nil {
			r.trace.Name(r.Initial.Num, r.Initial.Label()+" (host tasks)")
		}
		if err := r.trace.WriteFile(r.Cfg.Profile); err != nil {
			errs = append(errs, Errorf("goffload: GOFFLOAD_PROFILE: %w", err))
		}
	}
	return errors.Join(errs...)
}

// checkWritable fails Start for a GOFFLOAD_PROFILE path that Stop could
// not write, so that the run is not wasted (issue 34): it opens the file
// for writing, creating it, and removes it again if it was not there.
func checkWritable(path string) error {
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o666)
	if err != nil {
		return fmt.Errorf("%w: GOFFLOAD_PROFILE=%s: the trace could not be written at Stop: %w", config.ErrConfig, path, err)
	}
	f.Close()
	if errors.Is(statErr, os.ErrNotExist) {
		os.Remove(path)
	}
	return nil
}

// Note records a decision of the runtime's about task number task in the
// GOFFLOAD_PROFILE trace, if one is written (Trace.Note).
func (r *Runtime) Note(task uint64, text string) {
	if r.trace != nil {
		r.trace.Note(task, text)
	}
}

// AnyState is the slot package anyrun keeps r's Any-tasks' placement in.
// It is empty until the first Any-task.
func (r *Runtime) AnyState() *atomic.Value { return &r.anys }
