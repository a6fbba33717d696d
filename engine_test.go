package offload_test

import (
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goffload/offload"
	"github.com/goffload/offload/internal/proctest"
)

// These tests drive the remote engine the way the programs of issue 7 did:
// many goroutines on shared buffers, bulk both ways at once, device
// processes killed and stopped. Each failed on the engine before it.

var Inc = offload.MustKernel("test.engine.inc", func(a, b []int32) {
	for i := range b {
		b[i] += 1 + a[i]*0
	}
})

// watchdog fails the test with every goroutine's stack if done is not
// closed within limit: a hang is a failure with evidence, not a CI timeout.
func watchdog(t *testing.T, limit time.Duration, done <-chan struct{}) {
	t.Helper()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		var b strings.Builder
		pprof.Lookup("goroutine").WriteTo(&b, 1)
		t.Fatalf("hung for %v:\n%s", limit, b.String())
	}
}

// TestSharedBuffersManyGoroutines: goroutines creating dependent tasks over
// shared buffers on device processes (issue 7, 1): every task succeeds and
// no increment is lost.
func TestSharedBuffersManyGoroutines(t *testing.T) {
	for _, devs := range []string{"local:1", "host,local:2"} {
		t.Run(devs, func(t *testing.T) {
			start(t, offload.WithDevices(devs))
			const G, N, B = 2, 800, 4
			bufs := make([][]int32, B)
			for i := range bufs {
				bufs[i] = make([]int32, 64)
			}
			var wg sync.WaitGroup
			done := make(chan struct{})
			for g := 0; g < G; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < N; i++ {
						a, b := bufs[(g+i+1)%B], bufs[(g+i)%B]
						dev := offload.On((g + i) % offload.NumDevices())
						dev.Nowait(offload.DependIn(a), offload.DependInOut(b)).Run(Inc, offload.To(a), offload.ToFrom(b))
					}
				}()
			}
			go func() { wg.Wait(); close(done) }()
			watchdog(t, 2*time.Minute, done)
			if err := offload.Taskwait(t.Context()); err != nil {
				t.Fatal(err)
			}
			total := 0
			for k, b := range bufs {
				for i, v := range b {
					if v != b[0] {
						t.Fatalf("b[%d][%d] = %d, b[%d][0] = %d: a task saw half a buffer", k, i, v, k, b[0])
					}
				}
				total += int(b[0])
			}
			if total != G*N {
				t.Fatalf("%d increments arrived, want %d: lost data", total, G*N)
			}
		})
	}
}

// TestAlternatingDevicesChain: one chain of dependent tasks that alternates
// between two device processes, through host memory (issue 7, 2).
func TestAlternatingDevicesChain(t *testing.T) {
	start(t, offload.WithDevices("local:2"))
	const N, B = 1500, 4
	bufs := make([][]int32, B)
	for i := range bufs {
		bufs[i] = make([]int32, 16)
	}
	for i := 0; i < N; i++ {
		b := bufs[i%B]
		offload.On(i%2).Nowait(offload.DependInOut(b)).Run(AddTo, int32(1), offload.ToFrom(b))
	}
	if err := offload.Taskwait(t.Context()); err != nil {
		t.Fatal(err)
	}
	for k, b := range bufs {
		if !allEqual(b, N/B) {
			t.Fatalf("buffer %d = %v, want all %d", k, b, N/B)
		}
	}
}

var Touch = offload.MustKernel("test.engine.touch", func(x []byte) {
	for i := 0; i < len(x); i += 4096 {
		x[i]++
	}
})

// TestBulkBothWaysConcurrently: goroutines moving large buffers in and out
// of one device process at once keep making progress (issue 7, 4: the
// readers wrote under the lock a bulk stream held while the socket was full).
func TestBulkBothWaysConcurrently(t *testing.T) {
	start(t, offload.WithDevices("local:1"))
	const G, N, size = 4, 6, 12 << 20
	var wg sync.WaitGroup
	done := make(chan struct{})
	errs := make(chan error, G)
	for g := 0; g < G; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := make([]byte, size)
			for i := 0; i < N; i++ {
				if err := offload.On(0).Run(Touch, offload.ToFrom(x)); err != nil {
					errs <- err
					return
				}
			}
			if x[0] != N || x[size-4096] != N {
				errs <- fmt.Errorf("goroutine %d: x[0] = %d, want %d", g, x[0], N)
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	watchdog(t, 3*time.Minute, done)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// stopped starts one local device with a short device timeout and SIGSTOPs
// it; the process is killed at the end of the test.
func stopped(t *testing.T) offload.Device {
	t.Setenv("GOFFLOAD_DEVICE_TIMEOUT", "1s")
	start(t, offload.WithDevices("local:1"))
	info, err := offload.On(0).Info()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(info.PID, syscall.SIGKILL) })
	if err := syscall.Kill(info.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// Work sent before the stop has taken effect may still be done.
	proctest.WaitStopped(t, info.PID)
	return offload.On(0)
}

// TestStoppedDevice: a device process that hangs (SIGSTOP) is lost after
// GOFFLOAD_DEVICE_TIMEOUT; nothing hangs (issue 7, 6).
func TestStoppedDevice(t *testing.T) {
	if os.Getenv("GOFFLOAD_DEVICE_TIMEOUT") != "" {
		t.Skip("GOFFLOAD_DEVICE_TIMEOUT is set by the caller")
	}
	dev := stopped(t)
	x := make([]int32, 1000)
	done := make(chan struct{})
	var runErr, allocErr, taskErr error
	go func() {
		defer close(done)
		tk := dev.Nowait(offload.DependInOut(x)).Run(AddTo, int32(1), offload.ToFrom(x)) // must not block
		runErr = dev.Run(AddTo, int32(1), offload.ToFrom(x))
		_, allocErr = dev.Alloc(64)
		taskErr = tk.Wait()
	}()
	watchdog(t, time.Minute, done)
	for what, err := range map[string]error{"Run": runErr, "Alloc": allocErr, "nowait task": taskErr} {
		if !errors.Is(err, offload.ErrDeviceLost) || !strings.Contains(err.Error(), "nothing heard for") || !strings.Contains(err.Error(), "device 0") {
			t.Errorf("%s: %v, want ErrDeviceLost naming the device and the silence", what, err)
		}
	}
	if !allEqual(x, 0) {
		t.Errorf("x changed on a device that never ran: %v", x[:4])
	}
}

// TestStoppedDeviceKilledAtLoss: a local device process that stops
// answering (SIGSTOP) is killed when it is found lost, not left stopped
// until Stop: a stopped process never exits by itself, so its loss is
// reported at once rather than after waiting for its exit status, and it
// holds no memory or cores meanwhile.
func TestStoppedDeviceKilledAtLoss(t *testing.T) {
	if os.Getenv("GOFFLOAD_DEVICE_TIMEOUT") != "" {
		t.Skip("GOFFLOAD_DEVICE_TIMEOUT is set by the caller")
	}
	dev := stopped(t)
	info, err := dev.Info()
	if err != nil {
		t.Fatal(err)
	}
	x := make([]int32, 10)
	err = dev.Run(AddTo, int32(1), offload.ToFrom(x))
	if !errors.Is(err, offload.ErrDeviceLost) || !strings.Contains(err.Error(), "nothing heard for") || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("Run on a stopped device: %v, want ErrDeviceLost naming the silence and the kill", err)
	}
	proctest.WaitGone(t, info.PID, 10*time.Second)
}

// TestNowaitOnStoppedDevice: creating nowait tasks that map new buffers on
// a device that does not answer returns at once: the tasks are still
// pending when the calls return (a creation that waited for the device
// would only return once the device was lost, with the tasks failed).
func TestNowaitOnStoppedDevice(t *testing.T) {
	if os.Getenv("GOFFLOAD_DEVICE_TIMEOUT") != "" {
		t.Skip("GOFFLOAD_DEVICE_TIMEOUT is set by the caller")
	}
	dev := stopped(t)
	var tasks []*offload.Task
	for i := 0; i < 50; i++ {
		x := make([]int32, 100+i)
		tasks = append(tasks, dev.Nowait(offload.DependInOut(x)).Run(AddTo, int32(1), offload.ToFrom(x)))
	}
	for i, tk := range tasks {
		select {
		case <-tk.Done():
			t.Fatalf("task %d already done (%v): creating it waited for the stopped device", i, tk.Wait())
		default:
		}
	}
	for _, tk := range tasks {
		if err := tk.Wait(); !errors.Is(err, offload.ErrDeviceLost) {
			t.Fatalf("task on a stopped device: %v, want ErrDeviceLost", err)
		}
	}
}

// TestKilledDeviceManyEvents: a device process killed while goroutines
// create tasks (and so events) on it: every task fails with the device's
// error and nothing crashes (issue 7, 9: the loss path ranged over the
// events map while others wrote it).
func TestKilledDeviceManyEvents(t *testing.T) {
	start(t, offload.WithDevices("local:1"))
	info, err := offload.On(0).Info()
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var tasks []*offload.Task
	kill := make(chan struct{})
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := make([]int32, 8)
			for i := 0; i < 400; i++ {
				if i == 100 && g == 0 {
					close(kill)
				}
				tk := offload.On(0).Nowait(offload.DependInOut(x)).Run(AddTo, int32(1), offload.ToFrom(x))
				mu.Lock()
				tasks = append(tasks, tk)
				mu.Unlock()
			}
		}()
	}
	<-kill
	syscall.Kill(info.PID, syscall.SIGKILL)
	done := make(chan struct{})
	go func() { wg.Wait(); offload.Taskwait(t.Context()); close(done) }()
	watchdog(t, time.Minute, done)
	failed := 0
	for _, tk := range tasks {
		if err := tk.Wait(); err != nil {
			failed++
			if !strings.Contains(err.Error(), "device 0") {
				t.Fatalf("error does not name the device: %v", err)
			}
		}
	}
	if failed == 0 {
		t.Fatal("no task failed on a killed device")
	}
}
