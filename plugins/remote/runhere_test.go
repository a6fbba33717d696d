package remote_test

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goffload/offload/internal/proctest"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/remote/proto"
)

// unblocked is closed, in a device process, by the kernel unblockK; blockK
// waits for it there.
var (
	unblocked    = make(chan struct{})
	unblockOnce  sync.Once
	blockK       = mustKernel("remotetest.block", func() { <-unblocked })
	unblockK     = mustKernel("remotetest.unblock", func() { unblockOnce.Do(func() { close(unblocked) }) })
	hangDeadline = 30 * time.Second // only a real hang takes this long
)

// TestLongKernelDoesNotStallReading: a device process's reader runs a
// kernel of an idle queue itself; one that runs long must not keep the
// reader from the other queues' frames. Here the first queue's kernel
// runs until the second queue's kernel releases it, so the test hangs if
// the kernel holds the reader: a standby must take over reading.
func TestLongKernelDoesNotStallReading(t *testing.T) {
	d := openLocal(t, 1)[0]
	q1, _ := d.NewQueue()
	q2, _ := d.NewQueue()
	if err := q1.Launch(blockK, nil); err != nil {
		t.Fatal(err)
	}
	if done, err := q1.Query(); done || err != nil { // sends the launch and a mark
		t.Fatalf("Query of a queue whose kernel is blocked = %v, %v", done, err)
	}
	finished := make(chan error, 2)
	go func() {
		err := q2.Launch(unblockK, nil)
		if err == nil {
			err = q2.Synchronize()
		}
		finished <- err
		finished <- q1.Synchronize()
	}()
	for i := 0; i < 2; i++ {
		select {
		case err := <-finished:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(hangDeadline):
			t.Fatalf("a kernel that runs long stalled the device's other queues (%d of 2 synchronizes returned)", i)
		}
	}
	// The device still serves, on the reader that took over.
	for range 100 {
		if err := q2.Launch(nopK, nil); err != nil {
			t.Fatal(err)
		}
		if err := q2.Synchronize(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRunHereOrder: operations that the reader runs itself (launches,
// inline submits, records) and those it leaves to a busy queue's goroutine
// keep queue order: each kernel sees the data submitted before it and
// none submitted after, across many rounds; also when a standby takes the
// reader's role over at every kernel (what the reader reads then must go
// behind the kernel it runs).
func TestRunHereOrder(t *testing.T) {
	// 512 elements: submits and retrieves inline; 64Ki: pushed submits
	// (the queue is idle at each round's first) and streamed retrieves.
	for _, n := range []int{512, 64 << 10} {
		t.Run(fmt.Sprintf("%d/reader", n), func(t *testing.T) { testRunHereOrder(t, n) })
		t.Run(fmt.Sprintf("%d/standby", n), func(t *testing.T) {
			t.Setenv("GOFFLOAD_TEST_STANDBY", "1ns")
			testRunHereOrder(t, n)
		})
	}
}

func testRunHereOrder(t *testing.T, n int) {
	d := openLocal(t, 1)[0]
	q, _ := d.NewQueue()
	p, err := d.Alloc(int64(8 * n))
	if err != nil {
		t.Fatal(err)
	}
	x := make([]float64, n)
	for round := range 200 {
		for i := range x {
			x[i] = float64(round)
		}
		if err := q.Submit(p, f64bytes(x)); err != nil {
			t.Fatal(err)
		}
		if round%3 == 0 { // the queue is busy for the next ones
			if err := q.Launch(sleepK, []plugin.Arg{{Scalar: int64(1)}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := q.Launch(addK, []plugin.Arg{{Scalar: 1.0}, {Ptr: p, Len: n}}); err != nil {
			t.Fatal(err)
		}
		ev, _ := d.NewEvent()
		if err := q.Record(ev); err != nil {
			t.Fatal(err)
		}
		got := make([]float64, n)
		if err := q.Retrieve(f64bytes(got), p); err != nil {
			t.Fatal(err)
		}
		if err := q.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if err := ev.Synchronize(); err != nil {
			t.Fatal(err)
		}
		ev.Close()
		for i, v := range got {
			if v != float64(round)+1 {
				t.Fatalf("round %d: element %d is %v, want %v", round, i, v, float64(round)+1)
			}
		}
	}
}

// TestPulledSubmitSizes: a submit queued behind a wait is pulled by the
// device when its queue gets there; a small one comes back in one frame
// that the host's reader writes itself, a large one is streamed by the
// writer. Both arrive whole, at and around the limit between them.
func TestPulledSubmitSizes(t *testing.T) {
	d := openLocal(t, 1)[0]
	for _, n := range []int{1, 4096, proto.MaxInline, proto.MaxInline + 1, 3*proto.MaxInline + 5} {
		p, err := d.Alloc(int64(n))
		if err != nil {
			t.Fatal(err)
		}
		q1, _ := d.NewQueue()
		q2, _ := d.NewQueue()
		ev, _ := d.NewEvent()
		if err := q1.Launch(sleepK, []plugin.Arg{{Scalar: int64(20)}}); err != nil {
			t.Fatal(err)
		}
		if err := q1.Record(ev); err != nil {
			t.Fatal(err)
		}
		in := make([]byte, n)
		for i := range in {
			in[i] = byte(i*7 + n)
		}
		out := make([]byte, n)
		if err := q2.Wait(ev); err != nil {
			t.Fatal(err)
		}
		if err := q2.Submit(p, in); err != nil { // behind the wait: pulled
			t.Fatal(err)
		}
		if err := q2.Retrieve(out, p); err != nil {
			t.Fatal(err)
		}
		if err := q2.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(in, out) {
			t.Fatalf("%d bytes: pulled submit and retrieve gave other bytes", n)
		}
		q1.Synchronize()
		q1.Close()
		q2.Close()
		ev.Close()
		d.Free(p)
	}
}

// TestFreeDoesNotWaitForTheDevice: Free checks the pointer on the host and
// sends its frame without waiting for an answer (the goroutine that
// completes nowait tasks frees their memory, one task after the other): it
// returns at once while the device process is stopped, refuses what is not
// a live allocation there and then, and the device frees the memory when
// it goes on.
func TestFreeDoesNotWaitForTheDevice(t *testing.T) {
	d := openLocal(t, 1)[0]
	p, err := d.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	pid := d.Info().PID
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(pid, syscall.SIGCONT)
	proctest.WaitStopped(t, pid)
	done := make(chan error, 1)
	go func() { done <- d.Free(p) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Free: %v", err)
		}
	case <-time.After(hangDeadline):
		t.Fatal("Free waited for a stopped device")
	}
	if err := d.Free(p); !errors.Is(err, plugin.ErrBadPointer) {
		t.Errorf("second Free = %v, want ErrBadPointer", err)
	}
	syscall.Kill(pid, syscall.SIGCONT)
	// The device goes on: the free came before this work.
	q, _ := d.NewQueue()
	p2, err := d.Alloc(8)
	if err != nil {
		t.Fatal(err)
	}
	in, out := []byte{1, 2, 3, 4, 5, 6, 7, 8}, make([]byte, 8)
	q.Submit(p2, in)
	q.Retrieve(out, p2)
	if err := q.Synchronize(); err != nil || !bytes.Equal(in, out) {
		t.Fatalf("after the free: %v, %v", out, err)
	}
}
