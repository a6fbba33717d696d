package offload_test

import (
	"runtime"
	"testing"
	"weak"

	"github.com/goffload/offload"
)

// TestCompletedTasksNotRetained: a completed task that the program still
// holds keeps none of the tasks before it alive. It held its predecessors
// (the room its dependence edges were in), so one handle kept the whole
// chain back to the program's first task: 355 MiB of RSS at 200 000 tasks
// in goffload-stress, 27 MiB since.
func TestCompletedTasksNotRetained(t *testing.T) {
	start(t, offload.WithDevices("host:2"), offload.WithOffload("MANDATORY"))
	x := filled(16, 0)
	mapAll(t, [][]int32{x}, 2)
	devs := []offload.Device{offload.On(0), offload.On(1)}
	// One chain on a device and across the two (a device wait), and a
	// host task's (a host wait): each task's only predecessor is the one
	// before it.
	first := AddN.Nowait(devs[0].Nowait(offload.DependInOut(x)), 1, x)
	gone := weak.Make(first)
	first = nil
	var last *offload.Task
	for i := range 200 {
		if i%50 == 49 {
			last = offload.Nowait(offload.DependInOut(x)).Go("host step", func() error { return nil })
			continue
		}
		last = AddN.Nowait(devs[i%2].Nowait(offload.DependInOut(x)), 1, x)
	}
	if err := last.Wait(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		runtime.GC()
	}
	if gone.Value() != nil {
		t.Error("the chain's first task, completed, is still reachable from its last, which the program holds")
	}
	runtime.KeepAlive(last)
}
