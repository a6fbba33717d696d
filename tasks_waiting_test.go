package offload_test

import (
	"context"
	"errors"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/goffload/offload"
)

// Tasks that wait for others on the host hold no goroutine while they
// wait, and a long chain of them runs to the end in order: they wait in
// their predecessors' successor lists, and a host task that completes runs
// the one it made ready on its own goroutine (so a chain of any length
// must not grow a stack either). Target tasks behind host work, and target
// tasks on two devices that wait on each other, are counted too.
func TestWaitingTasksHoldNoGoroutine(t *testing.T) {
	startSet(t, "host:2")
	const chain = 20000
	x := make([]int32, 8)
	y := make([]int32, 8)
	open := make(chan struct{})
	first := offload.Nowait(offload.DependOut(x)).Go("gate", func() error { <-open; return nil })
	base := runtime.NumGoroutine()
	var order []int // written by tasks of one inout chain: no two run at once
	for i := range chain {
		offload.Nowait(offload.DependInOut(x)).Go("link", func() error {
			order = append(order, i)
			return nil
		})
	}
	// Target tasks behind the chain (a host predecessor) and behind each
	// other on both devices (device predecessors).
	const targets = 200
	for i := range targets {
		dev := offload.On(i % 2)
		dev.Nowait(offload.DependIn(x), offload.DependInOut(y)).Run(AddTo, int32(1), offload.ToFrom(y))
	}
	if n := runtime.NumGoroutine(); n > base+50 {
		t.Errorf("%d goroutines while %d tasks wait for a gate, %d before: waiting tasks hold goroutines", n, chain+targets, base)
	}
	close(open)
	if err := offload.Taskwait(context.Background()); err != nil {
		t.Fatalf("Taskwait: %v", err)
	}
	if err := first.Wait(); err != nil {
		t.Fatal(err)
	}
	if len(order) != chain {
		t.Fatalf("%d chained tasks ran, want %d", len(order), chain)
	}
	for i, v := range order {
		if v != i {
			t.Fatalf("chained task %d ran in place %d: the chain ran out of order", v, i)
		}
	}
	for i, v := range y {
		if v != targets {
			t.Fatalf("y[%d] = %d after %d dependent target tasks, want %d", i, v, targets, targets)
		}
	}
}

// A failure in the middle of a long chain of waiting host tasks fails
// every task after it, once, with ErrDependency, and the chain's later
// tasks do not run.
func TestWaitingChainFailure(t *testing.T) {
	startSet(t, "host")
	x := make([]int32, 1)
	open := make(chan struct{})
	offload.Nowait(offload.DependOut(x)).Go("gate", func() error { <-open; return nil })
	boom := errors.New("boom")
	var ran atomic.Int32
	var tasks []*offload.Task
	for i := range 1000 {
		tasks = append(tasks, offload.Nowait(offload.DependInOut(x)).Go("link", func() error {
			ran.Add(1)
			if i == 500 {
				return boom
			}
			return nil
		}))
	}
	close(open)
	for i, tk := range tasks {
		err := tk.Wait()
		switch {
		case i < 500 && err != nil:
			t.Fatalf("task %d: %v, want no error", i, err)
		case i == 500 && !errors.Is(err, boom):
			t.Fatalf("task %d: %v, want boom", i, err)
		case i > 500 && !errors.Is(err, offload.ErrDependency):
			t.Fatalf("task %d: %v, want ErrDependency", i, err)
		}
	}
	if n := ran.Load(); n != 501 {
		t.Fatalf("%d bodies ran, want 501 (the chain up to the failure)", n)
	}
}
