// Command saxpy is goffload's main job: it splits y = a*x + y over the
// devices, runs each part on its device, checks the result against a
// computation on the host, and prints which device ran which part.
//
// By default it starts two device processes of its own on this machine
// (GOFFLOAD_DEVICES=local:2), so the work really leaves the program:
//
//	go run ./examples/saxpy
//	go build -tags mpi -o app . && mpirun -np 3 ./app   # two MPI devices
//	GOFFLOAD_DEVICES=host,local:2 go run ./examples/saxpy
//	GOFFLOAD_INFO=copies go run ./examples/saxpy   # shows the copies both ways
//	GOFFLOAD_DEVICES=cuda go run ./examples/saxpy  # on the GPUs, with the PTX goffload-gen made from the Go body (zz_offload_gen.go)
//	GOFFLOAD_DEVICES=opencl go run ./examples/saxpy  # on OpenCL devices (PoCL too), with the OpenCL C goffload-gen made from the Go body
//
// Where a device named in GOFFLOAD_DEVICES cannot be used (no GPU, say),
// OpenMP's default is to run its part on the host; the output then shows
// the initial device. OMP_TARGET_OFFLOAD=MANDATORY makes that an error
// instead, which says why the device is unavailable.
package main

//go:generate go run github.com/goffload/offload/cmd/goffload-gen

import (
	"flag"
	"fmt"
	"math"
	"os"
	"sync"
	"time"

	"github.com/goffload/offload"
	"github.com/goffload/offload/role"
)

// Saxpy is y[i] += a*x[i] for i < n (BLAS's saxpy), split over the
// device's cores: x is copied to the device, y to it and back (the
// parameter types say so); Named gives the buffers their names in
// GOFFLOAD_INFO output and errors. On an OpenCL device it runs the OpenCL
// C that go generate made from this body, and on a GPU the PTX clang made
// of that (zz_offload_gen.go).
var Saxpy = offload.MustKernel4("saxpy", func(ctx offload.Ctx, n int, a float32, x offload.In[float32], y offload.InOut[float32]) {
	ctx.For(n, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			y[i] += a * x[i]
		}
	})
}).Named("n", "a", "x", "y")

func main() {
	n := flag.Int("n", 1<<22, "vector length")
	flag.Parse()
	if err := run(*n); err != nil {
		fmt.Fprintln(os.Stderr, "saxpy:", err)
		os.Exit(1)
	}
}

func run(n int) error {
	var opts []offload.Option
	if _, set := os.LookupEnv("GOFFLOAD_DEVICES"); !set && !role.UnderMPI() {
		// Under mpirun (built with -tags mpi) the default devices are the
		// job's other ranks.
		opts = append(opts, offload.WithDevices("local:2"))
	}
	if err := offload.Start(opts...); err != nil { // in a device process, this serves and never returns
		return err
	}
	defer offload.Stop()

	const a = 2.5
	x := make([]float32, n)
	y := make([]float32, n)
	want := make([]float32, n)
	for i := range x {
		x[i] = float32(i%1000) * 0.5
		y[i] = float32(i % 7)
		want[i] = y[i] + a*x[i]
	}

	// One contiguous part per device (the initial device if there are none),
	// all running at once; each part is an array section of x and y.
	parts := max(offload.NumDevices(), 1)
	errs := make([]error, parts)
	var wg sync.WaitGroup
	var start time.Time // the device part: copies in, kernels, copies back
	for p := 0; p < parts; p++ {
		dev := offload.On(p)
		if offload.NumDevices() == 0 {
			dev = offload.Initial()
		}
		lo, hi := p*n/parts, (p+1)*n/parts
		info, err := dev.Info()
		if err != nil {
			return err
		}
		fmt.Printf("device %d (%s, %s, pid %d on %s): elements [%d, %d)\n", dev.Num(), info.Kind, info.Name, info.PID, info.Host, lo, hi)
		if p == 0 {
			start = time.Now()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The clauses of With name the array sections in the info
			// output and errors.
			xs, ys := x[lo:hi], y[lo:hi]
			errs[p] = Saxpy.Run(dev, len(ys), a, xs, ys)
		}()
	}
	wg.Wait()
	took := time.Since(start)
	for _, err := range errs {
		if err != nil {
			return err
		}
	}

	bad := 0
	for i := range y {
		if math.Abs(float64(y[i]-want[i])) > 1e-3*math.Max(1, math.Abs(float64(want[i]))) {
			if bad < 5 {
				fmt.Printf("mismatch at %d: got %g, want %g\n", i, y[i], want[i])
			}
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d elements differ from the host computation", bad, n)
	}
	fmt.Printf("saxpy: y = %g*x + y over %d elements on %d device(s): verified against the host, all %d match (device part %v)\n", a, n, parts, n, took.Round(10*time.Microsecond))
	return nil
}
