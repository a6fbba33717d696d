package offload_test

import (
	"context"
	"testing"

	"github.com/goffload/offload"
)

// maxNowaitAllocs is the most heap allocations a nowait task on a present
// buffer may cost on a host device, from its creation to its completion
// (issue 44's yardstick; 25 before its records shared one allocation,
// and the host queue's launch and the typed kernel's call had closures).
// The 5 left: the arguments' way in, the launch's slice boxed in an any
// by the typed Nowait, the depend clause's object by DependInOut, and
// the clauses' variadic slice (3); the public task with its core task, work and arguments (1); the
// host event (1). The completion is handed to the event without a
// closure (OnFireCall).
const maxNowaitAllocs = 5.5

// TestNowaitAllocs pins the heap allocations of a chain of nowait target
// tasks on a present buffer on a host device: per task, in steady state,
// with its completion.
func TestNowaitAllocs(t *testing.T) {
	start(t, offload.WithDevices("host:1"), offload.WithOffload("MANDATORY"))
	x := filled(16, 0)
	mapAll(t, [][]int32{x}, 1)
	dev := offload.On(0)
	const n = 100
	chain := func() {
		var last *offload.Task
		for range n {
			last = AddN.Nowait(dev.Nowait(offload.DependInOut(x)), 1, x)
		}
		if err := last.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	chain() // the queues and histories made once
	per := testing.AllocsPerRun(20, chain) / n
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
	for i, v := range x { // chain, then AllocsPerRun's warm-up and its 20 runs
		if v != 22*n {
			t.Fatalf("x[%d] = %d after %d tasks that add 1, want %d", i, v, 22*n, 22*n)
		}
	}
}
