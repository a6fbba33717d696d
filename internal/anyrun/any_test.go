package anyrun

import (
	"context"
	"github.com/goffload/offload/internal/core"
	"github.com/goffload/offload/internal/fakedev"
	"testing"

	"github.com/goffload/offload/internal/mapping"
)

// anyInc places kCopyInc (y = x+1) as an Any-task on r.
func anyInc(t *testing.T, r *core.Runtime, x, y []int32) *core.Task {
	t.Helper()
	tk, err := AnyTarget(r, AnyLaunch{Kernel: kCopyInc, Plain: true,
		Args: []core.KernelArg{sliceArg(x, "x", mapping.MapTo), sliceArg(y, "y", mapping.MapFrom)}})
	if err != nil {
		t.Fatalf("AnyTarget: %v", err)
	}
	return tk
}

// TestAnyRerunOnFakeLoss: an Any-task whose device is lost while its
// kernel runs is run again on the other device, and its output, whose
// only copy was on the lost device, is recomputed into the program's
// memory; a later task reads it there. No process is killed: the fake
// device dies.
func TestAnyRerunOnFakeLoss(t *testing.T) {
	var stalls [2]*fakedev.Stall
	r, fs := newFakeRuntime(t, 2, func(i int, d *fakedev.Device) { stalls[i] = d.StallAt(fakedev.OpLaunch, 1) })
	if !placer(r).rr.on {
		t.Fatal("re-runs are off on two devices")
	}
	a, b, c := filled(64, 1), make([]int32, 64), make([]int32, 64)
	t1 := anyInc(t, r, a, b)
	var lost int
	select {
	case <-stalls[0].Reached():
		lost = 0
	case <-stalls[1].Reached():
		lost = 1
	case <-t1.Done():
		t.Fatalf("the task ended before its launch: %v", t1.Err())
	}
	stalls[1-lost].Release() // the re-run's launch goes through
	fs[lost].Die()
	stalls[lost].Release()
	if err := waitTask(t, t1); err != nil {
		t.Fatalf("task on the lost device %d: %v, want it run again on the other", lost, err)
	}
	if err := AnyWaited(context.Background(), []*core.Task{t1}); err != nil {
		t.Fatalf("Wait's copy back: %v", err)
	}
	if !allEqual(b, 2) {
		t.Fatalf("b = %v…, want 2s: recomputed from the re-run", b[:4])
	}
	t2 := anyInc(t, r, b, c)
	if err := waitTask(t, t2); err != nil {
		t.Fatal(err)
	}
	if err := AnyHandback(r, context.Background(), true); err != nil {
		t.Fatalf("hand-back: %v", err)
	}
	if !allEqual(c, 3) {
		t.Fatalf("c = %v…, want 3s", c[:4])
	}
}

// TestAnyOwnsRefusesHandPlaced: while an Any-task uses a buffer, the
// hand-placed constructs' hook refuses it, and the hand-back gives it
// back to the program.
func TestAnyOwnsRefusesHandPlaced(t *testing.T) {
	r, _ := newFakeRuntime(t, 2, nil)
	a, b := filled(16, 1), make([]int32, 16)
	if err := AnyOwns(r, bufOf(a, "a")); err != nil {
		t.Fatalf("before any Any-task: %v", err)
	}
	if err := waitTask(t, anyInc(t, r, a, b)); err != nil {
		t.Fatal(err)
	}
	if err := AnyOwns(r, bufOf(b[4:8], "b")); err == nil {
		t.Fatal("a section of an Any-task's buffer: not refused")
	}
	if err := AnyHandback(r, context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if err := AnyOwns(r, bufOf(b, "b")); err != nil || !allEqual(b, 2) {
		t.Fatalf("after the hand-back: %v, b = %v…, want no error and 2s", err, b[:4])
	}
}
