package offload_test

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/goffload/offload"
	"github.com/goffload/offload/plugins/host"
)

// AddOrExit is AddN that panics for v == 42 and ends its goroutine
// (runtime.Goexit) for v == 43.
var AddOrExit = offload.MustKernel2("graph.addorexit", func(_ offload.Ctx, v int32, x offload.InOut[int32]) {
	switch v {
	case 42:
		panic("graph: 42")
	case 43:
		runtime.Goexit()
	}
	for i := range x {
		x[i] += v
	}
})

// TestTaskgraphHostParts: on host:2 a graph of launches and copies between
// the devices is replayed by the host devices' parts (plugin.GraphDefiner:
// each lane a goroutine that calls the kernels, the lanes signalling each
// other in memory), with the results of fresh runs. A kernel that panics or
// ends its goroutine fails the replay with ErrKernelFailed, the other
// device's lane that waits for it does not hang, the task after the replay
// fails with ErrDependency, and the next replay runs. The parts go with
// Reset.
//
// On local:2 the device processes' parts replay the same graph (a
// GraphRun frame per device and replay, no launch frame), their lanes
// calling the kernels themselves: a panic or a runtime.Goexit there fails
// the replay the same way and the device process goes on.
func TestTaskgraphHostParts(t *testing.T) {
	for _, devs := range []string{"host:2", "local:2"} {
		t.Run(devs, func(t *testing.T) { testTaskgraphParts(t, devs) })
	}
}

func testTaskgraphParts(t *testing.T, devs string) {
	start(t, offload.WithDevices(devs), offload.WithOffload("MANDATORY"))
	hosts := devs == "host:2"
	before := host.GraphsDefined()
	// replayed checks that the replay just made ran on the devices' parts.
	var runs [2]uint64
	replayed := func(i int) {
		t.Helper()
		if hosts {
			if got := host.GraphsDefined() - before; got != 1 {
				t.Fatalf("replay %d: %d graphs defined on host devices, want 1 (the replay ran operation by operation)", i, got)
			}
			return
		}
		for d := range runs {
			fs := framesOf(t, d)
			if fs["graphrun"] != runs[d]+1 {
				t.Fatalf("replay %d: device %d got %d graphrun frames, want %d (the replay ran operation by operation)", i, d, fs["graphrun"], runs[d]+1)
			}
			runs[d] = fs["graphrun"]
		}
	}
	x := filled(32, 0)
	mapAll(t, [][]int32{x}, 2)
	d0, d1 := offload.On(0), offload.On(1)
	v := int32(1)
	tg := offload.NewTaskgraph(func(r *offload.Recorder) error {
		for range 3 {
			AddOrExit.Nowait(r.Nowait(d0, offload.DependInOut(x)), v, x)
			// On d0, from d0: a copy that d0's part makes.
			offload.CopyNowait(r.Nowait(d0, offload.DependIn(x)), d1, x, d0, x)
			AddN.Nowait(r.Nowait(d1, offload.DependInOut(x)), 10, x)
		}
		return nil
	})
	if err := tg.Run().Wait(); err != nil {
		t.Fatal(err)
	}
	if !hosts {
		runs = [2]uint64{framesOf(t, 0)["graphrun"], framesOf(t, 1)["graphrun"]}
	}
	for i := range 4 {
		d0.Nowait(offload.DependOut(x)).Run(Fill, int32(100), x)
		var task *offload.Task
		if i%2 == 0 {
			v = int32(i + 1)
			task = tg.Run()
		} else {
			task = tg.Replay()
		}
		if err := task.Wait(); err != nil {
			t.Fatalf("replay %d: %v", i, err)
		}
		replayed(i)
		want := 100 + 3*v + 10 // d1's copy of d0's last x, plus 10
		if got := deviceCopy(t, d1, x); !allEqual(got, want) {
			t.Fatalf("replay %d (v %d): d1's x %v, want %d", i, v, got[:4], want)
		}
		if got := deviceCopy(t, d0, x); !allEqual(got, 100+3*v) {
			t.Fatalf("replay %d (v %d): d0's x %v, want %d", i, v, got[:4], 100+3*v)
		}
	}
	for _, bad := range []int32{42, 43} {
		v = bad
		failed := tg.Run()
		after := AddN.Nowait(d1.Nowait(offload.DependInOut(x)), int32(1), x)
		err := failed.Wait()
		if !errors.Is(err, offload.ErrKernelFailed) {
			t.Fatalf("a replay whose kernel fails (v %d): %v, want ErrKernelFailed", bad, err)
		}
		if bad == 43 && !strings.Contains(err.Error(), "Goexit") {
			t.Errorf("a replay whose kernel calls runtime.Goexit: %v, want it named", err)
		}
		if err := after.Wait(); !errors.Is(err, offload.ErrDependency) {
			t.Fatalf("a task after a failed replay: %v, want ErrDependency", err)
		}
		replayed(int(bad))
		v = 2
		d0.Nowait(offload.DependOut(x)).Run(Fill, int32(0), x)
		if err := tg.Run().Wait(); err != nil {
			t.Fatalf("a replay after a failed one (v %d): %v", bad, err)
		}
		replayed(int(bad))
		if got := deviceCopy(t, d1, x); !allEqual(got, 16) {
			t.Fatalf("d1's x after the replay that follows a failed one: %v, want 16", got[:4])
		}
	}
	tg.Reset() // its last replay is done: the parts go at once
	if !hosts {
		for d := range runs {
			if got := framesOf(t, d)["graphfree"]; got != 1 {
				t.Errorf("device %d got %d graphfree frames after Reset, want 1", d, got)
			}
		}
	}
	if got := host.GraphsDefined() - before; got != 0 {
		t.Errorf("after Reset: %d graphs defined on host devices, want 0", got)
	}
}
