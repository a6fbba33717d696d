package remote

// ShmLinks is the number of shared-memory links this process has mapped,
// for tests that run a kernel in a device process to see how it is linked.
func ShmLinks() int64 { return shmLinks.Load() }
