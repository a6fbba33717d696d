package offload

import (
	"github.com/goffload/offload/internal/anyrun"
	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/internal/mapping"
)

// Entries returns device dev's present table, for tests, without the
// entries of declare target "to" variables (which every device has from
// Start to Stop, whatever the test maps: see declare_test.go).
func Entries(dev int) []mapping.EntryInfo {
	rt := current.Load()
	if rt == nil || dev < 0 || dev >= len(rt.Devices) {
		return nil
	}
	gs, _ := entries.Globals()
	var out []mapping.EntryInfo
	for _, e := range rt.Devices[dev].Table().Snapshot() {
		if !declared(gs, e) {
			out = append(out, e)
		}
	}
	return out
}

// declared reports whether e is the entry of a declare target "to"
// variable of gs.
func declared(gs []*entries.Global, e mapping.EntryInfo) bool {
	for _, g := range gs {
		if !g.Link && e.HstBegin == g.Addr() && e.Size == g.Size && e.Name == g.Name {
			return true
		}
	}
	return false
}

// Enqueued reports whether t's work is on its device's queue already (its
// event recorded), rather than waiting on the host to be enqueued.
func Enqueued(t *Task) bool { return t.t != nil && t.t.Enqueued() }

// AnyDeviceTimed is how many Any-tasks of the running runtime the
// placement model learned from with their devices' own times.
func AnyDeviceTimed() int64 {
	if rt := current.Load(); rt != nil {
		return anyrun.AnyDeviceTimed(rt)
	}
	return 0
}

// PluginDevice is device dev's plugin device, for tests that look into a
// kind's own counters.
func PluginDevice(dev int) any {
	rt := current.Load()
	if rt == nil || dev < 0 || dev >= len(rt.Devices) {
		return nil
	}
	return rt.Devices[dev].Dev
}

// TaskgraphQueued is how many of tg's replays were queued behind the one
// before on its device rather than started after its end.
func TaskgraphQueued(tg *Taskgraph) uint64 {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	if tg.g == nil {
		return 0
	}
	return tg.g.Queued()
}
