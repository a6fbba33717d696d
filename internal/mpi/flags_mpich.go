//go:build mpi && mpich && !mpicc

package mpi

// -tags mpi,mpich: MPICH's compile and link flags from pkg-config.

// #cgo pkg-config: mpich
import "C"
