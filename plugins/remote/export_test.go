package remote

import "github.com/goffload/offload/plugins/remote/shm"

// ShmLinks is the number of shared-memory links this process has mapped,
// for tests that run a kernel in a device process to see how it is linked.
func ShmLinks() int64 { return shm.Links() }

// LocalProcs is the number of local device processes of this process that
// run (the count that says whether the machine is crowded).
func LocalProcs() int64 { return localProcs.Load() }
