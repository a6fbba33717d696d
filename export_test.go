package offload

import "github.com/goffload/offload/internal/core"

// Entries returns device dev's present table, for tests.
func Entries(dev int) []core.EntryInfo {
	rt := current.Load()
	if rt == nil || dev < 0 || dev >= len(rt.Devices) {
		return nil
	}
	return rt.Devices[dev].Table().Snapshot()
}

// Enqueued reports whether t's work is on its device's queue already (its
// event recorded), rather than waiting on the host to be enqueued.
func Enqueued(t *Task) bool { return t.t != nil && t.t.Enqueued() }
