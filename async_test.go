package offload_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goffload/offload"
)

var (
	// SlowSet sleeps, then sets every element: a writer that takes a while.
	SlowSet = offload.MustKernel("test.slowset", func(ms int64, v int32, x []int32) {
		time.Sleep(time.Duration(ms) * time.Millisecond)
		for i := range x {
			x[i] = v
		}
	})
	// SlowCopy sleeps, then copies src to dst: a reader that takes a while.
	SlowCopy = offload.MustKernel("test.slowcopy", func(ms int64, dst, src []int32) {
		time.Sleep(time.Duration(ms) * time.Millisecond)
		copy(dst, src)
	})
	// Meet makes two kernels of one round on the same device process
	// meet: each arrives and waits for the other, so they must run at
	// once. Rounds keep apart the meetings of tests that share a device
	// process (an MPI job's ranks serve every test).
	Meet = offload.MustKernel("test.meet", func(who int32, round int64, out []int32) {
		m := meeting(round)
		close(m.ch[who])
		select {
		case <-m.ch[1-who]:
			out[0] = 1
		case <-time.After(10 * time.Second):
			out[0] = -1
		}
		meets.Lock()
		if m.left--; m.left == 0 {
			delete(meets.m, round)
		}
		meets.Unlock()
	})
	// Gate blocks until a file exists.
	Gate = offload.MustKernel("test.gate", func(id int64) {
		path := filepath.Join(os.TempDir(), fmt.Sprintf("goffload-gate-%d", id))
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			if _, err := os.Stat(path); err == nil {
				return
			}
		}
		panic("the gate never opened")
	})
)

// meets are the device process's meetings in progress (Meet), by round.
var meets struct {
	sync.Mutex
	m map[int64]*meet
}

type meet struct {
	ch   [2]chan struct{}
	left int // the kernels still to leave
}

// meetRound numbers the host's rounds of Meet.
var meetRound atomic.Int64

// meeting is the meeting of round, made by its first kernel.
func meeting(round int64) *meet {
	meets.Lock()
	defer meets.Unlock()
	if meets.m == nil {
		meets.m = map[int64]*meet{}
	}
	m := meets.m[round]
	if m == nil {
		m = &meet{ch: [2]chan struct{}{make(chan struct{}), make(chan struct{})}, left: 2}
		meets.m[round] = m
	}
	return m
}

// deviceSets are the device configurations the dependency tests run on
// (started with startSet, matrix_test.go): two host devices, two device
// processes (waits between them go device to device), two fake GPUs (one
// stream waits on the other GPU's CUDA event), and a host device with a
// device process or a GPU (the host waits between them); two OpenCL
// devices on the machine's driver (a barrier waits on the other's
// cl_event) and a host device with one.
var deviceSets = []string{"host:2", "local:2", "cuda", "host,local:1", "host,cuda:0", "opencl:0,opencl:0", "host,opencl:0"}

func TestDependPatterns(t *testing.T) {
	for _, devices := range deviceSets {
		t.Run(devices, func(t *testing.T) {
			startSet(t, devices)
			d0, d1 := offload.On(0), offload.On(1)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			// in after out waits: the reader on the other device sees the writer's value.
			x := filled(16, 0)
			y := filled(16, 0)
			w := d0.Nowait(offload.DependOut(x)).Run(SlowSet, int64(50), int32(7), x)
			r := d1.Nowait(offload.DependIn(x)).Run(SlowCopy, int64(0), offload.From(y), offload.To(x))
			if err := r.WaitContext(ctx); err != nil {
				t.Fatal(err)
			}
			if err := w.Wait(); err != nil {
				t.Fatal(err)
			}
			if !allEqual(y, 7) {
				t.Errorf("in after out: the reader saw %v, want 7s", y[:4])
			}

			// out after ins waits for all of them: the readers see the old value.
			a, b := filled(16, 0), filled(16, 0)
			r1 := d0.Nowait(offload.DependIn(x)).Run(SlowCopy, int64(40), offload.From(a), offload.To(x))
			r2 := d1.Nowait(offload.DependIn(x)).Run(SlowCopy, int64(20), offload.From(b), offload.To(x))
			w2 := d1.Nowait(offload.DependOut(x)).Run(SlowSet, int64(0), int32(9), x)
			if err := offload.Taskwait(ctx); err != nil {
				t.Fatal(err)
			}
			if !allEqual(a, 7) || !allEqual(b, 7) || !allEqual(x, 9) {
				t.Errorf("out after ins: readers saw %v %v, x = %v; want 7s, 7s, 9s", a[:2], b[:2], x[:2])
			}
			for _, task := range []*offload.Task{r1, r2, w2} {
				if task.Wait() != nil {
					t.Error(task.Wait())
				}
			}

			// inout chains run in order.
			z := filled(4, 0)
			var g offload.Group
			for i := 0; i < 20; i++ {
				dev := []offload.Device{d0, d1}[i%2]
				dev.Nowait(offload.DependInOut(z)).In(&g).Run(AddTo, int32(i), z)
			}
			if err := g.Wait(ctx); err != nil {
				t.Fatal(err)
			}
			if !allEqual(z, 190) {
				t.Errorf("inout chain: z = %v, want 190s", z)
			}
		})
	}
}

// TestInsRunConcurrently: two tasks that only read the same buffer run at
// the same time on one device (each waits for the other inside its kernel).
func TestInsRunConcurrently(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testKind) {
		k.start(t, 1)
		round := meetRound.Add(1)
		x := filled(4, 1)
		o1, o2 := filled(1, 0), filled(1, 0)
		t1 := offload.Nowait(offload.DependIn(x)).Run(Meet, int32(0), round, offload.From(o1))
		t2 := offload.Nowait(offload.DependIn(x)).Run(Meet, int32(1), round, offload.From(o2))
		if err := errors.Join(t1.Wait(), t2.Wait()); err != nil {
			t.Fatal(err)
		}
		if o1[0] != 1 || o2[0] != 1 {
			t.Errorf("the two readers did not run at once: %d %d", o1[0], o2[0])
		}
	})
}

// TestErrorPropagates: a failed task fails its dependents, and their errors
// wrap the cause; independent tasks are not affected.
func TestErrorPropagates(t *testing.T) {
	for _, devices := range deviceSets {
		t.Run(devices, func(t *testing.T) {
			startSet(t, devices)
			x := filled(8, 3)
			other := filled(8, 0)
			bad := offload.On(0).Nowait(offload.DependOut(x)).Run(Boom, int32(0), x)
			next := offload.On(1).Nowait(offload.DependInOut(x)).Run(AddTo, int32(1), x)
			last := offload.On(0).Nowait(offload.DependIn(x)).Go("host check", func() error { return nil })
			fine := offload.On(1).Nowait(offload.DependOut(other)).Run(AddTo, int32(5), other)
			if err := offload.Taskwait(context.Background()); !errors.Is(err, offload.ErrKernelFailed) {
				t.Errorf("Taskwait: %v", err)
			}
			for i, task := range []*offload.Task{bad, next, last} {
				if err := task.Wait(); !errors.Is(err, offload.ErrKernelFailed) || !errorsContain(err, "boom in the body") {
					t.Errorf("task %d: %v, want an error wrapping the kernel's failure", i, err)
				}
			}
			if err := fine.Wait(); err != nil || !allEqual(other, 5) {
				t.Errorf("independent task: %v, %v", err, other)
			}
			if !allEqual(x, 3) {
				t.Errorf("x = %v: a failed chain changed the host buffer", x)
			}
			if err := offload.Taskwait(context.Background()); err != nil {
				t.Errorf("Taskwait after the failure was reported: %v", err)
			}
		})
	}
}

func errorsContain(err error, s string) bool {
	return err != nil && contains(err.Error(), s)
}

func contains(s, sub string) bool {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return true
		}
	}
	return false
}

// TestWaitCancel: waiting can be cancelled; the task goes on and completes.
func TestWaitCancel(t *testing.T) {
	forEachKind(t, testWaitCancel)
}

func testWaitCancel(t *testing.T, k testKind) {
	k.start(t, 1)
	x := filled(4, 0)
	task := offload.Nowait(offload.DependOut(x)).Run(SlowSet, int64(300), int32(4), x)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := task.WaitContext(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled wait: %v", err)
	}
	if err := offload.Taskwait(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("cancelled taskwait: %v", err)
	}
	if err := task.Wait(); err != nil || !allEqual(x, 4) {
		t.Fatalf("the task after a cancelled wait: %v %v", err, x)
	}
}

// TestChainLoweredToDevice proves the lowering: a chain of dependent tasks
// on one device process is enqueued whole — every task's work on the
// device's queues, behind waits — while its first kernel is still blocked,
// which only the host can unblock. The host never waits between them.
func TestChainLoweredToDevice(t *testing.T) {
	for _, devices := range []string{"local:1", "local:2", "host", "cuda:0", "cuda"} {
		t.Run(devices, func(t *testing.T) {
			startSet(t, devices)
			id := time.Now().UnixNano()
			gate := filepath.Join(os.TempDir(), fmt.Sprintf("goffload-gate-%d", id))
			defer os.Remove(gate)
			x := filled(1, 0)
			tasks := []*offload.Task{offload.On(0).Nowait(offload.DependOut(x)).Run(Gate, id)}
			for i := 0; i < 100; i++ {
				dev := offload.On(i % offload.NumDevices())
				tasks = append(tasks, dev.Nowait(offload.DependInOut(x)).Run(Nop))
			}
			for i, task := range tasks {
				if !offload.Enqueued(task) {
					t.Fatalf("task %d is not on its device's queue while the first kernel blocks", i)
				}
				select {
				case <-task.Done():
					t.Fatalf("task %d finished before the gate opened", i)
				default:
				}
			}
			if err := os.WriteFile(gate, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := offload.Taskwait(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestManyTasks creates 10,000 tasks from 16 goroutines: each goroutine a
// chain on a buffer of its own, reading one shared buffer.
func TestManyTasks(t *testing.T) {
	const goroutines, per = 16, 625
	start(t, offload.WithDevices("host:2"))
	shared := filled(8, 1)
	if err := offload.On(0).EnterData(offload.To(shared)); err != nil {
		t.Fatal(err)
	}
	if err := offload.On(1).EnterData(offload.To(shared)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var failed atomic.Int32
	bufs := make([][]int32, goroutines)
	for g := range bufs {
		bufs[g] = filled(8, 0)
		wg.Add(1)
		go func(b []int32) {
			defer wg.Done()
			dev := offload.On(g % 2)
			if err := dev.EnterData(offload.To(b)); err != nil {
				failed.Add(1)
				return
			}
			var group offload.Group
			for i := 0; i < per; i++ {
				dev.Nowait(offload.DependInOut(b), offload.DependIn(shared)).In(&group).Run(AddTo, int32(1), b)
			}
			group.Add(dev.Nowait(offload.DependIn(b)).ExitData(offload.From(b)))
			if err := group.Wait(context.Background()); err != nil {
				t.Error(err)
			}
		}(bufs[g])
	}
	wg.Wait()
	if failed.Load() != 0 {
		t.Fatal("enter data failed")
	}
	for g, b := range bufs {
		if !allEqual(b, per) {
			t.Errorf("goroutine %d: buffer %v, want all %d", g, b, per)
		}
	}
	offload.On(0).ExitData(offload.Release(shared))
	offload.On(1).ExitData(offload.Release(shared))
}

// TestInitialDeviceNowait: a task on the initial device does not hold up
// the goroutine that creates it: its kernel blocks until that goroutine,
// after creating it, opens the gate.
func TestInitialDeviceNowait(t *testing.T) {
	start(t, offload.WithDevices("host"))
	id := time.Now().UnixNano()
	gate := filepath.Join(os.TempDir(), fmt.Sprintf("goffload-gate-%d", id))
	defer os.Remove(gate)
	x := filled(1, 0)
	task := offload.Initial().Nowait(offload.DependOut(x)).Run(Gate, id)
	select {
	case <-task.Done():
		t.Fatal("the task finished before its gate opened")
	default:
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := task.Wait(); err != nil {
		t.Fatal(err)
	}
}
