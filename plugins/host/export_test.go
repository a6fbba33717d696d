package host

import "github.com/goffload/offload/plugin"

// PoolStats reports the bytes a host device keeps in its pool of freed
// blocks, the pool's limit, and the bytes in live allocations, for tests.
func PoolStats(d plugin.Device) (pooled, limit, inUse int64) {
	return d.(*device).mem.Stats()
}
