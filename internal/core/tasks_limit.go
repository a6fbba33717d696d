package core

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/goffload/offload/plugin"
)

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

// limitTasks gives each device that can take it its kind's bound.
func (r *Runtime) limitTasks() {
	for _, d := range r.Devices {
		if d.Unavailable != nil || d.Dev == nil {
			continue
		}
		if n := r.Cfg.DeviceTasks.For(d.Info.Kind); n > 0 {
			if tl, ok := d.Dev.(plugin.TaskLimiter); ok {
				tl.LimitTasks(n)
			} else {
				r.Log.Printf(InfoOffload, d.Num, "GOFFLOAD_DEVICE_TASKS: a %s device cannot bound its tasks; it runs them as they come", d.Info.Kind)
			}
		}
	}
}
