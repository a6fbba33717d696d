//go:build mpi && openmpi && !mpich && !mpicc

package mpi

// -tags mpi,openmpi: Open MPI's compile and link flags from pkg-config.

// #cgo pkg-config: ompi
import "C"
