package offload_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/goffload/offload"
)

// CountFail adds 1 to c[0] and fails (a panic) when c[0] becomes failAt.
var CountFail = offload.MustKernel2("graph.countfail", func(_ offload.Ctx, failAt int32, c offload.InOut[int32]) {
	c[0]++
	if c[0] == failAt {
		panic("graph.countfail: the count reached failAt")
	}
})

// TestTaskgraphQueuedReplays: replays of a one-device graph on a device
// process that are made back to back go to the device before the last one
// ended (GraphQueuer) and run in order, each once. With a depend clause
// that makes each replay come after the last, a failed replay's successors
// fail with ErrDependency and run nothing; without one, they run.
func TestTaskgraphQueuedReplays(t *testing.T) {
	start(t, offload.WithDevices("local:1"), offload.WithOffload("MANDATORY"))
	dev := offload.On(0)
	c := []int32{0}
	if err := dev.EnterData(offload.To(c).Named("c")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	count := func() int32 {
		t.Helper()
		if err := dev.Update(offload.From(c)); err != nil {
			t.Fatal(err)
		}
		return c[0]
	}
	for _, depend := range []bool{true, false} {
		c[0] = 0
		if err := dev.Update(offload.To(c)); err != nil {
			t.Fatal(err)
		}
		failAt := int32(-1)
		inc := int32(1) // the count's increase a run
		if depend {
			inc = 2
		}
		tg := offload.NewTaskgraph(func(r *offload.Recorder) error {
			if !depend { // one task: two without clauses would race on c
				CountFail.Nowait(r.Nowait(dev), failAt, c)
				return nil
			}
			SleepMs.Nowait(r.Nowait(dev, offload.DependInOut(c)), 1, c)
			CountFail.Nowait(r.Nowait(dev, offload.DependInOut(c)), failAt, c)
			return nil
		})
		// 1 + 40 runs without a failure.
		tasks := []*offload.Task{tg.Run()}
		for range 40 {
			tasks = append(tasks, tg.Replay())
		}
		for i, task := range tasks {
			if err := task.WaitContext(ctx); err != nil {
				t.Fatalf("depend %v: run %d: %v", depend, i, err)
			}
		}
		if got := count(); got != inc*41 {
			t.Fatalf("depend %v: count %d after 41 runs, want %d", depend, got, inc*41)
		}
		if q := offload.TaskgraphQueued(tg); q == 0 {
			t.Errorf("depend %v: no replay of 40 made back to back was queued on the device", depend)
		}
		// The run that takes the count to inc*(41+5) fails (its new
		// scalar waits for the last run's end); the replays after it
		// are queued.
		failAt = inc * (41 + 5)
		tasks = tasks[:0]
		for i := range 10 {
			if i == 0 {
				tasks = append(tasks, tg.Run())
			} else {
				tasks = append(tasks, tg.Replay())
			}
		}
		for i, task := range tasks {
			err := task.WaitContext(ctx)
			switch {
			case i < 4:
				if err != nil {
					t.Errorf("depend %v: run %d: %v", depend, i, err)
				}
			case i == 4:
				if !errors.Is(err, offload.ErrKernelFailed) {
					t.Errorf("depend %v: run %d: %v, want ErrKernelFailed", depend, i, err)
				}
			case depend:
				if !errors.Is(err, offload.ErrDependency) {
					t.Errorf("depend %v: run %d after the failed one: %v, want ErrDependency", depend, i, err)
				}
			default:
				if err != nil {
					t.Errorf("depend %v: run %d after the failed one, with no depend clause: %v", depend, i, err)
				}
			}
		}
		want := inc * (41 + 10)
		if depend {
			want = inc * (41 + 5) // nothing of the runs after the failed one ran
		}
		if got := count(); got != want {
			t.Errorf("depend %v: count %d after the runs, want %d", depend, got, want)
		}
		tg.Reset()
	}
}
