package core

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/goffload/offload/internal/mapping"

	"github.com/goffload/offload/plugin"
)

var errInjected = errors.New("injected by the test")

// defect fails a test at a behaviour that was once wrong: the message
// says what came back. (It used to skip, which let a known defect pass CI.)
func defect(t *testing.T, format string, args ...any) {
	t.Helper()
	t.Fatalf("defect: "+format, args...)
}

func wantNames(t *testing.T, err error, names ...string) {
	t.Helper()
	for _, n := range names {
		if !strings.Contains(err.Error(), n) {
			t.Errorf("error %q does not name %q", err, n)
		}
	}
}

// wantClean checks that d holds no mapping and f no device memory.
func wantClean(t *testing.T, d *Device, f *fakeDevice) {
	t.Helper()
	if n := d.Table().Len(); n != 0 {
		t.Errorf("%s: %d table entries left: %+v", d.Label(), n, d.Table().Snapshot())
	}
	if n := f.LiveAllocs(); n != 0 {
		t.Errorf("fake device %d: %d allocations never freed", f.Idx, n)
	}
}

// A Submit that fails, when it is enqueued or when the queue runs it: the
// construct returns an error wrapping the cause and naming the device and the
// construct, the kernel does not run, nothing is copied back, the mapping is
// gone and its memory freed; the same construct then works.
func TestSubmitFails(t *testing.T) {
	for _, tc := range []struct {
		name string
		act  action
	}{
		{"at the call", action{Err: errInjected, AtCall: true}},
		{"in the queue", action{Err: errInjected}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, fs := newFakeRuntime(t, 1, nil)
			d, f := r.Devices[0], fs[0]
			f.On(fSubmit, 1, tc.act)
			a := filled(16, 1)
			err := d.Target(context.Background(), kAdd1, []KernelArg{sliceArg(a, "a", mapping.MapTo|mapping.MapFrom)}, false)
			if !errors.Is(err, errInjected) {
				t.Fatalf("Target with a failing Submit: %v, want an error wrapping the cause", err)
			}
			wantNames(t, err, "device 0 (fake)", "target coretest.add1")
			if !allEqual(a, 1) {
				t.Fatalf("host buffer changed by a construct whose copy in failed: %v", a)
			}
			alloc := wantCount(t, f, fAlloc, 1)[0]
			if fr := wantCount(t, f, fFree, 1)[0]; fr.Ptr != alloc.Ptr {
				t.Fatalf("freed %#x, want the allocation %#x", uint64(fr.Ptr), uint64(alloc.Ptr))
			}
			if d.IsPresent(bufOf(a, "a")) {
				t.Fatal("the buffer is still present after the construct failed")
			}
			wantClean(t, d, f)

			if err := d.Target(context.Background(), kAdd1, []KernelArg{sliceArg(a, "a", mapping.MapTo|mapping.MapFrom)}, false); err != nil {
				t.Fatalf("the same construct again: %v", err)
			}
			if !allEqual(a, 2) {
				t.Fatalf("after a working construct: %v, want all 2", a)
			}
			wantClean(t, d, f)
		})
	}
}

// target enter data whose copy in fails on the device (not when enqueued)
// must not leave the buffer present: a later map would find it and skip the
// copy, and the kernel would read memory that was never written.
func TestEnterDataSubmitFailsInQueue(t *testing.T) {
	r, fs := newFakeRuntime(t, 1, nil)
	d, f := r.Devices[0], fs[0]
	f.Fail(fSubmit, 1, errInjected)
	a := filled(16, 1)
	err := d.EnterData(context.Background(), []MapItem{mapOf(a, "a", mapping.MapTo)})
	if !errors.Is(err, errInjected) {
		t.Fatalf("enter data with a failing Submit: %v, want an error wrapping the cause", err)
	}
	wantNames(t, err, "device 0 (fake)", "target enter data")
	if d.IsPresent(bufOf(a, "a")) {
		defect(t, "target enter data whose Submit failed in the queue leaves the buffer present (DynRefCount=%d) with device memory that was never written; the failure is only seen at Synchronize, after the entry went live", entryOf(t, d, a).Dyn)
	}
	wantClean(t, d, f)
}

// A kernel that fails: tofrom buffers are not copied back (no partial
// data), the error wraps the cause and names the kernel and the device, and
// the mapping is released.
func TestLaunchFails(t *testing.T) {
	kernelErr := fmt.Errorf("%w: injected by the test", plugin.ErrKernelFailed)
	for _, tc := range []struct {
		name string
		act  action
	}{
		// The kernel writes its output, then fails: a Retrieve after it
		// would bring back partial results.
		{"after running", action{Err: kernelErr, After: true}},
		{"at the call", action{Err: fmt.Errorf("%w: injected by the test", plugin.ErrBadKernel), AtCall: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, fs := newFakeRuntime(t, 1, nil)
			d, f := r.Devices[0], fs[0]
			f.On(fLaunch, 1, tc.act)
			a := filled(16, 1)
			err := d.Target(context.Background(), kAdd1, []KernelArg{sliceArg(a, "a", mapping.MapTo|mapping.MapFrom)}, false)
			if !errors.Is(err, tc.act.Err) {
				t.Fatalf("Target with a failing launch: %v, want an error wrapping the cause", err)
			}
			wantNames(t, err, "device 0 (fake)", "coretest.add1")
			if !allEqual(a, 1) {
				t.Fatalf("host buffer got data from a failed kernel: %v", a)
			}
			if tc.act.AtCall {
				wantCount(t, f, fRetrieve, 0) // nothing ran: nothing is copied back
			}
			wantCount(t, f, fFree, 1)
			wantClean(t, d, f)
		})
	}
}

// The device dies while the construct synchronizes: the construct returns an
// error wrapping ErrDeviceLost; later constructs on the device fail at once;
// the other device still works.
func TestDeviceDiesDuringSynchronize(t *testing.T) {
	r, fs := newFakeRuntime(t, 2, nil)
	d0, f0 := r.Devices[0], fs[0]
	s := f0.StallAt(fSynchronize, 1)
	a := filled(16, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- d0.Target(context.Background(), kAdd1, []KernelArg{sliceArg(a, "a", mapping.MapTo|mapping.MapFrom)}, false)
	}()
	recv(t, "the construct's Synchronize", s.Reached())
	f0.Die()
	s.Release()
	var err error
	within(t, "Target on a device that died", func() { err = <-errc })
	if !errors.Is(err, plugin.ErrDeviceLost) {
		t.Fatalf("Target on a device that died: %v, want an error wrapping plugin.ErrDeviceLost", err)
	}
	wantNames(t, err, "device 0 (fake)", "target coretest.add1")
	if d0.Table().Len() != 0 {
		t.Errorf("a lost device keeps %d mappings", d0.Table().Len())
	}
	afterLoss(t, r, fs)
}

// The device dies while an operation is pending in the construct's queue:
// the construct returns at once with ErrDeviceLost, without waiting for the
// stalled operation, and the operation, once released, does not run.
func TestDeviceDiesWithPendingOperation(t *testing.T) {
	r, fs := newFakeRuntime(t, 2, nil)
	d0, f0 := r.Devices[0], fs[0]
	s := f0.StallAt(fLaunch, 1)
	a := filled(16, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- d0.Target(context.Background(), kAdd1, []KernelArg{sliceArg(a, "a", mapping.MapTo|mapping.MapFrom)}, false)
	}()
	recv(t, "the launch", s.Reached())
	f0.Die()
	var err error
	within(t, "Target with a pending launch on a device that died", func() { err = <-errc })
	if !errors.Is(err, plugin.ErrDeviceLost) {
		t.Fatalf("Target: %v, want an error wrapping plugin.ErrDeviceLost", err)
	}
	s.Release()
	if !allEqual(a, 1) {
		t.Fatalf("host buffer changed by a construct on a lost device: %v", a)
	}
	afterLoss(t, r, fs)
}

// afterLoss checks that device 0, lost, fails every construct at once with
// ErrDeviceLost, and that device 1 works.
func afterLoss(t *testing.T, r *Runtime, fs []*fakeDevice) {
	t.Helper()
	d0, d1 := r.Devices[0], r.Devices[1]
	b := filled(16, 1)
	within(t, "constructs on a lost device", func() {
		if err := d0.Target(context.Background(), kAdd1, []KernelArg{sliceArg(b, "b", mapping.MapTo|mapping.MapFrom)}, false); !errors.Is(err, plugin.ErrDeviceLost) {
			t.Errorf("Target after the loss: %v, want ErrDeviceLost", err)
		}
		if err := d0.EnterData(context.Background(), []MapItem{mapOf(b, "b", mapping.MapTo)}); !errors.Is(err, plugin.ErrDeviceLost) {
			t.Errorf("enter data after the loss: %v, want ErrDeviceLost", err)
		}
		if d0.IsPresent(bufOf(b, "b")) {
			t.Errorf("b is present on a lost device after enter data failed")
		}
		tk := r.Spawn(d0, TargetOp(kAdd1, []KernelArg{sliceArg(b, "b", mapping.MapTo|mapping.MapFrom)}), []Dep{depOf(DepInOut, b)}, false)
		if err := waitTask(t, tk); !errors.Is(err, plugin.ErrDeviceLost) {
			t.Errorf("nowait task after the loss: %v, want ErrDeviceLost", err)
		}
	})
	if !allEqual(b, 1) {
		t.Fatalf("host buffer changed by constructs on a lost device: %v", b)
	}
	if err := d1.Target(context.Background(), kAdd1, []KernelArg{sliceArg(b, "b", mapping.MapTo|mapping.MapFrom)}, false); err != nil {
		t.Fatalf("Target on the other device: %v", err)
	}
	if !allEqual(b, 2) {
		t.Fatalf("the other device's construct: %v, want all 2", b)
	}
	c := filled(16, 1) // not b: a dependent of the failed task on b fails too
	tk := r.Spawn(d1, TargetOp(kAdd1, []KernelArg{sliceArg(c, "c", mapping.MapTo|mapping.MapFrom)}), []Dep{depOf(DepInOut, c)}, false)
	if err := waitTask(t, tk); err != nil {
		t.Fatalf("nowait task on the other device: %v", err)
	}
	if !allEqual(c, 2) {
		t.Fatalf("the other device's nowait task: %v, want all 2", c)
	}
	wantClean(t, d1, fs[1])
}

// Device calls that fail (a queue, an allocation, a task's event): the
// construct or task returns an error wrapping the cause and naming the device
// and the construct, leaves nothing mapped or allocated, and a task does not
// hang.
func TestDeviceCallFails(t *testing.T) {
	for _, tc := range []struct {
		name   string
		op     fakeOp
		n      int
		nowait bool
		mapErr bool // the error is a MapError naming the buffer
	}{
		{"NewQueue", fNewQueue, 1, false, false},
		{"Alloc", fAlloc, 1, false, true},
		{"copy event", fNewEvent, 1, false, true}, // the event recorded after the copy in
		{"task event", fNewEvent, 2, true, false}, // the event dependents would wait on
		{"task Record", fRecord, 2, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, fs := newFakeRuntime(t, 1, nil)
			d, f := r.Devices[0], fs[0]
			f.On(tc.op, tc.n, action{Err: errInjected, AtCall: true})
			a := filled(16, 1)
			op := TargetOp(kAdd1, []KernelArg{sliceArg(a, "a", mapping.MapTo|mapping.MapFrom)})
			var err error
			if tc.nowait {
				err = waitTask(t, r.Spawn(d, op, []Dep{depOf(DepInOut, a)}, false))
			} else {
				err = d.Run(context.Background(), op, false)
			}
			if !errors.Is(err, errInjected) {
				t.Fatalf("%s failing: %v, want an error wrapping the cause", tc.name, err)
			}
			wantNames(t, err, "device 0 (fake)")
			named := strings.Contains(err.Error(), "target coretest.add1")
			if !named && tc.op != fNewQueue {
				t.Errorf("error %q does not name the construct", err)
			}
			var me *MapError
			if tc.mapErr && (!errors.As(err, &me) || me.Name != "a" || me.Size != 64) {
				t.Fatalf("error %v: want a MapError naming buffer a of 64 bytes", err)
			}
			wantClean(t, d, f)
			settle(t, r)
			if err := d.Run(context.Background(), op, false); err != nil {
				t.Fatalf("the construct again: %v", err)
			}
			if !named {
				defect(t, "a construct whose queue cannot be created fails with an error that does not name the construct: %v", err)
			}
		})
	}
}

// A copy from a device to one that died, staged through host memory: the
// copy fails with ErrDeviceLost, and only the device that died is lost. The
// copy in runs on the host, after the source's queue; its error is the
// destination's. The source works on. (Once, the source device took the
// loss as its own: an Any() task's copy from a host device to a lost local
// device made the runtime count the host device lost too.)
func TestStagedCopyToLostDevice(t *testing.T) {
	for _, nowait := range []bool{false, true} {
		t.Run(fmt.Sprintf("nowait=%v", nowait), func(t *testing.T) {
			r, fs := newFakeRuntime(t, 2, nil)
			d0, d1 := r.Devices[0], r.Devices[1]
			const n = 64
			p0, err := d0.Alloc(n)
			if err != nil {
				t.Fatalf("Alloc on device 0: %v", err)
			}
			p1, err := d1.Alloc(n)
			if err != nil {
				t.Fatalf("Alloc on device 1: %v", err)
			}
			fs[1].Die()
			dst, src := Loc{Dev: d1, Ptr: p1}, Loc{Dev: d0, Ptr: p0}
			if nowait {
				dev, op := MemcpyOp(dst, src, n)
				err = waitTask(t, r.Spawn(dev, op, nil, false))
			} else {
				within(t, "Memcpy to a lost device", func() { err = Memcpy(dst, src, n) })
			}
			if !errors.Is(err, plugin.ErrDeviceLost) {
				t.Fatalf("copy to a lost device: %v, want an error wrapping plugin.ErrDeviceLost", err)
			}
			if d1.Lost() == nil {
				t.Errorf("device 1 died, but is not lost")
			}
			if err := d0.Lost(); err != nil {
				t.Errorf("device 0, the copy's source, is lost: %v", err)
			}
			a := filled(16, 1)
			if err := d0.Target(context.Background(), kAdd1, []KernelArg{sliceArg(a, "a", mapping.MapTo|mapping.MapFrom)}, false); err != nil {
				t.Fatalf("Target on device 0 after the copy: %v", err)
			}
			if !allEqual(a, 2) {
				t.Fatalf("Target on device 0 after the copy left %v, want all 2", a)
			}
			if err := d0.Free(p0); err != nil {
				t.Errorf("Free on device 0: %v", err)
			}
		})
	}
}
