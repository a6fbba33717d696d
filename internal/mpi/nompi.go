//go:build !mpi

package mpi

// Built says whether this build has MPI support (the mpi build tag).
const Built = false
