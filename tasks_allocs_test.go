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

// maxStencilAllocs is the most heap allocations a task of a stencil over
// two host devices may cost: the records and the host event of a task of
// a chain (maxAcrossAllocs), issue 44's goal of 2. About one launch in four
// ends its kernel before the copy it waited for on the other device has
// completed there, so its completion waits for that one: its work is that
// wait's step, with no closure of its own (0.25 allocations a task more
// before). It was 3.26 before tasks made while a predecessor finished were
// enqueued at once and a work's room held the uses of four buffers.
const maxStencilAllocs = 2.05

// stencilStep is a timestep of a width-2 stencil's point: next is one more
// than the larger of its own and its neighbour's last values, and count
// counts the point's steps.
var stencilStep = offload.MustKernel4("test.allocs.stencil", func(_ offload.Ctx, own, other offload.In[int32], count offload.InOut[int32], next offload.Out[int32]) {
	next[0] = max(own[0], other[0]) + 1
	count[0]++
})

// TestNowaitAllocsStencil pins the heap allocations of a task of a
// stencil over two host devices, as Task Bench's stencil_1d makes them: at
// each timestep each point's launch of a 4-buffer kernel reads its own
// last output and the copy of its neighbour's, and the copy of its new
// output goes to the other device. The devices keep up with the program,
// so tasks are made while their predecessors complete: before, such a task
// waited for a predecessor that was finishing on the host, with closures
// and lists of its own (2.5 allocations more a launch), and a launch of 4
// buffers overflowed its work's room for their uses. Three depend clauses
// a task, the room Async and a task's records have. Every value is
// checked.
func TestNowaitAllocsStencil(t *testing.T) {
	start(t, offload.WithDevices("host:2"), offload.WithOffload("MANDATORY"))
	devs := []offload.Device{offload.On(0), offload.On(1)}
	var out [2][2][]int32 // parity, point
	var count [2][]int32  // point
	var tok [2][2]*int64  // parity, point: "its copy is on the other device"
	var bufs [][]int32
	for p := range 2 {
		count[p] = filled(1, 0)
		bufs = append(bufs, count[p])
		for par := range 2 {
			out[par][p] = filled(1, 0)
			bufs = append(bufs, out[par][p])
			tok[par][p] = new(int64)
		}
	}
	mapAll(t, bufs, 2)
	steps := 0
	var deps []offload.Dep
	run := func(n int) func() {
		return func() {
			var last *offload.Task
			for range n {
				cur, prev := (steps+1)%2, steps%2
				for p := range 2 {
					q := 1 - p
					// count[p] needs no clause: the point's launches are
					// ordered by its outputs'.
					stencilStep.Nowait(devs[p].Nowait(offload.DependIn(out[prev][p]), offload.DependIn(tok[prev][q]), offload.DependOut(out[cur][p])),
						out[prev][p], out[prev][q], count[p], out[cur][p])
					deps = append(deps[:0], offload.DependIn(out[cur][p]), offload.DependOut(tok[cur][p]))
					last = offload.CopyNowait(devs[q].Nowait(deps...), devs[q], out[cur][p], devs[p], out[cur][p])
				}
				steps++
			}
			if err := last.Wait(); err != nil {
				t.Fatal(err)
			}
		}
	}
	run(n2)()         // the queues and histories made once
	const perStep = 4 // two launches and two copies
	per := (testing.AllocsPerRun(20, run(2*n2)) - testing.AllocsPerRun(20, run(n2))) / (perStep * n2)
	t.Logf("heap allocations: %.2f a task of a stencil over two host devices (a launch or a copy), with its completion", per)
	if per > maxStencilAllocs+raceAllocs {
		t.Errorf("a task of a stencil allocates %.2f times, want at most %.2f", per, maxStencilAllocs+raceAllocs)
	}
	if err := offload.Taskwait(context.Background()); err != nil {
		t.Fatal(err)
	}
	final := steps % 2
	for d, dev := range devs {
		for p := range 2 {
			if err := dev.Update(offload.From(out[final][p])); err != nil {
				t.Fatal(err)
			}
			if got := out[final][p][0]; got != int32(steps) {
				t.Fatalf("device %d: point %d holds %d after %d steps, want %d", d, p, got, steps, steps)
			}
		}
		if err := dev.Update(offload.From(count[d])); err != nil {
			t.Fatal(err)
		}
		if count[d][0] != int32(steps) {
			t.Fatalf("point %d counted %d steps on device %d, want %d", d, count[d][0], d, steps)
		}
	}
}
