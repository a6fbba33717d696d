package offload_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goffload/offload"
)

// A gate holds a kernel on a host device (which runs kernels in this
// process) until the test opens it.
type gate struct {
	started, open chan struct{}
	startOnce     sync.Once
	openOnce      sync.Once
}

var (
	gatesMu sync.Mutex
	gates   = map[int64]*gate{}
	gateIDs int64
)

// newGate returns a gate's id and the gate; it opens at the end of the test
// whatever happens, so that Stop does not wait for a held kernel forever.
func newGate(t *testing.T) (int64, *gate) {
	gatesMu.Lock()
	defer gatesMu.Unlock()
	gateIDs++
	g := &gate{started: make(chan struct{}), open: make(chan struct{})}
	gates[gateIDs] = g
	t.Cleanup(g.release)
	return gateIDs, g
}

func (g *gate) release() { g.openOnce.Do(func() { close(g.open) }) }

func gateOf(id int64) *gate {
	gatesMu.Lock()
	defer gatesMu.Unlock()
	return gates[id]
}

// awaitGate is what a held kernel does: say it started, wait to be let go.
func awaitGate(id int64) {
	g := gateOf(id)
	g.startOnce.Do(func() { close(g.started) })
	<-g.open
}

var (
	// Hold waits at its gate, then adds 1 to every element.
	Hold = offload.MustKernel("tasks.hold", func(id int64, x []int32) {
		awaitGate(id)
		for i := range x {
			x[i]++
		}
	})
	// HoldFail waits at its gate, then fails.
	HoldFail = offload.MustKernel("tasks.holdfail", func(id int64) {
		awaitGate(id)
		panic("failed after its gate opened")
	})
)

// within runs fn on a goroutine and fails the test if it has not returned
// after limit: the guard of tests whose subject is not blocking (on the
// code they guard against, fn would block until the test's gate opens).
func within(t *testing.T, limit time.Duration, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("%s did not return within %v", what, limit)
	}
}

func waitDone(ts ...*offload.Task) {
	for _, task := range ts {
		<-task.Done()
	}
}

// TestDepHistoryForgets: the dependence history holds only what live tasks
// need: addresses used out-then-in, only in, or by failed tasks are gone
// once their tasks are done and their failures reported.
func TestDepHistoryForgets(t *testing.T) {
	forEachKind(t, testDepHistoryForgets)
}

func testDepHistoryForgets(t *testing.T, k testKind) {
	k.start(t, 1)
	const n = 200
	var tasks []*offload.Task
	for i := 0; i < n; i++ {
		b, c := filled(4, 0), filled(4, 0)
		tasks = append(tasks,
			offload.Nowait(offload.DependOut(b)).Run(AddTo, int32(1), b),
			offload.Nowait(offload.DependIn(b)).Run(Nop),
			offload.Nowait(offload.DependIn(c)).Run(Nop))
	}
	if err := offload.Taskwait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if addrs, failed := offload.DepHistory(); addrs != 0 || failed != 0 {
		t.Errorf("after every task completed: the history holds %d addresses and %d failures, want none", addrs, failed)
	}

	// Failed tasks stay until their failure is reported, then go.
	const nf = 50
	bufs := make([][]int32, nf)
	tasks = tasks[:0]
	for i := range bufs {
		bufs[i] = filled(4, 0)
		tasks = append(tasks,
			offload.Nowait(offload.DependOut(bufs[i])).Run(Boom, int32(0), bufs[i]),
			offload.Nowait(offload.DependIn(bufs[i])).Run(Nop))
	}
	waitDone(tasks...)
	if addrs, failed := offload.DepHistory(); addrs != nf || failed != nf {
		t.Errorf("failures not reported yet: the history holds %d addresses and %d failures, want %d and %d", addrs, failed, nf, nf)
	}
	if err := offload.Taskwait(context.Background()); !errors.Is(err, offload.ErrKernelFailed) || errors.Is(err, offload.ErrDependency) {
		t.Errorf("Taskwait: %v, want the first kernel's own failure", err)
	}
	if addrs, failed := offload.DepHistory(); addrs != 0 || failed != 0 {
		t.Errorf("after Taskwait reported the failures: the history holds %d addresses and %d failures, want none", addrs, failed)
	}
	for i, b := range bufs {
		if err := offload.Nowait(offload.DependInOut(b)).Run(AddTo, int32(2), b).Wait(); err != nil || !allEqual(b, 2) {
			t.Fatalf("buffer %d: a new task after the failure was reported: %v, %v", i, err, b)
		}
	}
	if addrs, failed := offload.DepHistory(); addrs != 0 || failed != 0 {
		t.Errorf("at the end: %d addresses, %d failures", addrs, failed)
	}
}

// TestDependencyErrorOnce: every dependent of a failed kernel — on the same
// device (following it on its queue, host or device process), on another
// device, and host work — fails with ErrDependency and the kernel's error,
// naming the failed task and the dependent once, however long the chain.
// After the failure is reported (by Taskwait, or by the failed task's
// Wait), new tasks on the buffer run.
func TestDependencyErrorOnce(t *testing.T) {
	for _, devices := range []string{"host", "local:1", "cuda:0", "host,local:1", "host,cuda:0"} {
		t.Run(devices, func(t *testing.T) {
			startSet(t, devices)
			x := filled(8, 3)
			bad := offload.On(0).Nowait(offload.DependOut(x)).Run(Boom, int32(0), x)
			var deps []*offload.Task
			for i := 0; i < 150; i++ {
				dev := offload.On(i % offload.NumDevices())
				deps = append(deps, dev.Nowait(offload.DependInOut(x)).Run(AddTo, int32(1), x))
			}
			deps = append(deps, offload.Nowait(offload.DependIn(x)).Go("host check", func() error { return nil }))
			waitDone(append(deps, bad)...)
			if err := offload.Taskwait(context.Background()); !errors.Is(err, offload.ErrKernelFailed) || errors.Is(err, offload.ErrDependency) {
				t.Fatalf("Taskwait: %v, want the kernel's own failure", err)
			}
			badErr := bad.Wait()
			root := fmt.Sprintf("task %d (target test.boom)", bad.ID())
			for i, d := range deps {
				err := d.Wait()
				if !errors.Is(err, offload.ErrDependency) || !errors.Is(err, offload.ErrKernelFailed) {
					t.Fatalf("dependent %d: %v, want ErrDependency wrapping the kernel's failure", i, err)
				}
				msg := err.Error()
				if !strings.Contains(msg, root) || !strings.Contains(msg, fmt.Sprintf("task %d (", d.ID())) {
					t.Fatalf("dependent %d (task %d): %q should name itself and %s", i, d.ID(), msg, root)
				}
				if strings.Count(msg, "did not run") != 1 || len(msg) > len(badErr.Error())+200 {
					t.Fatalf("dependent %d: the error nests (%d bytes, the cause has %d): %.300q", i, len(msg), len(badErr.Error()), msg)
				}
			}
			if !allEqual(x, 3) {
				t.Errorf("x = %v: a failed chain changed the host buffer", x)
			}
			// Reported: new tasks run.
			if err := offload.On(0).Nowait(offload.DependInOut(x)).Run(AddTo, int32(1), x).Wait(); err != nil || !allEqual(x, 4) {
				t.Fatalf("a task after the failure was reported: %v, x = %v", err, x)
			}
			// The failed task's Wait reports its failure too.
			bad2 := offload.On(0).Nowait(offload.DependOut(x)).Run(Boom, int32(0), x)
			if err := bad2.Wait(); !errors.Is(err, offload.ErrKernelFailed) {
				t.Fatalf("second failing kernel: %v", err)
			}
			if err := offload.On(0).Nowait(offload.DependInOut(x)).Run(AddTo, int32(1), x).Wait(); err != nil || !allEqual(x, 5) {
				t.Fatalf("a task after Wait reported the failure: %v, x = %v", err, x)
			}
			if err := offload.Taskwait(context.Background()); err != nil {
				t.Errorf("Taskwait after every failure was reported: %v", err)
			}
		})
	}
}

// TestNowaitDoesNotBlock: creating tasks behind a kernel that holds its
// buffer's mapping (whose end deletes it) returns at once; the tasks run in
// order once the kernel is let go.
func TestNowaitDoesNotBlock(t *testing.T) {
	forEachKind(t, testNowaitDoesNotBlock)
}

func testNowaitDoesNotBlock(t *testing.T, k testKind) {
	k.needInProcess(t)
	k.start(t, 1)
	id, g := newGate(t)
	x := filled(16, 0)
	first := offload.Nowait(offload.DependOut(x)).Run(Hold, id, offload.ToFrom(x))
	const n = 100
	within(t, 20*time.Second, "creating tasks behind a held kernel", func() {
		for i := 0; i < n; i++ {
			offload.Nowait(offload.DependInOut(x)).Run(AddTo, int32(1), offload.ToFrom(x))
		}
	})
	select {
	case <-first.Done():
		t.Fatal("the held kernel finished before its gate opened")
	default:
	}
	g.release()
	if err := offload.Taskwait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !allEqual(x, n+1) {
		t.Errorf("x = %v, want all %d", x, n+1)
	}
	if e := offload.Entries(0); len(e) != 0 {
		t.Errorf("entries left: %+v", e)
	}
}

// TestStagedMemcpyDoesNotBlock: a device-to-device copy staged through the
// host (a host device and a device process) behind a held kernel returns at
// once, and copies once the kernel is done.
func TestStagedMemcpyDoesNotBlock(t *testing.T) {
	start(t, offload.WithDevices("host,local:1"))
	id, g := newGate(t)
	const size = 64
	p0, err := offload.On(0).Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	p1, err := offload.On(1).Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	defer offload.Free(p0)
	defer offload.Free(p1)
	if err := offload.Memcpy(p0, offload.HostPtr(filled(size/4, 7)), size); err != nil {
		t.Fatal(err)
	}
	tag := new(int32)
	held := offload.On(0).Nowait(offload.DependOut(tag)).Run(Hold, id, filled(1, 0))
	var cp *offload.Task
	within(t, 20*time.Second, "a staged nowait memcpy behind a held kernel", func() {
		cp = offload.On(0).Nowait(offload.DependIn(tag)).Memcpy(p1, p0, size)
	})
	// A dependent of the copy sees the copied data.
	out := filled(size/4, 0)
	after := offload.Nowait(offload.DependOut(tag)).Memcpy(offload.HostPtr(out), p1, size)
	g.release()
	if err := errors.Join(held.Wait(), cp.Wait(), after.Wait()); err != nil {
		t.Fatal(err)
	}
	if !allEqual(out, 7) {
		t.Errorf("copied %v, want 7s", out)
	}
}
