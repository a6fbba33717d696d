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
func TestTaskgraphHostParts(t *testing.T) {
	start(t, offload.WithDevices("host:2"), offload.WithOffload("MANDATORY"))
	before := host.GraphsDefined()
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
		if got := host.GraphsDefined() - before; got != 1 {
			t.Fatalf("replay %d: %d graphs defined on host devices, want 1 (the replay ran operation by operation)", i, got)
		}
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
		v = 2
		d0.Nowait(offload.DependOut(x)).Run(Fill, int32(0), x)
		if err := tg.Run().Wait(); err != nil {
			t.Fatalf("a replay after a failed one (v %d): %v", bad, err)
		}
		if got := deviceCopy(t, d1, x); !allEqual(got, 16) {
			t.Fatalf("d1's x after the replay that follows a failed one: %v, want 16", got[:4])
		}
	}
	tg.Reset() // its last replay is done: the parts go at once
	if got := host.GraphsDefined() - before; got != 0 {
		t.Errorf("after Reset: %d graphs defined on host devices, want 0", got)
	}
}
