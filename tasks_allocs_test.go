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
// the clauses' variadic slice stays on the stack (Async holds three). The
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

// maxAcrossAllocs is the most heap allocations a task of a chain that
// crosses between two host devices may cost, a launch or the copy of its
// buffer to the other device, with depend clauses on the buffer and on a
// token: the task's records (1) and the host event (1). It was 10.5 before
// the dependence histories, predecessor lists, completers, copies and the
// host queue's exchanges kept their room or held their state in place of
// closures.
const maxAcrossAllocs = 2.1

// TestNowaitAllocsAcross pins the heap allocations of a chain that goes
// back and forth between two host devices, as a stencil's timesteps do: a
// launch on one device, the copy of its buffer to the other, a launch
// there that waits for the copy, and back. Every launch adds 1, so the
// buffer ends up holding the number of launches.
func TestNowaitAllocsAcross(t *testing.T) {
	start(t, offload.WithDevices("host:2"), offload.WithOffload("MANDATORY"))
	x := filled(16, 0)
	mapAll(t, [][]int32{x}, 2)
	devs := []offload.Device{offload.On(0), offload.On(1)}
	tok := []*int64{new(int64), new(int64)} // "x arrived on device i"
	launches := 0
	chainOf := func(n int) func() {
		return func() {
			var last *offload.Task
			for i := range n {
				here, there := i%2, (i+1)%2
				AddN.Nowait(devs[here].Nowait(offload.DependIn(tok[here]), offload.DependInOut(x)), 1, x)
				last = offload.CopyNowait(devs[there].Nowait(offload.DependIn(x), offload.DependOut(tok[there])),
					devs[there], x, devs[here], x)
			}
			launches += n
			if err := last.Wait(); err != nil {
				t.Fatal(err)
			}
		}
	}
	chainOf(n2)() // the queues and histories made once
	per := (testing.AllocsPerRun(20, chainOf(2*n2)) - testing.AllocsPerRun(20, chainOf(n2))) / (2 * n2)
	t.Logf("heap allocations: %.2f a task of a chain across two host devices (a launch or a copy), with its completion", per)
	if per > maxAcrossAllocs+raceAllocs {
		t.Errorf("a task across two devices allocates %.2f times, want at most %.1f", per, maxAcrossAllocs+raceAllocs)
	}
	if err := offload.Taskwait(context.Background()); err != nil {
		t.Fatal(err)
	}
	for d, dev := range devs { // each chain ended with a launch on 1 and its copy to 0
		if err := dev.Update(offload.From(x)); err != nil {
			t.Fatal(err)
		}
		for i, v := range x {
			if v != int32(launches) {
				t.Fatalf("device %d: x[%d] = %d after %d launches that add 1, want %d", d, i, v, launches, launches)
			}
		}
	}
}

// n2 is the chains' length in TestNowaitAllocsAcross.
const n2 = 50
