package offload

// LiveAllocs is the number of allocations of device dev that Alloc made and
// Free did not release yet, for tests.
func LiveAllocs(dev int) int {
	rt := current.Load()
	if rt == nil || dev < 0 || dev >= len(rt.Devices) {
		return -1
	}
	return rt.Devices[dev].LiveAllocs()
}
