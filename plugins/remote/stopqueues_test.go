package remote_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/goffload/offload/internal/proctest"
	"github.com/goffload/offload/plugin"
)

// TestCloseQueuesPastRecord: queues whose last operation was a Record of
// an event the device said fired close without a round trip each, as a
// Stop closes the thousands of queues the core pooled after many tasks at
// once (issue 47: 2.1–4.3 s). The device is stopped while they close: a
// Close that waited for its answer would wait for the device timeout. The
// device then still works, the queues' ends told it before its next work.
func TestCloseQueuesPastRecord(t *testing.T) {
	t.Setenv("GOFFLOAD_DEVICE_TIMEOUT", "60s")
	d := openLocal(t, 1)[0]
	const n = 500
	qs := make([]plugin.Queue, n)
	for i := range qs {
		q, err := d.NewQueue()
		if err != nil {
			t.Fatal(err)
		}
		ev, err := d.NewEvent()
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Launch(nopK, nil); err != nil {
			t.Fatal(err)
		}
		if err := q.Record(ev); err != nil {
			t.Fatal(err)
		}
		if err := ev.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if err := ev.Close(); err != nil {
			t.Fatal(err)
		}
		qs[i] = q
	}
	pid := d.Info().PID
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	cont := func() {
		if stopped {
			syscall.Kill(pid, syscall.SIGCONT)
			stopped = false
		}
	}
	defer cont()
	proctest.WaitStopped(t, pid)
	done := make(chan error, 1)
	go func() {
		var first error
		for _, q := range qs {
			if err := q.Close(); err != nil && first == nil {
				first = err
			}
		}
		done <- first
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("closing a queue past its last event: %v", err)
		}
	case <-time.After(10 * time.Second):
		cont()
		<-done
		t.Fatalf("closing %d queues whose last events fired waited for the stopped device", n)
	}
	cont()
	q, err := d.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if err := q.Launch(nopK, nil); err != nil {
		t.Fatal(err)
	}
	if err := q.Synchronize(); err != nil {
		t.Fatalf("the device after %d queues closed: %v", n, err)
	}
}
