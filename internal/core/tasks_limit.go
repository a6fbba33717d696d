package core

import (
	"github.com/goffload/offload/internal/config"
	"github.com/goffload/offload/plugin"
)

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
				r.Log.Printf(config.InfoOffload, d.Num, "GOFFLOAD_DEVICE_TASKS: a %s device cannot bound its tasks; it runs them as they come", d.Info.Kind)
			}
		}
	}
}
