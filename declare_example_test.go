package offload_test

import (
	"fmt"
	"log"

	"github.com/goffload/offload"
)

// Declare target variables are declared at package init, like kernels.
var (
	// Hits is `int64 hits = 0; #pragma omp declare target to(hits)`: every
	// device has its own copy.
	Hits = offload.DeclareTarget("declare.example.hits", []int64{0})
	// Weights is `#pragma omp declare target link(weights)`: kernels see it
	// on a device while the program maps it there.
	Weights = offload.DeclareTargetLink("declare.example.weights", []float64{0.5, 0.25, 0.25})

	Count = offload.MustKernel("declare.example.count", func(ctx offload.Ctx, n int64) {
		Hits.On(ctx)[0] += n // this device's copy
	})
	Dot = offload.MustKernel("declare.example.dot", func(ctx offload.Ctx, x, out []float64) {
		w := Weights.On(ctx) // the copy mapped on this device
		out[0] = 0
		for i := range x {
			out[0] += w[i] * x[i]
		}
	})
)

func Example_declareTarget() {
	if err := offload.Start(offload.WithDevices("host:2")); err != nil {
		log.Fatal(err)
	}
	defer offload.Stop()

	for d := 0; d < 2; d++ {
		offload.On(d).Run(Count, int64(10*(d+1)))
		offload.On(d).Run(Count, int64(1))
	}
	for d := 0; d < 2; d++ {
		offload.On(d).Update(offload.From(Hits.Host())) // target update from(hits)
		fmt.Printf("device %d: hits %d\n", d, Hits.Host()[0])
	}

	dev := offload.On(1)
	x, out := []float64{4, 8, 16}, make([]float64, 1)
	err := dev.Run(Dot, x, offload.From(out))
	fmt.Println("unmapped:", err != nil)
	err = dev.Data(func() error {
		return dev.Run(Dot, x, offload.From(out))
	}, offload.To(Weights.Host())) // map(to: weights)
	fmt.Println("mapped:", out[0], err)
	// Output:
	// device 0: hits 11
	// device 1: hits 21
	// unmapped: true
	// mapped: 8 <nil>
}
