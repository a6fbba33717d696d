package remote_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/internal/proctest"
	"github.com/goffload/offload/internal/waitpoll"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/plugintest"
	"github.com/goffload/offload/plugins/remote"
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

// crowdedK writes 1 if the device process it runs in was told the machine
// is crowded, else 0, and then the process's GOMAXPROCS.
var crowdedK = mustKernel("remotetest.crowded", func(out []int64) {
	out[0] = 0
	if waitpoll.Crowded() {
		out[0] = 1
	}
	out[1] = int64(runtime.GOMAXPROCS(0))
})

// TestCrowded: a host whose local devices and itself outnumber the cores
// is crowded (its pollers yield their core, waitpoll.Pause), and so are
// the devices it starts, which then run on as many Go processors as their
// cores (unless GOMAXPROCS says otherwise); with a core each, none is, and
// they run on the runtime's default; when the devices end, the host is no
// longer crowded.
func TestCrowded(t *testing.T) {
	for _, n := range []int{1, runtime.NumCPU()} {
		waitGone(t)
		want := n+1 > runtime.NumCPU()
		devs := openLocal(t, n)
		if got := waitpoll.Crowded(); got != want {
			t.Errorf("local:%d on %d cores: host crowded = %v, want %v", n, runtime.NumCPU(), got, want)
		}
		for i, d := range devs {
			p, err := d.Alloc(16)
			if err != nil {
				t.Fatal(err)
			}
			q, _ := d.NewQueue()
			q.Launch(crowdedK, []plugin.Arg{{Ptr: p, Len: 2}})
			out := make([]byte, 16)
			q.Retrieve(out, p)
			if err := q.Synchronize(); err != nil {
				t.Fatal(err)
			}
			if got := binary.LittleEndian.Uint64(out) == 1; got != want {
				t.Errorf("local:%d on %d cores: device %d crowded = %v, want %v", n, runtime.NumCPU(), i, got, want)
			}
			wantProcs := runtime.NumCPU()
			if want && remote.LocalLink() == "shm" {
				wantProcs = max(1, runtime.NumCPU()/n)
			}
			if v, set := os.LookupEnv("GOMAXPROCS"); set {
				wantProcs, _ = strconv.Atoi(v)
			}
			if got := int(binary.LittleEndian.Uint64(out[8:])); got != wantProcs {
				t.Errorf("local:%d on %d cores: device %d runs on %d Go processors, want %d", n, runtime.NumCPU(), i, got, wantProcs)
			}
		}
		for _, d := range devs {
			d.Close()
		}
	}
	waitGone(t)
	if waitpoll.Crowded() {
		t.Error("host still crowded after its devices ended")
	}
}

// waitGone waits until the device processes of earlier tests have ended.
func waitGone(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for remote.LocalProcs() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d device processes still run after 10 s", remote.LocalProcs())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestDevicesOutliveStartingThread: devices started on a goroutine that
// locked its thread and returned without unlocking (Go then ends the
// thread) still work afterwards. Pdeathsig follows the thread that forked,
// not the process: the devices were killed with it (issue 47).
func TestDevicesOutliveStartingThread(t *testing.T) {
	k, _ := plugin.LookupKind("local")
	type started struct {
		devs []plugin.Device
		tid  int
		err  error
	}
	ch := make(chan started, 1)
	go onLockedThread(func() {
		devs, err := k.Open("2")
		for i, d := range devs {
			if err == nil {
				err = d.Load(entries.Current(), i)
			}
		}
		ch <- started{devs, syscall.Gettid(), err}
	})
	s := <-ch
	t.Cleanup(func() {
		for _, d := range s.devs {
			d.Close()
		}
	})
	if s.err != nil {
		t.Fatal(s.err)
	}
	task := fmt.Sprintf("/proc/self/task/%d", s.tid)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(task); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d that started the devices did not end within 10s (pid %d)", s.tid, os.Getpid())
		}
		runtime.Gosched()
	}
	for i, d := range s.devs {
		q, err := d.NewQueue()
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Launch(nopK, nil); err != nil {
			t.Fatalf("device %d after the thread that started it ended: %v", i, err)
		}
		if err := q.Synchronize(); err != nil {
			t.Fatalf("device %d after the thread that started it ended: %v", i, err)
		}
		q.Close()
	}
}

// onLockedThread runs f on a goroutine that locks its thread and returns
// without unlocking it, so that Go ends the thread. Not on the main thread,
// which Go never ends: a goroutine that finds itself there keeps it while
// another tries.
func onLockedThread(f func()) {
	runtime.LockOSThread() // never unlocked off the main thread
	if syscall.Gettid() != syscall.Getpid() {
		f()
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		onLockedThread(f)
	}()
	<-done
	runtime.UnlockOSThread()
}

// shmLinksK writes the number of shared-memory links of the device process
// it runs in.
var shmLinksK = mustKernel("remotetest.shmlinks", func(out []int64) { out[0] = remote.ShmLinks() })

// TestLocalLinks: local devices link to the host and to each other through
// shared memory by default, and through their sockets with
// GOFFLOAD_LOCAL_LINK=socket; the conformance suite passes both ways.
func TestLocalLinks(t *testing.T) {
	for _, c := range []struct {
		link string
		want int64 // shared-memory links in device 0 after an exchange with device 1
	}{{"shm", 2}, {"socket", 0}} {
		t.Run(c.link, func(t *testing.T) {
			t.Setenv("GOFFLOAD_LOCAL_LINK", c.link)
			devs := openLocal(t, 2)
			p0, _ := devs[0].Alloc(8)
			p1, _ := devs[1].Alloc(8)
			q0, _ := devs[0].NewQueue()
			q0.Submit(p0, []byte{1, 2, 3, 4, 5, 6, 7, 8})
			if err := q0.(plugin.Exchanger).Exchange(devs[1], p1, p0, 8); err != nil {
				t.Fatal(err)
			}
			q0.Launch(shmLinksK, []plugin.Arg{{Ptr: p0, Len: 1}})
			out := make([]byte, 8)
			q0.Retrieve(out, p0)
			if err := q0.Synchronize(); err != nil {
				t.Fatal(err)
			}
			if got := int64(out[0]) | int64(out[1])<<8; got != c.want {
				t.Fatalf("GOFFLOAD_LOCAL_LINK=%s: device 0 has %d shared-memory links, want %d (to the host and to device 1, or none)", c.link, got, c.want)
			}
		})
		t.Run(c.link+"/conformance", func(t *testing.T) {
			t.Setenv("GOFFLOAD_LOCAL_LINK", c.link)
			plugintest.Run(t, func(t *testing.T) []plugin.Device {
				k, _ := plugin.LookupKind("local")
				devs, err := k.Open("2")
				if err != nil {
					t.Fatal(err)
				}
				return devs
			})
		})
	}
}

// TestDeviceStoppedMidTransfer stops (SIGSTOP) a device process while 256
// MiB stream to it and while 256 MiB stream back, on both links: the copy
// fails with the device's silence after GOFFLOAD_DEVICE_TIMEOUT (a writer
// waiting for room in a ring the stopped reader never empties, a reader
// waiting for bytes that never come), the other device goes on.
func TestDeviceStoppedMidTransfer(t *testing.T) {
	const size = 256 << 20
	buf := make([]byte, size)
	for _, link := range []string{"shm", "socket"} {
		for _, dir := range []string{"submit", "retrieve"} {
			t.Run(link+"/"+dir, func(t *testing.T) {
				t.Setenv("GOFFLOAD_LOCAL_LINK", link)
				t.Setenv("GOFFLOAD_DEVICE_TIMEOUT", "1s")
				devs, q := startBigCopy(t, dir, buf)
				pid := devs[0].Info().PID
				syscall.Kill(pid, syscall.SIGSTOP)
				defer syscall.Kill(pid, syscall.SIGCONT)
				done := make(chan error, 1)
				go func() { done <- q.Synchronize() }()
				var err error
				select {
				case err = <-done:
				case <-time.After(time.Minute):
					t.Fatal("a copy to a stopped device hangs")
				}
				if !errors.Is(err, plugin.ErrDeviceLost) && err != nil {
					t.Fatalf("copy to a stopped device: %v, want ErrDeviceLost", err)
				}
				if err == nil {
					// The copy was done before the stop landed: the
					// next operation must still find the device lost.
					q.Launch(nopK, nil)
					err = q.Synchronize()
				}
				if !errors.Is(err, plugin.ErrDeviceLost) || !strings.Contains(err.Error(), "nothing heard") {
					t.Fatalf("after SIGSTOP: %v, want ErrDeviceLost for the silence", err)
				}
				checkAlive(t, devs[1])
			})
		}
	}
}

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
