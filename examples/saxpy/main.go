// Command saxpy is goffload's main job: it maps two vectors to the default
// device, runs y = a*x + y there, checks the result against a computation on
// the host, and prints what ran where.
//
//	go run ./examples/saxpy
//	GOFFLOAD_INFO=copies go run ./examples/saxpy   # shows the copies both ways
package main

import (
	"flag"
	"fmt"
	"math"
	"os"

	"github.com/goffload/offload"
)

// Saxpy is y[i] += a*x[i], split over the device's cores.
var Saxpy = offload.MustKernel("saxpy", func(ctx offload.Ctx, a float32, x, y []float32) {
	ctx.For(len(y), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			y[i] += a * x[i]
		}
	})
})

func main() {
	n := flag.Int("n", 1<<20, "vector length")
	flag.Parse()
	if err := run(*n); err != nil {
		fmt.Fprintln(os.Stderr, "saxpy:", err)
		os.Exit(1)
	}
}

func run(n int) error {
	if err := offload.Start(); err != nil {
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

	dev := offload.Default()
	info, err := dev.Info()
	if err != nil {
		return err
	}
	fmt.Printf("goffload: %d device(s); default device %d is %s (%s, %d cores, host %s, pid %d)\n",
		offload.NumDevices(), dev.Num(), info.Kind, info.Name, info.Cores, info.Host, info.PID)

	if err := dev.Run(Saxpy, float32(a), offload.To(x).Named("x"), offload.ToFrom(y).Named("y")); err != nil {
		return err
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
	fmt.Printf("saxpy: y = %g*x + y on device %d over %d elements: verified against the host, all %d match\n", a, dev.Num(), n, n)
	return nil
}
