package offload_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goffload/offload"
)

// stopBlock holds the runaway kernel: it never looks at its Ctx. In this
// process each test run makes a new one and closes it at its end, so that
// the goroutine it holds ends; in a device process nothing does (Stop kills
// the process).
var stopBlock atomic.Pointer[chan struct{}]

func init() {
	ch := make(chan struct{})
	stopBlock.Store(&ch)
}

var runaway = offload.MustKernel("test.stop.runaway", func(ctx offload.Ctx, x []int32) { <-*stopBlock.Load() })

// polite waits until Stop asks it to stop.
var polite = offload.MustKernel("test.stop.polite", func(ctx offload.Ctx, x []int32) {
	select {
	case <-ctx.Done():
		if ctx.Err() != context.Canceled {
			x[0] = -1
			return
		}
		x[0] = 1
	case <-time.After(time.Minute):
		x[0] = -2
	}
})

// TestStopAsksKernelsToStop: a kernel that watches ctx.Done() ends when
// Stop begins, on every CPU kind, and Stop returns at once without error.
func TestStopAsksKernelsToStop(t *testing.T) {
	t.Setenv("GOFFLOAD_STOP_GRACE", "1m")
	for _, devices := range []string{"host:1", "local:1"} {
		if err := offload.Start(offload.WithDevices(devices)); err != nil {
			t.Fatal(err)
		}
		var tasks []*offload.Task
		var bufs [][]int32
		for _, dev := range []offload.Device{offload.On(0), offload.Initial()} {
			x := make([]int32, 1)
			bufs = append(bufs, x)
			tasks = append(tasks, dev.Nowait().Run(polite, offload.ToFrom(x)))
		}
		start := time.Now()
		if err := offload.Stop(); err != nil {
			t.Fatalf("%s: Stop: %v", devices, err)
		}
		took := time.Since(start)
		if took > 30*time.Second {
			t.Errorf("%s: Stop took %v: the kernels did not see it", devices, took)
		}
		t.Logf("%s: Stop took %v", devices, took)
		for i, tk := range tasks {
			if err := tk.Wait(); err != nil {
				t.Errorf("%s: task %d: %v", devices, i, err)
			}
			if bufs[i][0] != 1 {
				t.Errorf("%s: kernel %d saw %d, want 1 (Done closed, Err context.Canceled)", devices, i, bufs[i][0])
			}
		}
	}
}

// TestStopAfterRunawayKernel: a kernel that never returns, abandoned by
// its caller's context, does not hang Stop (issue 20): a device process is
// killed after the grace period and named; a host device's kernel, which
// cannot be killed, is named and left running.
func TestStopAfterRunawayKernel(t *testing.T) {
	t.Setenv("GOFFLOAD_STOP_GRACE", "300ms")
	block := make(chan struct{})
	stopBlock.Store(&block)
	defer close(block)
	for _, c := range []struct{ devices, want string }{
		{"local:1", "device 0 (local): killed (running target test.stop.runaway)"},
		{"host:1", "device 0 (host): still running target test.stop.runaway (a kernel on a goroutine of this process cannot be killed"},
	} {
		if err := offload.Start(offload.WithDevices(c.devices)); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		err := offload.On(0).WithContext(ctx).Run(runaway, make([]int32, 4))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("%s: Run: %v, want DeadlineExceeded", c.devices, err)
		}
		done := make(chan error, 1)
		go func() { done <- offload.Stop() }()
		select {
		case err = <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: Stop hangs after a runaway kernel", c.devices)
		}
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "GOFFLOAD_STOP_GRACE") {
			t.Errorf("%s: Stop: %v\nwant DeadlineExceeded naming %q", c.devices, err, c.want)
		}
		// The runtime is over either way: it starts again.
		if err := offload.Start(offload.WithDevices("host")); err != nil {
			t.Fatalf("%s: Start after: %v", c.devices, err)
		}
		if err := offload.Stop(); err != nil {
			t.Errorf("%s: the next Stop: %v", c.devices, err)
		}
	}
}

// TestStopContext: StopContext returns when its context ends, with the
// context's error naming the device process it killed, long before the
// grace period.
func TestStopContext(t *testing.T) {
	t.Setenv("GOFFLOAD_STOP_GRACE", "1h")
	if err := offload.Start(offload.WithDevices("local:1")); err != nil {
		t.Fatal(err)
	}
	task := offload.On(0).Nowait().Run(runaway, make([]int32, 4))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := offload.StopContext(ctx)
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("StopContext took %v", took)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "Stop's context ended") ||
		!strings.Contains(err.Error(), "device 0 (local): killed (running task") {
		t.Errorf("StopContext: %v", err)
	}
	if err := task.Wait(); !errors.Is(err, offload.ErrDeviceLost) {
		t.Errorf("the killed device's task: %v, want ErrDeviceLost", err)
	}
}

// TestContextStopsKernel checks what Device.WithContext and Ctx.Done
// promise: a construct whose context ends stops waiting, and its kernel is
// asked to stop (its Ctx.Done closes). A kernel that watches Done ends, and
// the construct finishes in the background, copying back what the kernel
// wrote. It runs on the CPU kinds that Ctx.Done names, MPI aside: a host
// device, the initial device, and a local device over shared memory (the
// default link) and over a socket.
func TestContextStopsKernel(t *testing.T) {
	t.Setenv("GOFFLOAD_STOP_GRACE", "1m")
	for _, c := range []struct{ devices, link string }{{"host:1", ""}, {"local:1", "shm"}, {"local:1", "socket"}} {
		devices := c.devices
		if c.link != "" {
			t.Setenv("GOFFLOAD_LOCAL_LINK", c.link)
			devices += " (" + c.link + ")"
		}
		if err := offload.Start(offload.WithDevices(c.devices)); err != nil {
			t.Fatal(err)
		}
		for _, dev := range []offload.Device{offload.On(0), offload.Initial()} {
			x := make([]int32, 1)
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			begin := time.Now()
			err := dev.WithContext(ctx).Run(polite, offload.ToFrom(x))
			cancel()
			// The kernel ends as soon as its context does, so Run may see
			// it done before it sees the context's end.
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s %s: Run: %v, want DeadlineExceeded or nil", devices, dev, err)
			}
			if err := offload.Taskwait(context.Background()); err != nil {
				t.Fatalf("%s %s: Taskwait: %v", devices, dev, err)
			}
			if took := time.Since(begin); took > 30*time.Second {
				t.Errorf("%s %s: the construct took %v: its kernel did not see its context end", devices, dev, took)
			}
			if x[0] != 1 {
				t.Errorf("%s %s: the kernel saw %d, want 1 (Done closed, Err context.Canceled)", devices, dev, x[0])
			}
		}
		if err := offload.Stop(); err != nil {
			t.Fatal(err)
		}
	}
}
