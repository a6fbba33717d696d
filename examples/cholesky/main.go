// Command cholesky factors a symmetric positive definite matrix by tiles
// (examples/apps/cholesky): a DAG of potrf, trsm, syrk and gemm tasks,
// each on the device its tile lives on for the whole run (final tiles are
// copied device to device to the others), ordered by depend clauses on the
// tiles and enqueued all at once. It checks L against the same
// factorization in plain Go and times it against a goroutine fork-join
// version on this machine.
//
//	go run ./examples/cholesky                       # n=1024, 8×8 tiles, on local:2
//	go run ./examples/cholesky -tiles 4 -b 64
//	GOFFLOAD_DEVICES=host:2 go run ./examples/cholesky
//	GOFFLOAD_DEVICES=cuda go run ./examples/cholesky        # every GPU (the PTX goffload-gen made from the Go bodies)
//	GOFFLOAD_DEVICES=cuda,host go run ./examples/cholesky   # the GPUs and the host's cores
//	GOFFLOAD_DEVICES=cuda,host go run ./examples/cholesky -any   # the runtime places every task
//
// With -any every task is an Any-task (offload.Any, cholesky.FactorAny):
// the runtime places each on the device expected to finish it first and
// moves the tiles between the devices itself; the program prints how many
// kernels each device ran.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/goffload/offload"
	"github.com/goffload/offload/examples/apps/cholesky"
	"github.com/goffload/offload/examples/internal/launches"
	"github.com/goffload/offload/role"
)

func main() {
	tiles := flag.Int("tiles", 8, "tiles per side")
	b := flag.Int("b", 128, "tile side")
	anyTasks := flag.Bool("any", false, "make every task an Any-task: the runtime places the tasks")
	flag.Parse()
	if err := run(*tiles, *b, *anyTasks); err != nil {
		fmt.Fprintln(os.Stderr, "cholesky:", err)
		os.Exit(1)
	}
}

func run(tiles, b int, anyTasks bool) error {
	if err := cholesky.CheckSize(tiles, b); err != nil {
		return err
	}
	ran := &launches.Counter{}
	opts := []offload.Option{offload.WithTool(ran)}
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
	want := cholesky.NewMatrix(tiles, b)
	goTime := cholesky.Reference(want, runtime.GOMAXPROCS(0))
	m := cholesky.NewMatrix(tiles, b)
	var tasks int
	var t time.Duration
	var err error
	how := ""
	if anyTasks {
		tasks, t, err = cholesky.FactorAny(m)
		how = " (Any-tasks: the runtime placed them)"
	} else {
		tasks, t, err = cholesky.Factor(devs, m)
	}
	if err != nil {
		return err
	}
	if err := cholesky.Check(m, want); err != nil {
		return err
	}
	fmt.Printf("cholesky: n=%d in %d×%d tiles, %d tasks on %d device(s)%s in %v (%v per task): verified against plain Go\n",
		tiles*b, tiles, tiles, tasks, len(devs), how, t.Round(time.Millisecond), (t / time.Duration(max(tasks, 1))).Round(time.Microsecond))
	if anyTasks {
		ran.Print(os.Stdout)
	}
	fmt.Printf("cholesky: goroutine fork-join (%d) on this machine %v: goffload takes %.2f× its time\n",
		runtime.GOMAXPROCS(0), goTime.Round(time.Millisecond), float64(t)/float64(goTime))
	return nil
}
