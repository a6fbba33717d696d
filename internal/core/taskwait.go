// Waiting for tasks: Taskwait and WaitAll, and InTask, which refuses a
// wait from inside a task (it would wait for itself).

package core

import (
	"context"
	"reflect"
	"runtime"
	"slices"
	"sort"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/internal/workpool"
)

// runAsTask runs a task's body on the host. Its frame on the stack is how
// InTask knows that a goroutine runs a task (Go has no goroutine ids).
//
//go:noinline
func runAsTask(fn func() error) error { return fn() }

var runAsTaskName = runtime.FuncForPC(reflect.ValueOf(runAsTask).Pointer()).Name()

// A kernel's body, and the chunks of its loops, run below these functions:
// the entries table's kernel runners, a device process's reader that calls
// the body itself with LaunchHere, and the worker pool. Inside a kernel is
// inside a task too. The names come from the functions themselves.
var taskFrames = append([]string{runAsTaskName, workpool.WorkerFrame()}, entries.BodyFrames()...)

// InTask reports whether the calling goroutine runs a task's body: host
// work (Go), or a kernel of a task on the initial device. Goroutines that a
// task starts are not inside it.
func InTask() bool {
	pcs := make([]uintptr, 32)
	for {
		n := runtime.Callers(2, pcs)
		frames := runtime.CallersFrames(pcs[:n])
		for {
			f, more := frames.Next()
			if slices.Contains(taskFrames, f.Function) {
				return true
			}
			if !more {
				break
			}
		}
		if n < len(pcs) {
			return false
		}
		pcs = make([]uintptr, 2*len(pcs))
	}
}

// Taskwait waits for every task not completed yet, and for the synchronous
// constructs that went on in the background after their context was done.
// It returns the first error (by task number) among those tasks and the
// failures not reported yet, or ctx's error if it is done first.
// A failure is reported when Taskwait, Task.Wait or WaitAll returns it, or
// an error of a task it made fail. Once reported it is forgotten: Taskwait
// does not return it again, and tasks created afterwards do not depend on
// the failed task. Called from inside a task, Taskwait returns an error
// wrapping ErrInTask.
func (r *Runtime) Taskwait(ctx context.Context) error {
	if InTask() {
		return Errorf("goffload: taskwait: %w", ErrInTask)
	}
	ts := &r.tasks
	ts.mu.Lock()
	wait := make([]*Task, 0, len(ts.live)+len(ts.failed))
	for t := range ts.live {
		wait = append(wait, t)
	}
	for f := range ts.failed {
		wait = append(wait, f.task)
	}
	ts.mu.Unlock()
	var bg []chan struct{}
	for _, d := range r.Devices {
		bg = append(bg, d.background()...)
	}
	if r.Initial != nil {
		bg = append(bg, r.Initial.background()...)
	}
	for _, c := range bg {
		select {
		case <-c:
		case <-ctx.Done():
			return Errorf("goffload: taskwait: %w", ctx.Err())
		}
	}
	return WaitAll(ctx, wait)
}

// WaitAll waits for every task of ts and returns the first error among
// them by task number, or ctx's error if it is done first. It reports the
// failures it saw (see Taskwait).
func WaitAll(ctx context.Context, ts []*Task) error {
	sort.Slice(ts, func(i, j int) bool { return ts[i].ID < ts[j].ID })
	for _, t := range ts {
		if t.fin.Load() {
			continue
		}
		select {
		case <-t.Done():
		case <-ctx.Done():
			return Errorf("goffload: waiting for tasks: %w", ctx.Err())
		}
	}
	var first error
	for _, t := range ts {
		if t.err != nil {
			if first == nil {
				first = t.err
			}
			t.report()
		}
	}
	return first
}

// Enqueued reports whether t's device work has been enqueued (its event is
// recorded), for tests of the lowering.
func (t *Task) Enqueued() bool { return t.event() != nil }
