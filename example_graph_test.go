package offload_test

import (
	"fmt"

	"github.com/goffload/offload"
)

// ScaleBy multiplies x by a: a step of an iteration.
var ScaleBy = offload.MustKernel2("example.scale", func(_ offload.Ctx, a float64, x offload.InOut[float64]) {
	for i := range x {
		x[i] *= a
	}
})

// A Taskgraph records the tasks of one iteration at its first Run and
// replays them after, with the function's new scalars: x stays on the
// device between the replays.
func ExampleNewTaskgraph() {
	if err := offload.Start(offload.WithDevices("host")); err != nil {
		fmt.Println(err)
		return
	}
	defer offload.Stop()

	dev := offload.On(0)
	x := []float64{1, 2, 3}
	a := 1.0
	g := offload.NewTaskgraph(func(r *offload.Recorder) error {
		for range 3 {
			ScaleBy.Nowait(r.Nowait(dev, offload.DependInOut(x)), a, x)
		}
		return nil
	})
	err := dev.Data(func() error {
		for _, a = range []float64{1, 2, 0.5} {
			if err := g.Run().Wait(); err != nil { // records, then replays
				return err
			}
		}
		return nil
	}, offload.ToFrom(x))
	fmt.Println(x, err, g.Recorded())
	// Output:
	// [1 2 3] <nil> true
}
