package core

import (
	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
)

// ServeDevice serves as a device of each kind that finds this process is
// one of its device processes, and ends the process then; otherwise it
// returns at once (offload.Start and role.ServeDevice call it).
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
