package offload_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goffload/offload"
)

// TestAnyEnterDataWholeBuffer: a buffer filled half by half with
// Any-tasks, then read across the halves by a task, works once
// Any().EnterData names it whole; without it the first half is the
// extent tracked, and the task across is refused with an error that says
// what to do. EnterData takes To and Alloc clauses only, and refuses a
// buffer that overlaps one in use without holding it.
func TestAnyEnterDataWholeBuffer(t *testing.T) {
	startTwoLocal(t)
	const n = 64
	for _, named := range []bool{true, false} {
		x, y := make([]int64, n), make([]int64, n/2)
		if named {
			if err := offload.Any().EnterData(offload.To(x).Named("x")); err != nil {
				t.Fatal(err)
			}
		}
		anySet.Nowait(offload.Any().Nowait(), 0, x[:n/2])
		anySet.Nowait(offload.Any().Nowait(), 100, x[n/2:])
		err := anyStep.Run(offload.Any(), 1, x[n/4:3*n/4], y) // y = x[n/4:3n/4] + 1
		werr := offload.Taskwait(context.Background())
		if !named {
			if !errors.Is(err, offload.ErrBadMap) || !strings.Contains(err.Error(), "Any().EnterData(To(x))") {
				t.Errorf("across the halves, not named whole: %v, want ErrBadMap that names Any().EnterData", err)
			}
			continue
		}
		if err != nil || werr != nil {
			t.Fatalf("across the halves, named whole: %v; Taskwait: %v", err, werr)
		}
		for i := range y {
			xi := n/4 + i
			want := int64(xi) + 1
			if xi >= n/2 {
				want = 100 + int64(xi-n/2) + 1
			}
			if y[i] != want {
				t.Fatalf("y[%d] = %d, want %d", i, y[i], want)
			}
		}
	}
	x := make([]int64, n)
	if err := offload.Any().EnterData(offload.From(x)); !errors.Is(err, offload.ErrBadMap) {
		t.Errorf("Any().EnterData(From(x)): %v, want ErrBadMap", err)
	}
	anySet.Nowait(offload.Any().Nowait(), 0, x[:n/2])
	if err := offload.Any().EnterData(offload.To(x)); !errors.Is(err, offload.ErrBadMap) {
		t.Errorf("Any().EnterData of a buffer holding one in use: %v, want ErrBadMap", err)
	}
	if err := offload.Any().EnterData(offload.Alloc(x[:n/4])); err != nil {
		t.Errorf("Any().EnterData of a section inside one in use: %v", err)
	}
	if err := offload.Taskwait(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestAnyEnterDataFirstVersion: the first version of a buffer named with
// Any().EnterData is kept once a task reads a part of it that no task
// wrote, so that the task runs again when its device is lost (the
// program's values, not a task's, are its inputs).
func TestAnyEnterDataFirstVersion(t *testing.T) {
	pid := startTwoLocal(t)
	id := time.Now().UnixNano()
	gate := filepath.Join(os.TempDir(), fmt.Sprintf("goffload-anygate-%d", id))
	t.Cleanup(func() { os.Remove(gate) })
	const n = 64
	x, c, y, z, c0 := make([]int64, n), make([]int64, n/2), make([]int64, n/2), make([]int64, n/2), make([]int64, n/2)
	for i := range x {
		x[i] = int64(3 * i)
	}
	if err := offload.Any().EnterData(offload.To(x)); err != nil {
		t.Fatal(err)
	}
	// Untimed, the kernel is tried on device 0, then on device 1.
	g0 := anyGate2.Nowait(offload.Any().Nowait(), id, y, z, c0)
	g1 := anyGate2.Nowait(offload.Any().Nowait(), id, x[:n/2], x[n/2:], c) // device 1: c = x[n/2:]*1000 + x[:n/2]
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(g0.Wait(), g1.Wait(), offload.Taskwait(context.Background())); err != nil {
		t.Fatal(err)
	}
	for i := range c {
		if want := int64(3*(i+n/2))*1000 + int64(3*i); c[i] != want {
			t.Fatalf("c[%d] = %d, want %d", i, c[i], want)
		}
	}
}

// TestAnySameSectionTwice: a kernel may read one section through two
// parameters (it is copied once); reading and writing it through two is
// refused with ErrBadMap, as the task's meaning would be the order its
// parameters are copied in.
func TestAnySameSectionTwice(t *testing.T) {
	startTwoLocal(t)
	id := time.Now().UnixNano()
	gate := filepath.Join(os.TempDir(), fmt.Sprintf("goffload-anygate-%d", id))
	t.Cleanup(func() { os.Remove(gate) })
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	y, c := make([]int64, 16), make([]int64, 16)
	for i := range y {
		y[i] = int64(i)
	}
	for range 3 { // on each device, then where the model puts it
		if err := anyGate2.Run(offload.Any(), id, y, y, c); err != nil {
			t.Fatalf("one section read through two parameters: %v", err)
		}
	}
	if err := anyStep.Run(offload.Any(), 1, y, y); !errors.Is(err, offload.ErrBadMap) || !strings.Contains(err.Error(), "twice") {
		t.Errorf("one section read and written through two parameters: %v, want ErrBadMap saying twice", err)
	}
	if err := offload.Taskwait(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := range c {
		if want := int64(i)*1000 + int64(i); c[i] != want {
			t.Fatalf("c[%d] = %d, want %d", i, c[i], want)
		}
	}
}
