package offload_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goffload/offload"
)

var (
	// anySet2 is anySet under another name: its first task is tried on
	// device 0.
	anySet2 = offload.MustKernel2("test.any.set2", func(ctx offload.Ctx, k int64, dst offload.Out[int64]) {
		for i := range dst {
			dst[i] = k + int64(i)
		}
	})
	// anyGate2 writes b*1000 + a into c once the gate file of id exists
	// (or after 30 seconds).
	anyGate2 = offload.MustKernel4("test.any.gate2", func(ctx offload.Ctx, id int64, a, b offload.In[int64], c offload.Out[int64]) {
		waitAnyGate(id)
		for i := range c {
			c[i] = b[i]*1000 + a[i]
		}
	})
)

// TestAnyRerunReadsSurvivingVersions: a task on device 1 that is lost
// re-runs on the data the others still hold, and recomputes only what
// they do not. Its input a, last written by a task on device 0, is read
// from device 0 (that task is not run again); its input b, written on
// device 1 only, is recomputed by re-running b's writer, whose own input
// is a's older version: device 0 held that version once, but a task
// placed there since overwrote it, so a's first writer runs again too
// (reading device 0's copy would give b from a's newer version). The
// results are those of the steps in program order.
func TestAnyRerunReadsSurvivingVersions(t *testing.T) {
	var info syncBuffer
	pid := startTwoLocal(t, offload.WithInfo("placement", &info))
	id := time.Now().UnixNano()
	gate := filepath.Join(os.TempDir(), fmt.Sprintf("goffload-anygate-%d", id))
	t.Cleanup(func() { os.Remove(gate) })
	const n = 64
	a, b, c, c0, y, z := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	for i := range b {
		b[i] = 2
	}
	any := func() offload.Async { return offload.Any().Nowait() }
	// A kernel not timed on a device yet is tried on each in turn: its
	// first task goes to device 0, its second to device 1.
	t1 := anySet.Nowait(any(), 5, a) // device 0: a's first version
	<-t1.Done()
	dummy := anyStep.Nowait(any(), 0, y, z) // device 0
	tb := anyStep.Nowait(any(), 1, a, b)    // device 1: b from a's first version, only there
	<-tb.Done()
	t2 := anySet2.Nowait(any(), 9, a) // device 0: a's second version, over the first
	<-t2.Done()
	g0 := anyGate2.Nowait(any(), id, y, z, c0) // device 0, held at the gate
	tc := anyGate2.Nowait(any(), id, a, b, c)  // device 1, held at the gate
	want := []string{"test.any.set on device 0", "test.any.step on device 0", "test.any.step on device 1",
		"test.any.set2 on device 0", "test.any.gate2 on device 0", "test.any.gate2 on device 1"}
	var got []string
	for _, l := range strings.Split(grepLines(info.String(), " on device "), "\n") {
		if _, rest, ok := strings.Cut(l, "Any(): "); ok {
			if name, where, ok := strings.Cut(rest, " on device "); ok && !strings.Contains(name, " ") {
				got = append(got, name+" on device "+where[:1])
			}
		}
	}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		os.WriteFile(gate, nil, 0o644)
		t.Fatalf("placed: %q, want %q (untimed kernels are tried on device 0, then 1):\n%s", got, want, grepLines(info.String(), "Any()"))
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i, tk := range []*offload.Task{t1, dummy, tb, t2, g0, tc} {
		if err := tk.Wait(); err != nil {
			t.Errorf("task %d: %v", i, err)
		}
	}
	if err := offload.Taskwait(context.Background()); err != nil {
		t.Fatalf("Taskwait: %v", err)
	}
	for i := range n {
		wa, wb := 9+int64(i), 2*3+5+int64(i)+1
		if a[i] != wa || b[i] != wb || c[i] != wb*1000+wa || c0[i] != 0 {
			t.Fatalf("[%d]: a %d, b %d, c %d, c0 %d; want %d, %d, %d, 0", i, a[i], b[i], c[i], c0[i], wa, wb, wb*1000+wa)
		}
	}
	out := info.String()
	lines := grepLines(out, "ran again") + grepLines(out, " read from device ")
	for _, w := range []string{"test.any.gate2 ran again", "test.any.step ran again", "test.any.set ran again", "test.any.set2's output"} {
		if !strings.Contains(lines, w) {
			t.Errorf("no %q in the info lines:\n%s", w, lines)
		}
	}
	if strings.Contains(lines, "test.any.set2 ran again") {
		t.Errorf("a's second version, held by device 0, was recomputed:\n%s", lines)
	}
}

// TestAnyLearnsDeviceTimes: the placement model learns Any-tasks' kernel
// times from the devices' own clocks (local devices time their queues'
// operations once Any-tasks are placed), not only from when the host
// sees their ends. A task whose device's report comes after the host saw
// it made may miss it (its time is then the host's), so most, not all.
func TestAnyLearnsDeviceTimes(t *testing.T) {
	startTwoLocal(t)
	x, y := make([]int64, 1024), make([]int64, 1024)
	const tasks = 40
	for range tasks {
		if err := anyStep.Run(offload.Any(), 1, x, y); err != nil {
			t.Fatal(err)
		}
	}
	if err := offload.Taskwait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := offload.AnyDeviceTimed(); n < tasks/2 {
		t.Errorf("%d of %d Any-tasks timed by their device, want most", n, tasks)
	}
}
