package offload_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goffload/offload"
)

var (
	kernelMu  sync.Mutex
	kernelErr error
	// TaskwaitInKernel calls Taskwait, which a kernel must not do.
	TaskwaitInKernel = offload.MustKernel("tasks.taskwait-in-kernel", func() {
		err := offload.Taskwait(context.Background())
		kernelMu.Lock()
		kernelErr = err
		kernelMu.Unlock()
	})
)

// TestTaskwaitInsideTask: Taskwait and Stop called from host work are
// errors, not a deadlock, and Stop from the test afterwards works.
func TestTaskwaitInsideTask(t *testing.T) {
	forEachKind(t, testTaskwaitInsideTask)
}

func testTaskwaitInsideTask(t *testing.T, k testKind) {
	k.start(t, 1)
	x := filled(4, 0)
	var tw, stop error
	task := offload.Nowait(offload.DependOut(x)).Go("waits for itself", func() error {
		tw = offload.Taskwait(context.Background())
		stop = offload.Stop()
		return nil
	})
	// Also from a kernel of a task on the initial device.
	ktask := offload.Initial().Nowait().Run(TaskwaitInKernel)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := errors.Join(task.WaitContext(ctx), ktask.WaitContext(ctx)); err != nil {
		t.Fatalf("the tasks: %v", err)
	}
	kernelMu.Lock()
	kerr := kernelErr
	kernelMu.Unlock()
	for what, err := range map[string]error{"Taskwait": tw, "Stop": stop, "Taskwait in a kernel": kerr} {
		if !errors.Is(err, offload.ErrInTask) || !errors.Is(err, offload.ErrBadArgument) {
			t.Errorf("%s inside a task: %v, want ErrInTask", what, err)
		}
	}
	if err := offload.Taskwait(ctx); err != nil {
		t.Errorf("Taskwait from the test: %v", err)
	}
	if err := offload.Nowait(offload.DependIn(x)).Run(AddTo, int32(1), x).Wait(); err != nil {
		t.Errorf("the runtime after Stop was refused inside a task: %v", err)
	}
}

// TestGroupWaitAfterCancel: a Wait that ctx cut short leaves the tasks in
// the group; the next Wait waits for them and returns their error.
func TestGroupWaitAfterCancel(t *testing.T) {
	forEachKind(t, testGroupWaitAfterCancel)
}

func testGroupWaitAfterCancel(t *testing.T, k testKind) {
	k.needInProcess(t)
	k.start(t, 1)
	id, g := newGate(t)
	var group offload.Group
	task := offload.Nowait().In(&group).Run(HoldFail, id)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := group.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled Wait: %v", err)
	}
	g.release()
	if err := group.Wait(context.Background()); !errors.Is(err, offload.ErrKernelFailed) {
		t.Fatalf("Wait after a cancelled Wait: %v, want the task's failure", err)
	}
	select {
	case <-task.Done():
	default:
		t.Fatal("Group.Wait returned while its task runs")
	}
	if err := group.Wait(context.Background()); err != nil {
		t.Errorf("Wait of the emptied group: %v", err)
	}
}

// TestWithContext: a synchronous construct on a device bound to a context
// returns when the context is done, with an error naming the device and the
// construct; the construct finishes in the background, copies back and
// unmaps, and Taskwait waits for it.
func TestWithContext(t *testing.T) {
	forEachKind(t, testWithContext)
}

func testWithContext(t *testing.T, k testKind) {
	k.needInProcess(t)
	k.start(t, 1)
	id, g := newGate(t)
	x := filled(8, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-g.started; cancel() }()
	err := offload.On(0).WithContext(ctx).Run(Hold, id, offload.ToFrom(x).Named("x"))
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "device 0") || !strings.Contains(err.Error(), "target tasks.hold") {
		t.Fatalf("Run with a cancelled context: %v, want context.Canceled naming the device and construct", err)
	}
	g.release()
	if err := offload.Taskwait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !allEqual(x, 2) {
		t.Errorf("x = %v: the construct did not copy back in the background", x)
	}
	if e := offload.Entries(0); len(e) != 0 {
		t.Errorf("entries left after the background construct: %+v", e)
	}

	// A context done before the construct: nothing starts.
	if err := offload.On(0).WithContext(ctx).EnterData(offload.To(x)); !errors.Is(err, context.Canceled) {
		t.Errorf("EnterData with a done context: %v", err)
	}
	if offload.On(0).IsPresent(x) {
		t.Error("EnterData with a done context mapped x")
	}

	// A data region whose context ends inside the body still unmaps.
	ctx2, cancel2 := context.WithCancel(context.Background())
	d := offload.On(0).WithContext(ctx2)
	err = d.Data(func() error {
		cancel2()
		return nil
	}, offload.ToFrom(x))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Data whose context ended in the body: %v", err)
	}
	if err := offload.Taskwait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if e := offload.Entries(0); len(e) != 0 {
		t.Errorf("entries left after the region: %+v", e)
	}
	// Not done: as without a context.
	if err := offload.On(0).WithContext(context.Background()).Run(AddTo, int32(1), x); err != nil || !allEqual(x, 3) {
		t.Errorf("Run with a live context: %v, %v", err, x)
	}
}

// DieAtGate kills the device process that runs it once its gate file
// exists (it refuses to run outside a device process).
var DieAtGate = offload.MustKernel("tasks.dieatgate", func(id int64) {
	if os.Getenv("GOFFLOAD_ROLE") != "device" {
		panic("tasks.dieatgate runs only in a device process")
	}
	path := filepath.Join(os.TempDir(), fmt.Sprintf("goffload-gate-%d", id))
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if _, err := os.Stat(path); err == nil {
			break
		}
	}
	syscall.Kill(os.Getpid(), syscall.SIGKILL)
})

// TestLostDevice: an EnterData whose copy is lost with its device process
// leaves nothing mapped, and Info reports the loss.
func TestLostDevice(t *testing.T) {
	if err := offload.Start(offload.WithDevices("local:1")); err != nil {
		t.Fatal(err)
	}
	defer offload.Stop() // its error is the device's death
	dev := offload.On(0)
	id := time.Now().UnixNano()
	gate := filepath.Join(os.TempDir(), fmt.Sprintf("goffload-gate-%d", id))
	defer os.Remove(gate)
	tag := new(int32)
	x := filled(1024, 1)
	die := dev.Nowait(offload.DependOut(tag)).Run(DieAtGate, id)
	enter := dev.Nowait(offload.DependIn(tag)).EnterData(offload.To(x).Named("x"))
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := die.Wait(); !errors.Is(err, offload.ErrDeviceLost) {
		t.Errorf("the kernel that killed its device: %v, want ErrDeviceLost", err)
	}
	if err := enter.Wait(); err == nil {
		t.Fatal("EnterData on a lost device succeeded")
	}
	if dev.IsPresent(x) {
		t.Error("x is present after EnterData failed on a lost device")
	}
	if err := dev.EnterData(offload.To(x)); err == nil || dev.IsPresent(x) {
		t.Errorf("EnterData after the loss: %v, present %v", err, dev.IsPresent(x))
	}
	if _, err := dev.Info(); !errors.Is(err, offload.ErrDeviceLost) {
		t.Errorf("Info of a lost device: %v, want ErrDeviceLost", err)
	}
}

// TestInfoAfterKill: once an operation on a device process killed from
// outside has failed, Info returns an error wrapping ErrDeviceLost, with
// the description still filled in.
func TestInfoAfterKill(t *testing.T) {
	if err := offload.Start(offload.WithDevices("local:1")); err != nil {
		t.Fatal(err)
	}
	defer offload.Stop() // its error is the device's death
	dev := offload.On(0)
	info, err := dev.Info()
	if err != nil || info.PID <= 0 {
		t.Fatalf("Info: %+v, %v", info, err)
	}
	if err := syscall.Kill(info.PID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	x := filled(16, 1)
	for deadline := time.Now().Add(20 * time.Second); dev.Run(AddTo, int32(1), x) == nil; {
		if time.Now().After(deadline) {
			t.Fatal("the killed device still runs kernels")
		}
	}
	got, err := dev.Info()
	if !errors.Is(err, offload.ErrDeviceLost) || !strings.Contains(err.Error(), fmt.Sprint(info.PID)) || got.PID != info.PID {
		t.Errorf("Info of a lost device: %+v, %v; want ErrDeviceLost naming pid %d", got, err, info.PID)
	}
}
