// Command jacobi solves Laplace's equation on a square grid by Jacobi
// iteration (examples/apps/jacobi), split into row blocks over every
// configured device: each block stays on its device for the whole run (a
// target data region), the blocks trade their edge rows (halo rows) device
// to device after every iteration, and depend clauses order it all, so
// every iteration of the run is enqueued up front. It checks the grid
// against the same iteration in plain Go, and times it against one device
// and against plain goroutines on this machine.
//
//	go run ./examples/jacobi                         # 2048², 200 iterations on local:2
//	go run ./examples/jacobi -n 512 -iters 50
//	GOFFLOAD_DEVICES=host:2 go run ./examples/jacobi
//	GOFFLOAD_DEVICES=cuda go run ./examples/jacobi         # every GPU (the PTX goffload-gen made from the Go bodies)
//	GOFFLOAD_DEVICES=cuda,host go run ./examples/jacobi    # the GPUs and the host's cores
//	go build -tags mpi -o app ./examples/jacobi && mpirun -np 3 ./app
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/goffload/offload"
	"github.com/goffload/offload/examples/apps/jacobi"
	"github.com/goffload/offload/role"
)

func main() {
	n := flag.Int("n", 2048, "grid side")
	iters := flag.Int("iters", 200, "iterations")
	compare := flag.Bool("compare", true, "also time one device and plain goroutines")
	flag.Parse()
	if err := run(*n, *iters, *compare); err != nil {
		fmt.Fprintln(os.Stderr, "jacobi:", err)
		os.Exit(1)
	}
}

func run(n, iters int, compare bool) error {
	if err := jacobi.CheckSize(n, iters); err != nil {
		return err
	}
	var opts []offload.Option
	if _, set := os.LookupEnv("GOFFLOAD_DEVICES"); !set && !role.UnderMPI() {
		opts = append(opts, offload.WithDevices("local:2"))
	}
	if err := offload.Start(opts...); err != nil { // in a device process, this serves and never returns
		return err
	}
	defer offload.Stop()

	devs := []offload.Device{offload.Initial()}
	if k := offload.NumDevices(); k > 0 {
		devs = devs[:0]
		for i := range k {
			devs = append(devs, offload.On(i))
		}
	}
	want, goTime := jacobi.Reference(n, iters)
	grid, t, err := jacobi.Solve(devs, n, iters)
	if err != nil {
		return err
	}
	if err := jacobi.Check(grid, want, n); err != nil {
		return err
	}
	fmt.Printf("jacobi: %d² grid, %d iterations on %d device(s) in %v: verified against plain Go\n",
		n, iters, len(devs), t.Round(time.Millisecond))
	if !compare {
		return nil
	}
	if len(devs) > 1 {
		grid, t1, err := jacobi.Solve(devs[:1], n, iters)
		if err != nil {
			return err
		}
		if err := jacobi.Check(grid, want, n); err != nil {
			return err
		}
		fmt.Printf("jacobi: on device %d alone %v: %d devices are %.2f× as fast as one\n",
			devs[0].Num(), t1.Round(time.Millisecond), len(devs), float64(t1)/float64(t))
	}
	fmt.Printf("jacobi: plain goroutines (%d) on this machine %v: goffload takes %.2f× their time\n",
		runtime.GOMAXPROCS(0), goTime.Round(time.Millisecond), float64(t)/float64(goTime))
	return nil
}
