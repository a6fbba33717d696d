// Package core is goffload's device-agnostic runtime. It holds the device
// table. It lowers target constructs and tasks to plugin queue operations. It
// issues what each device's present table (package mapping) plans. Its
// settings are package config's. offload.Any's mechanics are package anyrun's,
// on this package's exported API.
//
// runtime.go holds Start, Stop, the tools and a process's roles. device.go
// holds a device and its queues. op.go holds the Op a construct is lowered to,
// and the errors. target.go holds target constructs and their clauses.
// mapping.go issues the present table's plans (and GOFFLOAD_CHECK). memory.go
// holds device memory routines, allocation and declare target variables.
// task.go holds the Task and what recovery keeps. spawn.go makes and enqueues
// a task, and says how it waits for each predecessor. complete.go holds a
// task's end, host waits and taskwait. deps.go holds the dependence history as
// plain state. graph.go holds a recorded task graph. replay.go holds its
// replays, as one task or as one call per device.
package core

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goffload/offload/internal/config"
	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/internal/mapping"
	"github.com/goffload/offload/internal/tracefile"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/tool"
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
	if err := r.declareGlobals(); err != nil { // declare target variables (memory.go)
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
	entries.ReleaseIdleRunners()
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

// checkWritable fails Start for a GOFFLOAD_PROFILE path that Stop could not
// write. So the run is not wasted (issue 34). It opens the file for writing,
// creating it, and removes it again if it was not there.
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

// ServeDevice serves as a device of each kind that finds this process is one
// of its device processes. It ends the process then. Otherwise it returns at
// once. offload.Start and role.ServeDevice call it.
func ServeDevice() {
	for _, k := range plugin.Kinds() {
		if k.ServeIfDevice != nil {
			k.ServeIfDevice(entries.Current())
		}
	}
}

// Serving reports whether this process serves as a device of some kind.
func Serving() bool {
	for _, k := range plugin.Kinds() {
		if k.Serving != nil && k.Serving() {
			return true
		}
	}
	return false
}

// tools sends every event to each of a list of tools.
type tools []tool.Tool

func (ts tools) TargetBegin(e tool.TargetEvent) {
	for _, t := range ts {
		t.TargetBegin(e)
	}
}

func (ts tools) TargetEnd(e tool.TargetEvent) {
	for _, t := range ts {
		t.TargetEnd(e)
	}
}

func (ts tools) DataOp(e tool.DataEvent) {
	for _, t := range ts {
		t.DataOp(e)
	}
}

func (ts tools) KernelLaunch(e tool.KernelEvent) {
	for _, t := range ts {
		t.KernelLaunch(e)
	}
}

func (ts tools) Wait(e tool.WaitEvent) {
	for _, t := range ts {
		t.Wait(e)
	}
}

// DeviceOp sends e to the tools that take device operations.
func (ts tools) DeviceOp(e tool.DeviceOpEvent) {
	for _, t := range ts {
		if dt, ok := t.(tool.DeviceOpTool); ok {
			dt.DeviceOp(e)
		}
	}
}

// wantOps reports whether one of the tools takes device operations.
func (ts tools) wantOps() bool {
	for _, t := range ts {
		if _, ok := t.(tool.DeviceOpTool); ok {
			return true
		}
	}
	return false
}

// afterKill bounds the wait for the work of killed devices to fail.
const afterKill = 5 * time.Second

// endWork is how Stop gets out of the work going on. It asks every kernel to
// stop: their Ctx's Done closes (plugin.Canceler). Then it waits for the tasks
// and the constructs that went on in the background. It waits until ctx ends
// or the grace period (Config.StopGrace) passes. Work still going on then is
// ended by force where it can be. Device processes are killed (plugin.Killer),
// which fails their pending work. A kernel running on a goroutine of this
// process cannot be ended (the host kind, the initial device). Its device is
// reported in stuck, not closed: its memory stays while the kernel may use it.
// The error names it. The error also names every device killed.
func (r *Runtime) endWork(ctx context.Context) (stuck map[*Device]bool, err error) {
	for _, d := range r.Devices {
		if c, ok := d.Dev.(plugin.Canceler); ok && d.Dev != nil {
			c.CancelKernels()
		}
	}
	if r.Initial != nil && r.Initial.stop != nil {
		r.Initial.stop.Stop()
	}
	grace := r.Cfg.StopGrace // ConfigFromEnv read GOFFLOAD_STOP_GRACE
	if grace <= 0 {
		grace = config.DefaultStopGrace
	}
	gctx, cancel := context.WithTimeout(ctx, grace)
	defer cancel()
	werr := r.Taskwait(gctx)
	if gctx.Err() == nil {
		if werr != nil {
			r.Log.Printf(config.InfoOffload, -1, "a task ended with an error at Stop: %v", werr)
		}
		return nil, nil
	}
	why := fmt.Sprintf("work still going on %v after Stop asked its kernels to stop (GOFFLOAD_STOP_GRACE)", grace)
	if ctx.Err() != nil {
		why = fmt.Sprintf("work still going on when Stop's context ended (%v)", ctx.Err())
	}
	var msgs []string
	killed := false
	for d, ops := range r.running() {
		k, ok := d.Dev.(plugin.Killer)
		if !ok || d.Dev == nil {
			continue
		}
		k.Kill(fmt.Errorf("killed by Stop: %s", why))
		killed = true
		msgs = append(msgs, fmt.Sprintf("%s: killed (running %s)", d.Label(), strings.Join(ops, ", ")))
	}
	if killed {
		kctx, cancel := context.WithTimeout(context.Background(), afterKill)
		r.Taskwait(kctx) // the killed devices' work fails at once
		cancel()
	}
	cause := context.DeadlineExceeded
	if ctx.Err() != nil {
		cause = ctx.Err()
	}
	stuck = map[*Device]bool{}
	for d, ops := range r.running() {
		stuck[d] = true
		if a, ok := d.Dev.(plugin.Abandoner); ok && d.Dev != nil {
			a.Abandon(fmt.Errorf("abandoned by Stop: %w: %s", cause, why))
		}
		msgs = append(msgs, fmt.Sprintf("%s: still running %s (a kernel on a goroutine of this process cannot be killed: it goes on until it returns, its device is not closed, its tasks fail as abandoned and nothing after it copies to the program's memory)", d.Label(), strings.Join(ops, ", ")))
	}
	r.abandon(stuck, cause, why)
	slices.Sort(msgs)
	return stuck, Errorf("goffload: Stop: %w: %s: %s", cause, why, strings.Join(msgs, "; "))
}

// abandon completes the tasks still live on the devices of stuck with an
// error. The error says Stop gave up on them, wrapping cause and
// plugin.ErrDeviceLost. So their Wait returns it at once. Their work's own
// end, whenever it comes, changes nothing then (completeNext). Their devices
// ran nothing after the kernel (plugin.Abandoner). Host work and kernels of
// the initial device run on the program's memory. Their tasks fail the same
// way, but what they write themselves they write.
func (r *Runtime) abandon(stuck map[*Device]bool, cause error, why string) {
	ts := &r.tasks
	ts.mu.Lock()
	var live []*Task
	for t := range ts.live.all {
		d := t.dev
		if d == nil {
			d = r.Initial
		}
		if stuck[d] {
			live = append(live, t)
		}
	}
	ts.mu.Unlock()
	slices.SortFunc(live, func(a, b *Task) int { return cmp.Compare(a.ID, b.ID) })
	for _, t := range live {
		where := "host work"
		if t.dev != nil {
			where = t.dev.Label()
		}
		r.complete(t, Errorf("goffload: %s: task %d (%s) abandoned by Stop: %w: %w (%s): nothing it copies back reaches the program's memory",
			where, t.ID, t.Name, plugin.ErrDeviceLost, cause, why), nil)
	}
}

// running returns the devices with work still going on, and what. That is the
// synchronous constructs that went on in the background, and the tasks not
// completed. Host work counts on the initial device.
func (r *Runtime) running() map[*Device][]string {
	out := map[*Device][]string{}
	all := append(slices.Clone(r.Devices), r.Initial)
	for _, d := range all {
		if d == nil {
			continue
		}
		d.bgmu.Lock()
		for c, op := range d.bg {
			select {
			case <-c:
			default:
				out[d] = append(out[d], op)
			}
		}
		d.bgmu.Unlock()
	}
	ts := &r.tasks
	ts.mu.Lock()
	for t := range ts.live.all {
		d := t.dev
		if d == nil {
			d = r.Initial
		}
		if d != nil {
			name := t.Name
			if name == "" {
				name = fmt.Sprintf("task %d", t.ID)
			}
			out[d] = append(out[d], "task "+strings.TrimPrefix(name, "task "))
		}
	}
	ts.mu.Unlock()
	for d := range out {
		slices.Sort(out[d])
		out[d] = slices.Compact(out[d])
	}
	return out
}

// constructStop returns the stop signal of a synchronous construct bound
// to ctx: its kernels' Ctx.Done closes when ctx ends. nil when ctx never
// ends. release ends the binding once the construct is over (or has gone
// on in the background: ctx ended, and the signal stopped).
func constructStop(ctx context.Context) (*plugin.StopSignal, func()) {
	if ctx == nil || ctx.Done() == nil {
		return nil, func() {}
	}
	s := plugin.NewStopSignal()
	stop := context.AfterFunc(ctx, s.Stop)
	return s, func() {
		// A construct that went on in the background returns as soon as
		// ctx is done, which can be before ctx runs its AfterFuncs: stop
		// would then cancel the one that tells the kernel. Stop it here.
		if !stop() || ctx.Err() != nil {
			s.Stop()
		}
	}
}
