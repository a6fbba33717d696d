package core

import (
	"context"
	"reflect"
	"slices"
	"sync/atomic"
	"time"

	"errors"
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
)

// taskRuntime is a runtime with no devices: host work only.
func taskRuntime() *Runtime { return &Runtime{Initial: &Device{Num: 0}} }

func taskDep(kind DepKind, p *int) Dep {
	return Dep{Kind: kind, Addr: uintptr(unsafe.Pointer(p)), Keep: unsafe.Pointer(p)}
}

// TestTaskHistoryBounded: a long run over many objects, with writers, readers
// and failures, leaves nothing in the history once the tasks are done and
// their failures reported.
func TestTaskHistoryBounded(t *testing.T) {
	r := taskRuntime()
	objs := make([]*int, 64)
	for i := range objs {
		objs[i] = new(int)
	}
	boom := errors.New("boom")
	var ts []*Task
	for i := 0; i < 2000; i++ {
		a, b := objs[i%len(objs)], objs[(i*7+3)%len(objs)]
		fail := i%97 == 0
		ts = append(ts, r.SpawnHost(fmt.Sprint("t", i), func() error {
			if fail {
				return boom
			}
			return nil
		}, []Dep{taskDep(DepIn, a), taskDep(DepInOut, b)}))
	}
	for _, task := range ts {
		<-task.Done()
	}
	if addrs, failed := r.DepEntries(); failed == 0 || addrs == 0 {
		t.Fatalf("before the failures are reported: %d addresses, %d failures; want some of each", addrs, failed)
	}
	if err := r.Taskwait(context.Background()); !errors.Is(err, boom) || errors.Is(err, ErrDependency) {
		t.Fatalf("Taskwait: %v, want the first task's own failure", err)
	}
	if addrs, failed := r.DepEntries(); addrs != 0 || failed != 0 {
		t.Fatalf("after Taskwait: %d addresses, %d failures; want none", addrs, failed)
	}
	for _, task := range ts {
		if err := task.Err(); err != nil && !errors.Is(err, boom) {
			t.Fatalf("task %d: %v does not wrap the cause", task.ID, err)
		}
	}
}

// TestTaskFailureOnce: a chain of dependents of one failure gets one error each
// that names the failed task and the dependent, not one level per hop; a
// failure reported by Wait is forgotten, and new tasks run.
func TestTaskFailureOnce(t *testing.T) {
	r := taskRuntime()
	x := new(int)
	boom := errors.New("boom")
	gate := make(chan struct{})
	root := r.SpawnHost("root", func() error { <-gate; return boom }, []Dep{taskDep(DepOut, x)})
	var chain []*Task
	for i := 0; i < 500; i++ {
		kind := DepInOut
		if i%3 == 0 {
			kind = DepIn
		}
		chain = append(chain, r.SpawnHost(fmt.Sprint("dep", i), func() error { return nil }, []Dep{taskDep(kind, x)}))
	}
	close(gate)
	want := fmt.Sprintf("task %d (root) failed: boom", root.ID)
	for _, task := range chain {
		err := task.Wait(context.Background())
		if !errors.Is(err, ErrDependency) || !errors.Is(err, boom) || !strings.Contains(err.Error(), want) ||
			!strings.Contains(err.Error(), fmt.Sprintf("task %d (%s)", task.ID, task.Name)) {
			t.Fatalf("task %d: %v", task.ID, err)
		}
		if strings.Count(err.Error(), "did not run") != 1 {
			t.Fatalf("task %d: nested error %q", task.ID, err)
		}
	}
	// The dependents' Waits reported the failure: new tasks run.
	if err := r.SpawnHost("after", func() error { return nil }, []Dep{taskDep(DepInOut, x)}).Wait(context.Background()); err != nil {
		t.Fatalf("a task after the failure was reported: %v", err)
	}
	if err := r.Taskwait(context.Background()); err != nil {
		t.Fatalf("Taskwait after the failure was reported: %v", err)
	}
	if addrs, failed := r.DepEntries(); addrs != 0 || failed != 0 {
		t.Fatalf("%d addresses, %d failures left", addrs, failed)
	}
}

// TestTaskInTask: Taskwait inside a task is an error, outside it waits.
func TestTaskInTask(t *testing.T) {
	r := taskRuntime()
	if InTask() {
		t.Fatal("the test's goroutine is not a task")
	}
	var inside error
	task := r.SpawnHost("waits for itself", func() error { inside = r.Taskwait(context.Background()); return nil }, nil)
	if err := r.Taskwait(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-task.Done()
	if !errors.Is(inside, ErrInTask) || !errors.Is(inside, ErrBadArgument) {
		t.Fatalf("Taskwait inside a task: %v", inside)
	}
}

// inTaskRuns names each run's kernel apart (the registry is global; -count=N).
var inTaskRuns atomic.Int64

// InTask knows a kernel's goroutines by their functions' names: a rename in
// plugin or workpool must show here, not as a Taskwait that deadlocks.
func TestInTaskInsideKernels(t *testing.T) {
	if InTask() {
		t.Fatal("a test's goroutine counts as inside a task")
	}
	pool := plugin.NewPool(2)
	defer pool.Close()
	var inBody, inChunks atomic.Int32
	k, err := entries.RegisterKernel(fmt.Sprintf("core.intask.%d", inTaskRuns.Add(1)), func(ctx interface{ For(int, func(lo, hi int)) }) {
		if InTask() {
			inBody.Add(1)
		}
		ctx.For(64, func(lo, hi int) {
			if InTask() {
				inChunks.Add(1)
			}
		})
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Call(plugin.NewKernelCtx(0, pool), []reflect.Value{}); err != nil {
		t.Fatal(err)
	}
	if inBody.Load() != 1 {
		t.Error("a kernel's body does not count as inside a task")
	}
	if inChunks.Load() == 0 {
		t.Error("a kernel's loop chunks do not count as inside a task")
	}
	// A chunk runs on the caller when no worker is idle: try until one ran
	// on a worker (on a loaded machine that can take many tries).
	var inPool atomic.Bool
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !inPool.Load(); {
		pool.For(2, func(lo, hi int) {
			if lo > 0 && InTask() {
				inPool.Store(true)
			}
		})
	}
	if !inPool.Load() {
		t.Error("chunks on the worker pool do not count as inside a task")
	}
}

// TestTaskOverlappingSections: dependences on array sections that overlap
// but start at different addresses are ordered as one object's; disjoint
// sections are not; the histories go once the tasks are done.
func TestTaskOverlappingSections(t *testing.T) {
	r := taskRuntime()
	sec, register := sections(r)
	var all []*Task
	reg := func(deps ...Dep) (*Task, []*Task) {
		task, p := register(deps...)
		all = append(all, task)
		return task, p
	}
	w1, p := reg(sec(DepOut, 0, 10))
	wantPreds(t, "out [0,10)", p)
	r1, p := reg(sec(DepIn, 5, 15))
	wantPreds(t, "in [5,15) after out [0,10)", p, w1)
	r2, p := reg(sec(DepIn, 10, 20))
	wantPreds(t, "in [10,20): disjoint from [0,10)", p)
	w2, p := reg(sec(DepOut, 12, 14))
	wantPreds(t, "out [12,14) after readers of [5,15) and [10,20)", p, r1, r2)
	_, p = reg(sec(DepInOut, 0, 64))
	wantPreds(t, "inout of the whole after everything", p, w1, r1, r2, w2)
	x, p := reg(sec(DepIn, 30, 31), sec(DepIn, 40, 41))
	wantPreds(t, "in after the whole's writer", p, all[4])
	_ = x
	for _, task := range all {
		r.complete(task, nil, nil)
	}
	if addrs, _ := r.DepEntries(); addrs != 0 || r.tasks.graph.byAddr.Len() != 0 || r.tasks.graph.maxLen != 0 {
		t.Fatalf("after the tasks: %d addresses, %d ordered, maxLen %d; want none", addrs, r.tasks.graph.byAddr.Len(), r.tasks.graph.maxLen)
	}
	// A reader of an overlapping section finished: a writer no longer waits.
	_, p = reg(sec(DepOut, 3, 8))
	wantPreds(t, "out after finished tasks", p)
}

// TestTaskSectionsAtOneAddress: a dependence is ordered by its own section,
// not by the largest section named at its first address: a halo row's copy
// (in: row 7, where a band's read of rows 7..15 began) does not wait for
// the neighbour band's write of rows 8..15. A writer at an address where
// a larger section was read does not stand for that read: a later writer
// on its far part waits for the read, and not for the writer, whose row it
// does not touch.
func TestTaskSectionsAtOneAddress(t *testing.T) {
	sec, reg := sections(taskRuntime())
	band, _ := reg(sec(DepIn, 7, 16))    // a band reads its rows and the halo row 7
	upper, p := reg(sec(DepInOut, 0, 8)) // the band above writes rows 0..7
	wantPreds(t, "inout [0,8) after in [7,16)", p, band)
	lower, p := reg(sec(DepInOut, 8, 16)) // the band itself writes rows 8..15
	wantPreds(t, "inout [8,16) after in [7,16)", p, band)
	halo, p := reg(sec(DepIn, 7, 8)) // the halo row's copy reads row 7
	wantPreds(t, "in [7,8): the writer of row 7 only", p, upper)
	_ = halo
	// A writer of row 7 at the address where [7,16) was read: a later
	// writer of [12,14) waits for that read (through the band's writer,
	// which waited for it), not for the writer of row 7; a reader of
	// [12,13) waits for the band's writer alone.
	w7, p := reg(sec(DepOut, 7, 8))
	wantPreds(t, "out [7,8) after the readers of row 7 and its writer", p, upper, band, halo)
	r12, p := reg(sec(DepIn, 12, 13))
	wantPreds(t, "in [12,13) after the band's writer", p, lower)
	_, p = reg(sec(DepOut, 12, 14))
	wantPreds(t, "out [12,14) after the reader of row 12 and the read of [7,16), not the writer of row 7", p, r12, lower, band)
	_ = w7
}

// sections returns, for tests of r's dependence history on sections of one
// array of 64 int64s, a depend clause of kind on its elements [lo, hi),
// and a registration of a new task (not run) with clauses.
func sections(r *Runtime) (sec func(kind DepKind, lo, hi int) Dep, reg func(deps ...Dep) (*Task, []*Task)) {
	buf := make([]int64, 64)
	sec = func(kind DepKind, lo, hi int) Dep {
		return Dep{Kind: kind, Addr: uintptr(unsafe.Pointer(&buf[lo])), Size: uintptr(hi-lo) * 8, Keep: unsafe.Pointer(&buf[0])}
	}
	reg = func(deps ...Dep) (*Task, []*Task) {
		task := &Task{done: make(chan struct{})}
		return task, r.register(task, deps)
	}
	return sec, reg
}

// wantPreds fails t unless a task whose predecessors are got comes after
// exactly the tasks want: got are some of them, and the rest come before
// one of got by edges (a predecessor that another one waits for is not
// repeated).
func wantPreds(t *testing.T, name string, got []*Task, want ...*Task) {
	t.Helper()
	for _, g := range got {
		if !slices.Contains(want, g) {
			t.Fatalf("%s: %d predecessors, one not among the %d wanted", name, len(got), len(want))
		}
	}
	for _, w := range want {
		if !slices.Contains(got, w) && !reaches(got, w) {
			t.Fatalf("%s: not ordered after task %d (%d predecessors, %d wanted)", name, w.ID, len(got), len(want))
		}
	}
}

// reaches reports whether one of from comes after p by edges.
func reaches(from []*Task, p *Task) bool {
	seen := map[*Task]bool{}
	for len(from) > 0 {
		q := from[0]
		from = from[1:]
		if seen[q] {
			continue
		}
		seen[q] = true
		if slices.Contains(q.direct, p) {
			return true
		}
		from = append(from, q.direct...)
	}
	return false
}

// TestTaskReadersWaitedForFromElsewhere: the stencil of jacobi.SolveAny,
// every step created before any runs. A reader of rows 0..2 at row 0,
// where no task writes, and writers of row 1 and of rows 2..9 from their
// own addresses, step after step. A writer waits for the readers since its
// own address's last writer; it needs no edge to older readers, which that
// writer waited for: its predecessors stay a few, where they grew with
// every step created before.
func TestTaskReadersWaitedForFromElsewhere(t *testing.T) {
	sec, reg := sections(taskRuntime())
	var row1, rows2 *Task // the last writers
	for step := range 200 {
		read, _ := reg(sec(DepIn, 0, 3))
		w1, p := reg(sec(DepOut, 1, 2))
		want := []*Task{read}
		if row1 != nil {
			want = append(want, row1)
		}
		wantPreds(t, fmt.Sprintf("step %d: out [1,2)", step), p, want...)
		w2, p := reg(sec(DepOut, 2, 10))
		want = []*Task{read}
		if rows2 != nil {
			want = append(want, rows2)
		}
		wantPreds(t, fmt.Sprintf("step %d: out [2,10)", step), p, want...)
		row1, rows2 = w1, w2
	}
	// A writer of row 0, the first there: it waits for every reader left
	// (none is done), none of the writers it follows having waited for
	// them.
	_, p := reg(sec(DepOut, 0, 1))
	if len(p) != 200 {
		t.Errorf("out [0,1), the first there: %d predecessors, want the 200 readers", len(p))
	}
}

// TestTaskWriteReplacesCoveredHistories: a writer whose section covers the
// sections other tasks named at other addresses replaces their histories
// there: a later task on those bytes comes after the writer alone, not
// also after the older writer and readers it already waited for (tasks
// made far ahead of their running would wait for each of them, on a device
// across devices a message each). A section the writer covers only in part
// keeps its history.
func TestTaskWriteReplacesCoveredHistories(t *testing.T) {
	sec, task := sections(taskRuntime())
	w1, _ := task(sec(DepOut, 4, 6)) // a writer at 4
	r1, p := task(sec(DepIn, 4, 5))  // a reader at 4, after w1
	wantPreds(t, "reader of [4,5)", p, w1)
	r2, p := task(sec(DepIn, 8, 12)) // a reader at 8
	wantPreds(t, "first reader of [8,12)", p)
	part, _ := task(sec(DepOut, 10, 14)) // at 10: covered in part by the writer below
	all, p := task(sec(DepInOut, 2, 12)) // covers [4,6) and [8,12), not [10,14)
	wantPreds(t, "writer of [2,12)", p, w1, r1, r2, part)
	_, p = task(sec(DepIn, 4, 5)) // at 4: after all alone
	wantPreds(t, "reader of [4,5) after the covering write", p, all)
	_, p = task(sec(DepInOut, 8, 9)) // at 8: after all alone
	wantPreds(t, "writer of [8,9) after the covering write", p, all)
	_, p = task(sec(DepIn, 12, 13)) // at 12: [10,14)'s writer is still there
	wantPreds(t, "reader of [12,13)", p, part)
}

// TestTaskEdgesNotRepeated: a task's predecessor that another of its
// predecessors waits for by an edge of its own is left out: a reader of a
// part copied in waits for the copy, not also for the part's writer, which
// the copy waits for (on another device, each edge is a message).
func TestTaskEdgesNotRepeated(t *testing.T) {
	sec, reg := sections(taskRuntime())
	writer, _ := reg(sec(DepOut, 0, 8))
	copied, p := reg(sec(DepIn, 0, 8), sec(DepOut, 32, 40))
	if len(p) != 1 || p[0] != writer {
		t.Fatalf("the copy: %d predecessors, want the writer", len(p))
	}
	_, p = reg(sec(DepIn, 0, 8), sec(DepIn, 32, 40))
	if len(p) != 1 || p[0] != copied {
		t.Fatalf("the reader: %d predecessors, want the copy alone", len(p))
	}
}

// TestTaskWriterDoesNotStandForWiderWrite: a writer of one row at the
// address where a wider write began (a band's fill, then the writes of its
// first row step after step) does not stand for the rest of the wider
// write: a task on the rest waits for the wide writer, not for the row's
// writers. The histories go once the tasks are done.
func TestTaskWriterDoesNotStandForWiderWrite(t *testing.T) {
	r := taskRuntime()
	sec, reg := sections(r)
	fill, _ := reg(sec(DepOut, 8, 16))
	var rows []*Task
	for step := range 3 {
		row, p := reg(sec(DepInOut, 8, 9))
		want := []*Task{fill}
		if step > 0 {
			want = []*Task{rows[step-1]}
		}
		wantPreds(t, fmt.Sprintf("step %d: inout [8,9)", step), p, want...)
		rows = append(rows, row)
	}
	rest, p := reg(sec(DepIn, 9, 16))
	wantPreds(t, "in [9,16) after the fill alone", p, fill)
	w, p := reg(sec(DepOut, 12, 13))
	wantPreds(t, "out [12,13) after the fill and the reader of [9,16)", p, fill, rest)
	for _, task := range append(append([]*Task{fill}, rows...), rest, w) {
		r.complete(task, nil, nil)
	}
	if addrs, _ := r.DepEntries(); addrs != 0 {
		t.Fatalf("after the tasks: %d addresses left", addrs)
	}
}
