package offload_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/goffload/offload"
)

// The kernels of the task examples. The parameter types say how each
// buffer is mapped: In is copied to the device, Out back from it, InOut
// both ways.
var (
	// exampleFill sets every element of x to v.
	exampleFill = offload.MustKernel2("example.fill", func(ctx offload.Ctx, v float64, x offload.Out[float64]) {
		ctx.For(len(x), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				x[i] = v
			}
		})
	})
	// exampleSum writes the sum of x to sum[0].
	exampleSum = offload.MustKernel2("example.sum", func(ctx offload.Ctx, x offload.In[float64], sum offload.Out[float64]) {
		s := 0.0
		for _, v := range x {
			s += v
		}
		sum[0] = s
	})
	// exampleAxpb updates x in place: x = a*x + b.
	exampleAxpb = offload.MustKernel3("example.axpb", func(ctx offload.Ctx, a, b float64, x offload.InOut[float64]) {
		ctx.For(len(x), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				x[i] = a*x[i] + b
			}
		})
	})
)

// Target tasks ordered by depend clauses: a task that reads x (in) waits
// for the last task that wrote it (out), so both readers see the writer's
// result — on the writer's device and on another one. Nothing waits until
// Taskwait: the three tasks are enqueued at once and the devices hold the
// readers back.
func ExampleDevice_Nowait() {
	if err := offload.Start(offload.WithDevices("host:2")); err != nil {
		fmt.Println(err)
		return
	}
	defer offload.Stop()

	d0, d1 := offload.On(0), offload.On(1)
	x := make([]float64, 1000)
	sum0, sum1 := []float64{0}, []float64{0}
	exampleFill.Nowait(d0.Nowait(offload.DependOut(x)), 0.5, x)
	exampleSum.Nowait(d0.Nowait(offload.DependIn(x)), x, sum0)
	exampleSum.Nowait(d1.Nowait(offload.DependIn(x)), x, sum1)
	if err := offload.Taskwait(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("x[0]:", x[0], "sum on device 0:", sum0[0], "sum on device 1:", sum1[0])
	// Output: x[0]: 0.5 sum on device 0: 500 sum on device 1: 500
}

// Tasks that only read an object run concurrently: here two host tasks
// that read x each wait for the other to start, which only works because
// the runtime does not order them. A task that writes x afterwards (out)
// waits for both readers, so they never see its value.
func ExampleDependIn() {
	if err := offload.Start(offload.WithDevices("host:2")); err != nil {
		fmt.Println(err)
		return
	}
	defer offload.Stop()

	x := make([]float64, 4)
	exampleFill.Nowait(offload.On(0).Nowait(offload.DependOut(x)), 1, x)
	started := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	seen := make([]float64, 2)
	readers := make([]*offload.Task, 2)
	for r := range readers {
		readers[r] = offload.Nowait(offload.DependIn(x)).Go(fmt.Sprint("reader ", r), func() error {
			close(started[r])
			select {
			case <-started[1-r]: // the other reader runs too
			case <-time.After(10 * time.Second):
				return errors.New("the readers ran one after the other")
			}
			seen[r] = x[0]
			return nil
		})
	}
	writer := exampleFill.Nowait(offload.On(1).Nowait(offload.DependOut(x)), 2, x)
	for r, t := range readers {
		fmt.Println("reader", r, "saw", seen[r], t.Wait())
	}
	fmt.Println("after the writer:", x, writer.Wait())
	// Output:
	// reader 0 saw 1 <nil>
	// reader 1 saw 1 <nil>
	// after the writer: [2 2 2 2] <nil>
}

// An inout chain: each task reads and writes x, so each waits for the one
// before it, here alternating between two devices (x goes device to host
// to device between them).
func ExampleDependInOut() {
	if err := offload.Start(offload.WithDevices("host:2")); err != nil {
		fmt.Println(err)
		return
	}
	defer offload.Stop()

	x := []float64{1, 1, 1}
	var last *offload.Task
	for i := range 4 {
		dev := offload.On(i % 2)
		last = exampleAxpb.Nowait(dev.Nowait(offload.DependInOut(x)), 2, 1, x) // x = 2x + 1
	}
	fmt.Println(last.Wait(), x) // the last task waited for the three before it
	// Output: <nil> [31 31 31]
}

// A Group waits for its own tasks only (OpenMP's taskgroup): here a host
// task outside the group is still running when the group's Wait returns;
// Taskwait waits for it.
func ExampleGroup() {
	if err := offload.Start(offload.WithDevices("host:2")); err != nil {
		fmt.Println(err)
		return
	}
	defer offload.Stop()

	release := make(chan struct{})
	outside := offload.Nowait().Go("outside the group", func() error { <-release; return nil })

	var g offload.Group
	parts := [][]float64{make([]float64, 2), make([]float64, 2)}
	for p, x := range parts {
		exampleFill.Nowait(offload.On(p).Nowait(offload.DependOut(x)).In(&g), float64(p+1), x)
	}
	ctx := context.Background()
	fmt.Println("group:", g.Wait(ctx), parts)
	select {
	case <-outside.Done():
		fmt.Println("the task outside the group is done")
	default:
		fmt.Println("the task outside the group is still running")
	}
	close(release)
	fmt.Println("taskwait:", offload.Taskwait(ctx))
	// Output:
	// group: <nil> [[1 1] [2 2]]
	// the task outside the group is still running
	// taskwait: <nil>
}

// Host work in the same dependence graph as device tasks: the host task
// waits for the device task that writes x, and the device task that reads
// x after it waits for the host task.
func ExampleAsync_Go() {
	if err := offload.Start(offload.WithDevices("host:2")); err != nil {
		fmt.Println(err)
		return
	}
	defer offload.Stop()

	x := make([]float64, 4)
	sum := []float64{0}
	exampleFill.Nowait(offload.On(0).Nowait(offload.DependOut(x)), 1, x)
	offload.Nowait(offload.DependInOut(x)).Go("host: x[i] *= i", func() error {
		for i := range x {
			x[i] *= float64(i)
		}
		return nil
	})
	t := exampleSum.Nowait(offload.On(1).Nowait(offload.DependIn(x)), x, sum)
	fmt.Println(t.Wait(), x, sum)
	// Output: <nil> [0 1 2 3] [6]
}

// Taskwait waits for every task created so far and returns the first
// failure in creation order. A task that fails (here a launch that demands
// x be present on the device, and it is not) makes the tasks that depend on
// it fail without running; their errors wrap ErrDependency and the first
// task's error. Once reported, the failure is forgotten: new tasks on x run.
func ExampleTaskwait() {
	if err := offload.Start(offload.WithDevices("host:2")); err != nil {
		fmt.Println(err)
		return
	}
	defer offload.Stop()

	ctx := context.Background()
	d := offload.On(0)
	x := []float64{1, 2, 3}
	sum := []float64{0}
	exampleAxpb.With(offload.ToFrom(x).Present().Named("x")).Nowait(d.Nowait(offload.DependInOut(x)), 2, 0, x)
	after := exampleSum.Nowait(d.Nowait(offload.DependIn(x)), x, sum)
	err := offload.Taskwait(ctx)
	fmt.Println("taskwait:", errors.Is(err, offload.ErrNotPresent))
	err = after.Wait()
	fmt.Println("the reader:", errors.Is(err, offload.ErrDependency), errors.Is(err, offload.ErrNotPresent), x, sum)

	exampleAxpb.Nowait(d.Nowait(offload.DependInOut(x)), 2, 0, x)
	exampleSum.Nowait(offload.On(1).Nowait(offload.DependIn(x)), x, sum)
	fmt.Println("taskwait:", offload.Taskwait(ctx), x, sum)
	// Output:
	// taskwait: true
	// the reader: true true [1 2 3] [0]
	// taskwait: <nil> [2 4 6] [12]
}
