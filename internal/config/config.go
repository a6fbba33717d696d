// Package config holds goffload's settings: what the environment
// (OMP_TARGET_OFFLOAD, OMP_DEFAULT_DEVICE, LIBOMPTARGET_INFO and the
// GOFFLOAD_* variables) and Start's options say, read into a Config. It
// also holds the info output: its flags and the Logger that writes it.
// Every error it returns wraps ErrConfig.
package config

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/goffload/offload/internal/workpool"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/hostmem"
	"github.com/goffload/offload/tool"
)

// Policy is OMP_TARGET_OFFLOAD.
type Policy int

const (
	// PolicyDefault offloads where it can and falls back to the initial
	// device where a device is unavailable, saying so in the info output.
	PolicyDefault Policy = iota
	// PolicyMandatory makes a construct that cannot run on its device an
	// error.
	PolicyMandatory
	// PolicyDisabled runs everything on the initial device.
	PolicyDisabled
)

// String is the policy as OMP_TARGET_OFFLOAD spells it.
func (p Policy) String() string {
	switch p {
	case PolicyMandatory:
		return "MANDATORY"
	case PolicyDisabled:
		return "DISABLED"
	default:
		return "DEFAULT"
	}
}

// ParsePolicy parses an OMP_TARGET_OFFLOAD value (case-insensitive).
func ParsePolicy(s string) (Policy, error) {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "", "DEFAULT":
		return PolicyDefault, nil
	case "MANDATORY":
		return PolicyMandatory, nil
	case "DISABLED":
		return PolicyDisabled, nil
	}
	return PolicyDefault, fmt.Errorf("%w: OMP_TARGET_OFFLOAD=%q: want MANDATORY, DISABLED or DEFAULT", ErrConfig, s)
}

// Config is what Start reads from the environment and options.
type Config struct {
	Policy Policy
	// DefaultDevice is OMP_DEFAULT_DEVICE.
	DefaultDevice int
	// Devices is GOFFLOAD_DEVICES; DevicesSet says whether it was given
	// (unset means: every device the plugins discover).
	Devices    string
	DevicesSet bool
	// Info is GOFFLOAD_INFO, and InfoOut where it is written (stderr if nil).
	Info    InfoFlags
	InfoOut io.Writer
	// Profile is GOFFLOAD_PROFILE: where to write a trace ("" for none).
	Profile string
	// Tool receives the runtime's events (nil for none).
	Tool tool.Tool
	// StopGrace is GOFFLOAD_STOP_GRACE: how long Stop waits for work to
	// end after asking kernels to stop (0: DefaultStopGrace).
	StopGrace time.Duration
	// CheckMaps is GOFFLOAD_CHECK=maps (check.go).
	CheckMaps bool
	// DeviceTasks is GOFFLOAD_DEVICE_TASKS (tasks_limit.go).
	DeviceTasks DeviceTasks
}

// ConfigFromEnv reads OMP_TARGET_OFFLOAD, OMP_DEFAULT_DEVICE, GOFFLOAD_DEVICES
// and GOFFLOAD_INFO, and checks the variables the device kinds read (see
// CheckDeviceEnv).
func ConfigFromEnv() (Config, error) {
	var cfg Config
	var err error
	if err := CheckDeviceEnv(); err != nil {
		return cfg, err
	}
	if cfg.Policy, err = ParsePolicy(os.Getenv("OMP_TARGET_OFFLOAD")); err != nil {
		return cfg, err
	}
	if s := strings.TrimSpace(os.Getenv("OMP_DEFAULT_DEVICE")); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 0 {
			return cfg, fmt.Errorf("%w: OMP_DEFAULT_DEVICE=%q: want a non-negative device number", ErrConfig, s)
		}
		cfg.DefaultDevice = v
	}
	cfg.Devices, cfg.DevicesSet = os.LookupEnv("GOFFLOAD_DEVICES")
	if cfg.Info, err = ParseInfo(os.Getenv("GOFFLOAD_INFO")); err != nil {
		return cfg, err
	}
	cfg.Profile = os.Getenv("GOFFLOAD_PROFILE")
	if cfg.StopGrace, err = ParseStopGrace(os.Getenv("GOFFLOAD_STOP_GRACE")); err != nil {
		return cfg, err
	}
	if cfg.DeviceTasks, err = ParseDeviceTasks(os.Getenv("GOFFLOAD_DEVICE_TASKS")); err != nil {
		return cfg, err
	}
	if cfg.CheckMaps, err = ParseCheck(os.Getenv("GOFFLOAD_CHECK")); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// Spec is one item of GOFFLOAD_DEVICES: a kind and its argument, written
// KIND, KIND:ARG, KIND[ARG] (Arg keeps the brackets) or KIND://ARG (URL).
type Spec struct {
	Kind string
	Arg  string
	URL  bool
}

// String is the spec as GOFFLOAD_DEVICES spells it (the kind in lower
// case).
func (s Spec) String() string {
	switch {
	case s.Arg == "":
		return s.Kind
	case s.URL || strings.Contains(s.Arg, "/"):
		return s.Kind + "://" + s.Arg
	case strings.HasPrefix(s.Arg, "["):
		return s.Kind + s.Arg
	}
	return s.Kind + ":" + s.Arg
}

// ParseDevices splits a GOFFLOAD_DEVICES value ("host,local:2,tcp://h:p")
// into specs and checks that each names a registered kind. Kind names are
// case-insensitive; an empty item ("host,,local", a trailing comma) or an
// item with a colon and nothing after it ("local:") is an error naming it.
// A value of only spaces names no devices.
func ParseDevices(s string) ([]Spec, error) {
	var specs []Spec
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	for n, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, fmt.Errorf("%w: GOFFLOAD_DEVICES=%q: item %d is empty; separate device items with single commas, as in host,local:2", ErrConfig, s, n+1)
		}
		var sp Spec
		if i := strings.Index(item, "://"); i >= 0 {
			sp = Spec{Kind: item[:i], Arg: item[i+3:], URL: true}
		} else if i := strings.IndexAny(item, ":["); i >= 0 && item[i] == '[' {
			sp = Spec{Kind: item[:i], Arg: item[i:]} // local[opencl]: what a device process serves
		} else if i := strings.IndexByte(item, ':'); i >= 0 {
			sp = Spec{Kind: item[:i], Arg: item[i+1:]}
		} else {
			sp = Spec{Kind: item}
		}
		sp.Kind = strings.ToLower(sp.Kind)
		k, ok := plugin.LookupKind(sp.Kind)
		if !ok {
			return nil, fmt.Errorf("%w: GOFFLOAD_DEVICES item %q: unknown device kind %q; known kinds: %s", ErrConfig, item, sp.Kind, knownKinds())
		}
		if sp.Arg == "" && !strings.EqualFold(sp.Kind, item) {
			form, _, _ := strings.Cut(k.Help, " ")
			return nil, fmt.Errorf("%w: GOFFLOAD_DEVICES item %q: nothing after the colon; want %s", ErrConfig, item, form)
		}
		specs = append(specs, sp)
	}
	return specs, nil
}

func knownKinds() string {
	var parts []string
	for _, k := range plugin.Kinds() {
		parts = append(parts, k.Help)
	}
	return strings.Join(parts, "; ")
}

// MaxRemoteSpin is the largest GOFFLOAD_REMOTE_SPIN accepted: a link's reader
// spins a core for up to that long per read.
const MaxRemoteSpin = time.Second

// MaxDeviceTimeout is the largest GOFFLOAD_DEVICE_TIMEOUT accepted (a year):
// a device's hello says its timeout, and a longer one is no hello at all.
const MaxDeviceTimeout = 8760 * time.Hour

// CheckDeviceEnv checks the environment variables that the device kinds
// read when they open devices, and device processes when they start.
// A value out of range is then an error at Start, whichever devices are
// named. The error wraps ErrConfig and names the variable, the value and
// the accepted range:
//
//   - GOFFLOAD_HOST_CORES, GOFFLOAD_DEVICE_CORES: 1 to workpool.MaxWorkers()
//     (4 × the CPUs, at least 64, at most 4096);
//   - GOFFLOAD_HOST_POOL_THRESHOLD: 0 to the machine's memory, in bytes;
//   - GOFFLOAD_HOST_MEMORY: separate or shared;
//   - GOFFLOAD_REMOTE_SPIN: a Go duration from 0 to MaxRemoteSpin ("0" turns
//     spinning off);
//   - GOFFLOAD_DEVICE_TIMEOUT: a Go duration from 10ms to MaxDeviceTimeout,
//     or 0 for none (plugins/remote parses it with the same rule).
//
// The kinds check their variables again themselves (a program can open
// devices without Start, and a TCP device process is started by hand).
func CheckDeviceEnv() error {
	for _, name := range []string{"GOFFLOAD_HOST_CORES", "GOFFLOAD_DEVICE_CORES"} {
		if s, ok := os.LookupEnv(name); ok && s != "" {
			if _, err := workpool.ParseWorkers(name, s); err != nil {
				return fmt.Errorf("%w: %w", ErrConfig, err)
			}
		}
	}
	if s := os.Getenv("GOFFLOAD_HOST_POOL_THRESHOLD"); s != "" {
		if _, err := hostmem.ParseThreshold("GOFFLOAD_HOST_POOL_THRESHOLD", s); err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	if s := os.Getenv("GOFFLOAD_HOST_MEMORY"); s != "" {
		if _, err := hostmem.ParseSharing("GOFFLOAD_HOST_MEMORY", s); err != nil {
			return fmt.Errorf("%w: %w", ErrConfig, err)
		}
	}
	if s := os.Getenv("GOFFLOAD_DEVICE_TIMEOUT"); s != "" && s != "0" {
		if d, err := time.ParseDuration(s); err != nil || d < 10*time.Millisecond || d > MaxDeviceTimeout {
			return fmt.Errorf("%w: GOFFLOAD_DEVICE_TIMEOUT=%q: want a duration of at least 10ms and at most 8760h (like 30s), or 0 for none", ErrConfig, s)
		}
	}
	if s := os.Getenv("GOFFLOAD_LOCAL_LINK"); s != "" && s != "shm" && s != "socket" {
		return fmt.Errorf("%w: GOFFLOAD_LOCAL_LINK=%q: want shm (shared memory, the default) or socket", ErrConfig, s)
	}
	if s := os.Getenv("GOFFLOAD_REMOTE_SPIN"); s != "" {
		if d, err := time.ParseDuration(strings.TrimSpace(s)); err != nil || d < 0 || d > MaxRemoteSpin {
			return fmt.Errorf("%w: GOFFLOAD_REMOTE_SPIN=%q: want a duration from 0 (no spinning) to %v, such as 100us", ErrConfig, s, MaxRemoteSpin)
		}
	}
	return nil
}

// ErrConfig is the error of a setting that cannot be read: every error
// of this package wraps it.
var ErrConfig = errors.New("invalid configuration")

// DeviceTasks is GOFFLOAD_DEVICE_TASKS: how many tasks (kernels) run at
// once on one device, for every kind (All) or per kind (Kind), 0 for no
// bound. The bound is the device's (plugin.TaskLimiter): a launch beyond
// it waits on its queue, not the program.
type DeviceTasks struct {
	All  int
	Kind map[string]int
}

// For is the bound of a device of kind ("host"), 0 for none.
func (t DeviceTasks) For(kind string) int {
	if n, ok := t.Kind[kind]; ok {
		return n
	}
	return t.All
}

// ParseDeviceTasks reads GOFFLOAD_DEVICE_TASKS: empty (no bound), a number
// N for every kind, or comma-separated items KIND=N and N ("host=2,mpi=8",
// "4,host=1"); N is at least 1.
func ParseDeviceTasks(s string) (DeviceTasks, error) {
	var t DeviceTasks
	bad := func(why string) (DeviceTasks, error) {
		return DeviceTasks{}, fmt.Errorf("%w: GOFFLOAD_DEVICE_TASKS=%q: %s: want N or KIND=N items separated by commas (like 2, or host=2,mpi=8), N at least 1", ErrConfig, s, why)
	}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		kind, num, named := strings.Cut(item, "=")
		if !named {
			num, kind = kind, ""
		}
		n, err := strconv.Atoi(strings.TrimSpace(num))
		if err != nil || n < 1 {
			return bad(fmt.Sprintf("%q is not a number of at least 1", num))
		}
		kind = strings.TrimSpace(kind)
		switch {
		case !named:
			t.All = n
		case kind == "":
			return bad("an item with no kind")
		default:
			if _, ok := plugin.LookupKind(kind); !ok {
				return bad(fmt.Sprintf("no device kind %q", kind))
			}
			if t.Kind == nil {
				t.Kind = map[string]int{}
			}
			t.Kind[kind] = n
		}
	}
	return t, nil
}

// DefaultStopGrace is how long Stop waits, after it has asked the kernels
// to stop, for the work going on to end, before it kills the device
// processes that still have some (GOFFLOAD_STOP_GRACE changes it).
const DefaultStopGrace = 10 * time.Second

// ParseStopGrace reads GOFFLOAD_STOP_GRACE: a Go duration of at least 1ms;
// empty is DefaultStopGrace.
func ParseStopGrace(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return DefaultStopGrace, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < time.Millisecond {
		return 0, fmt.Errorf("%w: GOFFLOAD_STOP_GRACE=%q: want a duration of at least 1ms, such as 10s", ErrConfig, s)
	}
	return d, nil
}

// ParseCheck reads GOFFLOAD_CHECK: empty (off) or "maps".
func ParseCheck(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "":
		return false, nil
	case "maps":
		return true, nil
	}
	return false, fmt.Errorf("%w: GOFFLOAD_CHECK=%q: want maps (or nothing)", ErrConfig, s)
}
