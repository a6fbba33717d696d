package offload_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/goffload/offload"
)

// exampleGate holds example.wait until the example lets it go.
var exampleGate chan struct{}

// Wait is a kernel that takes as long as the program wants.
var Wait = offload.MustKernel("example.wait", func(x []float64) {
	<-exampleGate
	for i := range x {
		x[i] *= 2
	}
})

// A synchronous construct on a device bound to a context gives up when the
// context is done; the construct finishes in the background (the copy back
// and the unmapping included), and Taskwait waits for it.
func ExampleDevice_WithContext() {
	if err := offload.Start(offload.WithDevices("host")); err != nil {
		fmt.Println(err)
		return
	}
	defer offload.Stop()

	exampleGate = make(chan struct{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	x := []float64{1, 2, 3}
	err := offload.On(0).WithContext(ctx).Run(Wait, offload.ToFrom(x).Named("x"))
	fmt.Println("deadline exceeded:", errors.Is(err, context.DeadlineExceeded))

	close(exampleGate) // the kernel ends
	if err := offload.Taskwait(context.Background()); err != nil {
		fmt.Println(err)
	}
	fmt.Println(x, offload.On(0).IsPresent(x))
	// Output:
	// deadline exceeded: true
	// [2 4 6] false
}

// sumUntilStopped adds up x until Stop asks it to stop: a kernel that can
// run long checks ctx.Err() (or ctx.Done()) in its loop.
var sumUntilStopped = offload.MustKernel("example.sumuntilstopped", func(ctx offload.Ctx, x []int64) {
	for ctx.Err() == nil {
		x[0]++
		if x[0]%1024 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	x[1] = 1 // it saw the request to stop
})

// A kernel that would run forever ends when Stop begins, because it
// watches its Ctx; Stop then returns at once. (One that does not watch is
// ended by force after GOFFLOAD_STOP_GRACE where it can be, and Stop
// reports it; StopContext bounds the wait with a context.)
func ExampleStopContext() {
	if err := offload.Start(offload.WithDevices("host")); err != nil {
		fmt.Println(err)
		return
	}
	x := make([]int64, 2)
	task := offload.On(0).Nowait().Run(sumUntilStopped, offload.ToFrom(x))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fmt.Println("stop:", offload.StopContext(ctx))
	fmt.Println("task:", task.Wait(), "saw the stop:", x[1] == 1)
	// Output:
	// stop: <nil>
	// task: <nil> saw the stop: true
}
