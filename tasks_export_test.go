package offload

// DepHistory reports the size of the runtime's dependence history: the
// addresses it holds and the failures not reported yet, for tests of its
// bound.
func DepHistory() (addrs, failed int) {
	rt := current.Load()
	if rt == nil {
		return 0, 0
	}
	return rt.DepEntries()
}
