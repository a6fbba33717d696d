package host

import (
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/hostmem"
)

// PoolStats reports the bytes a host device keeps in its pool of freed
// blocks, the pool's limit, and the bytes in live allocations, for tests.
func PoolStats(d plugin.Device) (pooled, limit, inUse int64) {
	dev, _ := hostDevice(d)
	return dev.mem.Stats()
}

// Memory is a host device's memory, for tests.
func Memory(d plugin.Device) *hostmem.Memory {
	dev, _ := hostDevice(d)
	return dev.mem
}
