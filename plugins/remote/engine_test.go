package remote_test

import (
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goffload/offload/plugin"
)

var nopK = mustKernel("remotetest.nop", func() {})

// TestWaitNotOvertakenByForget: a wait still queued on the host must reach
// the device before the batch that makes the device forget its event
// (issue 7, 3: the batch overtook it, and the device failed the wait as
// "event not recorded").
func TestWaitNotOvertakenByForget(t *testing.T) {
	d := openLocal(t, 1)[0]
	q1, _ := d.NewQueue()
	q2, _ := d.NewQueue()
	q3, _ := d.NewQueue()
	ev, _ := d.NewEvent()
	if err := q1.Launch(sleepK, []plugin.Arg{{Scalar: int64(100)}}); err != nil {
		t.Fatal(err)
	}
	if err := q1.Record(ev); err != nil {
		t.Fatal(err)
	}
	if err := q2.Wait(ev); err != nil { // queued, not written: q2 writes at its next mark
		t.Fatal(err)
	}
	if err := ev.Synchronize(); err != nil {
		t.Fatal(err)
	}
	ev.Close()
	for i := 0; i < 600; i++ { // enough closed events for a forget batch
		e, _ := d.NewEvent()
		if err := q3.Record(e); err != nil {
			t.Fatal(err)
		}
		if err := e.Synchronize(); err != nil {
			t.Fatal(err)
		}
		e.Close()
	}
	if err := q2.Launch(nopK, nil); err != nil {
		t.Fatal(err)
	}
	if err := q2.Synchronize(); err != nil {
		t.Fatalf("the queue that waited: %v", err)
	}
}

// TestCallsRacingLoss: calls made while the device process dies all return
// (issue 7, 5: a call that registered after the loss drained the pending
// set waited forever).
func TestCallsRacingLoss(t *testing.T) {
	for round := 0; round < 3; round++ {
		d := openLocal(t, 1)[0]
		pid := d.Info().PID
		var wg sync.WaitGroup
		started := make(chan struct{}, 8)
		for g := 0; g < 8; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					if i == 20 {
						started <- struct{}{}
					}
					var err error
					switch i % 3 {
					case 0:
						var p plugin.Ptr
						if p, err = d.Alloc(64); err == nil {
							err = d.Free(p)
						}
					case 1:
						var ev plugin.Event
						if ev, err = d.NewEvent(); err == nil {
							ev.Close()
						}
					case 2:
						var q plugin.Queue
						if q, err = d.NewQueue(); err == nil {
							err = q.Launch(nopK, nil)
							if err == nil {
								err = q.Synchronize()
							}
						}
					}
					if err != nil {
						if !errors.Is(err, plugin.ErrDeviceLost) || !strings.Contains(err.Error(), "local device 0") {
							t.Errorf("got %v, want ErrDeviceLost naming the device", err)
						}
						return
					}
				}
			}()
		}
		for g := 0; g < 8; g++ {
			<-started
		}
		syscall.Kill(pid, syscall.SIGKILL)
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatal("calls racing the device's loss hung")
		}
	}
}
