package core

import (
	"sync/atomic"
	"testing"

	"github.com/goffload/offload/internal/mapping"
)

// queueGate holds kGate's launches until the channel it holds is closed.
var queueGate atomic.Pointer[chan struct{}]

var kGate = mustKernel("coretest.gate", func(a []int32) { <-*queueGate.Load() })

// TestIdleQueuesBounded (issue 47): a burst of independent tasks makes a
// queue for each task in flight; once they are done, the device keeps at
// most maxIdleQueues of them and closes the rest, so the pool does not
// grow with the largest burst a program ever made.
func TestIdleQueuesBounded(t *testing.T) {
	r, _ := newFakeRuntime(t, 1, nil)
	d := r.Devices[0]
	gate := make(chan struct{})
	queueGate.Store(&gate)
	const n = 3 * maxIdleQueues
	tasks := make([]*Task, n)
	for i := range tasks {
		x := filled(4, 0)
		tasks[i] = r.Spawn(d, TargetOp(kGate, []KernelArg{sliceArg(x, "x", mapping.MapTo)}), []Dep{depOf(DepIn, x)}, false)
	}
	d.qmu.Lock()
	made := d.nq
	d.qmu.Unlock()
	close(gate)
	for _, tk := range tasks {
		if err := waitTask(t, tk); err != nil {
			t.Fatal(err)
		}
	}
	if made < n {
		t.Fatalf("%d tasks in flight made %d queues, want one each", n, made)
	}
	d.qmu.Lock()
	idle := len(d.queues)
	d.qmu.Unlock()
	if idle > maxIdleQueues {
		t.Errorf("%d idle queues after the burst, want at most %d", idle, maxIdleQueues)
	}
	// The pool still serves: a task after the burst takes an idle queue.
	x := filled(4, 1)
	if err := waitTask(t, r.Spawn(d, TargetOp(kAdd1, []KernelArg{sliceArg(x, "x", mapping.MapTo|mapping.MapFrom)}), nil, false)); err != nil || !allEqual(x, 2) {
		t.Fatalf("a task after the burst: %v, x = %v", err, x)
	}
	d.qmu.Lock()
	defer d.qmu.Unlock()
	if d.nq != made {
		t.Errorf("the task after the burst made a queue (%d, was %d), want an idle one", d.nq, made)
	}
}
