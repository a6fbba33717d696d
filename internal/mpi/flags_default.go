//go:build mpi && !mpicc && !mpich && !openmpi

package mpi

// A plain `go build -tags mpi` finds the system's default MPI through
// pkg-config's "mpi" package (Debian's alternatives point it at the MPI
// installed with the highest priority). The tags mpich and openmpi pick
// one by name; the tag mpicc takes every flag from CC (CC=mpicc.mpich).

// #cgo pkg-config: mpi
import "C"
