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
