package offload_test

import (
	"context"
	"testing"

	"github.com/goffload/offload"
)

// maxNowaitAllocs is the most heap allocations a nowait task on a present
// buffer may cost on a host device, from its creation to its completion
// (issue 44's yardstick: at most 2; 25 before its records shared one
// allocation, 5 before the arguments came in without boxing): the public
// task with its core task, typed arguments, work and lowered arguments
// (1), and the host event (1). The typed Nowait passes its slice by
// reference, DependInOut reads the slice's address without boxing it, and
// the clauses' variadic slice stays on the stack (Async holds two). The
// completion is handed to the event without a closure (OnFireCall).
const maxNowaitAllocs = 2.1

// TestNowaitAllocs pins the heap allocations of a chain of nowait target
// tasks on a present buffer on a host device: per task, in steady state,
// with its completion.
func TestNowaitAllocs(t *testing.T) {
	start(t, offload.WithDevices("host:1"), offload.WithOffload("MANDATORY"))
	x := filled(16, 0)
	mapAll(t, [][]int32{x}, 1)
	dev := offload.On(0)
	const n = 100
	tasks := 0
	chainOf := func(n int) func() {
		return func() {
			var last *offload.Task
			for range n {
				last = AddN.Nowait(dev.Nowait(offload.DependInOut(x)), 1, x)
			}
			tasks += n
			if err := last.Wait(); err != nil {
				t.Fatal(err)
			}
		}
	}
	chainOf(n)() // the queues and histories made once
	// A task's own: the difference between chains of 2n and n tasks, so
	// that the chain's Wait is not counted (about 0.1 a task at n).
	per := (testing.AllocsPerRun(20, chainOf(2*n)) - testing.AllocsPerRun(20, chainOf(n))) / n
	t.Logf("heap allocations: %.2f a nowait task on a present buffer, with its completion", per)
	if per > maxNowaitAllocs+raceAllocs {
		t.Errorf("a nowait task allocates %.2f times, want at most %.1f", per, maxNowaitAllocs+raceAllocs)
	}
	if err := offload.Taskwait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := dev.Update(offload.From(x)); err != nil {
		t.Fatal(err)
	}
	for i, v := range x { // every task of the chains added 1
		if v != int32(tasks) {
			t.Fatalf("x[%d] = %d after %d tasks that add 1, want %d", i, v, tasks, tasks)
		}
	}
}
