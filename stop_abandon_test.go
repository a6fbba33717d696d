package offload_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goffload/offload"
)

// lateGate drives the kernel of TestStopAbandonedTask: a new one each run.
type lateGate struct{ start, block chan struct{} }

var lateNow atomic.Pointer[lateGate]

// lateWriter ignores its Ctx: it writes 42 after its gate's block closes.
var lateWriter = offload.MustKernel("test.stop.latewriter", func(ctx offload.Ctx, x []int32) {
	g := lateNow.Load()
	g.start <- struct{}{}
	<-g.block
	x[0] = 42
})

// lineWriter is an info output that tells when a line holding want comes.
type lineWriter struct {
	mu   sync.Mutex
	buf  strings.Builder
	want string
	seen chan struct{}
	once sync.Once
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

func (w *lineWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// TestStopAbandonedTask (issue 34): a nowait kernel on a host device that
// ignores its Ctx outlives StopContext. Its task reports that Stop
// abandoned it (an error from Wait, at once), and the copy back that
// followed the kernel never writes into the program's memory, also when
// the kernel returns long after Stop, and after another Start and Stop.
func TestStopAbandonedTask(t *testing.T) {
	t.Setenv("GOFFLOAD_STOP_GRACE", "1h")
	gate := &lateGate{start: make(chan struct{}, 1), block: make(chan struct{})}
	lateNow.Store(gate)
	info := &lineWriter{want: "abandoned by Stop, ended", seen: make(chan struct{})}
	if err := offload.Start(offload.WithDevices("host:2"), offload.WithInfo("offload", info)); err != nil {
		t.Fatal(err)
	}
	out := make([]int32, 4)
	task := offload.On(0).Nowait().Run(lateWriter, offload.From(out))
	<-gate.start // the kernel runs
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err := offload.StopContext(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "test.stop.latewriter") {
		t.Fatalf("StopContext: %v, want DeadlineExceeded naming the kernel", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- task.Wait() }()
	select {
	case err = <-waited:
	case <-time.After(30 * time.Second):
		t.Fatal("the abandoned task's Wait waits for its kernel")
	}
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, offload.ErrDeviceLost) || !strings.Contains(err.Error(), "abandoned by Stop") {
		t.Errorf("the abandoned task's Wait: %v, want an error saying Stop abandoned it (DeadlineExceeded, ErrDeviceLost)", err)
	}
	// The runtime starts and stops again meanwhile.
	if err := offload.Start(offload.WithDevices("host:2")); err != nil {
		t.Fatal(err)
	}
	if err := offload.On(0).Run(benchTouch, make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	if err := offload.Stop(); err != nil {
		t.Fatal(err)
	}
	close(gate.block) // the kernel writes its 42 and returns
	select {
	case <-info.seen: // the queue went past the copy back
	case <-time.After(30 * time.Second):
		t.Fatalf("the abandoned task's end was never said:\n%s", info)
	}
	if out[0] != 0 {
		t.Errorf("after Stop, the abandoned task's copy back wrote %d into the program's memory", out[0])
	}
	if err := task.Wait(); err == nil {
		t.Error("the abandoned task's Wait returns nil once its kernel ended")
	}
}
