//go:build !mpi

package main

// Suite mpi needs a build with MPI support (bench/mpi.go); this build says
// how to get one.
func init() {
	register("mpi", Suite{Devices: "mpi", Run: func(*Env) error { return nil }, Skip: func() string {
		return "this bench was built without MPI support: go build -tags mpi -o bench ./bench && mpirun -np 3 ./bench -suite mpi"
	}})
}
