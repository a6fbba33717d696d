package offload_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/goffload/offload"
	"github.com/goffload/offload/tool"
)

// depTool records which device each construct ran on and the device waits
// of each.
type depTool struct {
	mu    sync.Mutex
	dev   map[uint64]int      // task → device
	waits map[uint64][]uint64 // task → tasks it waited for on its device
}

func (d *depTool) TargetBegin(e tool.TargetEvent) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dev == nil {
		d.dev = map[uint64]int{}
	}
	d.dev[e.Task] = e.Device
}
func (d *depTool) TargetEnd(tool.TargetEvent)    {}
func (d *depTool) DataOp(tool.DataEvent)         {}
func (d *depTool) KernelLaunch(tool.KernelEvent) {}
func (d *depTool) Wait(e tool.WaitEvent) {
	if !e.OnDevice {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.waits == nil {
		d.waits = map[uint64][]uint64{}
	}
	d.waits[e.Task] = append(d.waits[e.Task], e.For)
}

// TestAnyWriterOrdersItsDevicesReaders: a task that writes a part on a
// device is what the later readers of that part there wait for, not the
// copy that brought the older version there before it: that copy ran on
// the other device's queue, and waiting for it would be a message between
// the devices for every reader, long after the copy ended, where tasks are
// made ahead of their running (a stencil's rows, for as many steps as the
// program makes ahead). The values are those of the steps in order.
func TestAnyWriterOrdersItsDevicesReaders(t *testing.T) {
	tool := &depTool{}
	startTwoLocal(t, offload.WithTool(tool))
	id := time.Now().UnixNano()
	gate := filepath.Join(os.TempDir(), fmt.Sprintf("goffload-anygate-%d", id))
	t.Cleanup(func() { os.Remove(gate) })
	const n = 64
	a, b, p, q, r := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	y, z := make([]int64, n), make([]int64, n)
	for i := range n {
		a[i], b[i], q[i], r[i] = int64(i), 2, 1, int64(3*i)
	}
	any := func() offload.Async { return offload.Any().Nowait() }
	// A kernel not timed on a device yet is tried on each in turn: the
	// first task of each goes to device 0, the second to device 1.
	w0 := anyGate2.Nowait(any(), id, a, b, p) // device 0, held: p = 2000 + i
	anyStep.Nowait(any(), 0, y, z)            // device 0
	w1 := anyStep.Nowait(any(), 1, q, p)      // device 1: p copied from device 0, then written there
	anyMove.Nowait(any(), y, z)               // device 0
	r2 := anyMove.Nowait(any(), p, r)         // device 1: reads what w1 wrote there
	if err := os.WriteFile(gate, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := offload.Taskwait(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		wantP := (2000+int64(i))*3 + 1 + 1
		if p[i] != wantP || r[i] != (int64(3*i)+wantP)%1000 {
			t.Fatalf("p[%d] = %d, r[%d] = %d; want %d, %d", i, p[i], i, r[i], wantP, (int64(3*i)+wantP)%1000)
		}
	}
	tool.mu.Lock()
	defer tool.mu.Unlock()
	for name, task := range map[string]*offload.Task{"the gated writer": w0, "the writer on device 1": w1, "the reader": r2} {
		if want := map[*offload.Task]int{w0: 0, w1: 1, r2: 1}[task]; tool.dev[task.ID()] != want {
			t.Fatalf("%s (task %d) ran on device %d, want %d (the trials' order)", name, task.ID(), tool.dev[task.ID()], want)
		}
	}
	waited := false
	for _, p := range tool.waits[r2.ID()] {
		if p == w1.ID() {
			waited = true
		}
		if tool.dev[p] != 1 {
			t.Errorf("the reader on device 1 waits for task %d, on device %d", p, tool.dev[p])
		}
	}
	if !waited {
		t.Errorf("the reader waits for %v, not for the writer on its device (task %d)", tool.waits[r2.ID()], w1.ID())
	}
}
