// Package mpi is goffload's own small MPI layer: one progress goroutine,
// locked to its OS thread, makes every MPI call, and other goroutines hand
// it non-blocking sends and receives. It is built with cgo under the mpi
// build tag, against the MPI that pkg-config names (mpi, the default; with
// the tag mpich or openmpi, that one) or, with the tag mpicc, the one the
// C compiler finds (CC=mpicc); a build without the tag has only Launched,
// LaunchRank, LaunchSize and Built (false) and no cgo.
package mpi

import (
	"os"
	"strconv"
)

// Launched reports whether this process was started by an MPI launcher
// (mpirun, mpiexec, srun with PMI or PMIx), from the environment they set.
func Launched() bool {
	_, rank := LaunchRank()
	return rank
}

// LaunchRank is this process's rank as the launcher's environment says,
// and whether it says one.
func LaunchRank() (string, bool) {
	for _, v := range []string{"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"} {
		if r, ok := os.LookupEnv(v); ok {
			return r, true
		}
	}
	return "", false
}

// LaunchSize is the number of ranks the launcher's environment says the
// job has (0 when it says none).
func LaunchSize() int {
	for _, v := range []string{"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"} {
		if s, ok := os.LookupEnv(v); ok {
			if n, err := strconv.Atoi(s); err == nil {
				return n
			}
		}
	}
	return 0
}
