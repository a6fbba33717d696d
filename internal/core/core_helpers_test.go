package core

// Helpers of internal/core's tests: the fake devices' names, the
// kernels the tests launch, a runtime over fake devices, bounded waits, and
// buffers.

import (
	"context"
	"io"
	"reflect"
	"testing"
	"time"
	"unsafe"

	"github.com/goffload/offload/internal/config"
	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/internal/fakedev"
	"github.com/goffload/offload/internal/mapping"
)

// The fake devices (internal/fakedev) under the names the tests use.
type (
	fakeDevice = fakedev.Device
	fakeCall   = fakedev.Call
	fakeOp     = fakedev.Op
	stall      = fakedev.Stall
	action     = fakedev.Action
)

const (
	fAlloc       = fakedev.OpAlloc
	fFree        = fakedev.OpFree
	fNewQueue    = fakedev.OpNewQueue
	fNewEvent    = fakedev.OpNewEvent
	fSubmit      = fakedev.OpSubmit
	fRetrieve    = fakedev.OpRetrieve
	fExchange    = fakedev.OpExchange
	fLaunch      = fakedev.OpLaunch
	fRecord      = fakedev.OpRecord
	fWait        = fakedev.OpWait
	fSynchronize = fakedev.OpSynchronize
)

func newFakeDevice(i int) *fakeDevice { return fakedev.New(i) }
func newStall() *stall                { return fakedev.NewStall() }

// Kernels the tests launch.
var (
	kAdd1 = mustKernel("coretest.add1", func(a []int32) {
		for i := range a {
			a[i]++
		}
	})
	kRead = mustKernel("coretest.read", func(a []int32) {
		var sum int32
		for _, v := range a {
			sum += v
		}
		_ = sum
	})
	kCopyInc = mustKernel("coretest.copyinc", func(x, y []int32) {
		for i := range x {
			y[i] = x[i] + 1
		}
	})
)

func mustKernel(name string, fn any) *entries.Kernel {
	k, err := entries.RegisterKernel(name, fn)
	if err != nil {
		panic(err)
	}
	return k
}

// newFakeRuntime starts a runtime (OMP_TARGET_OFFLOAD=MANDATORY) over n fake
// devices; setup, if not nil, scripts device i before Start. The runtime is
// stopped at the end of the test, after every stall is released; a Stop that
// hangs fails the test.
func newFakeRuntime(t *testing.T, n int, setup func(i int, d *fakeDevice)) (*Runtime, []*fakeDevice) {
	t.Helper()
	devs := make([]*fakeDevice, n)
	for i := range devs {
		devs[i] = newFakeDevice(i)
		if setup != nil {
			setup(i, devs[i])
		}
	}
	spec, forget := fakedev.Register(devs)
	cfg := config.Config{Policy: config.PolicyMandatory, Devices: spec, DevicesSet: true, InfoOut: io.Discard}
	r, err := Start(cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		for _, d := range devs {
			d.ReleaseAll()
		}
		within(t, "Stop", func() { _ = r.Stop() })
		forget()
	})
	return r, devs
}

// hangLimit bounds how long a call that must return may take: past it the
// test reports a hang rather than waiting for the test binary's timeout.
const hangLimit = 10 * time.Second

// within runs fn and fails the test if it has not returned within hangLimit.
func within(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(hangLimit):
		t.Fatalf("%s did not return within %v: it hangs", what, hangLimit)
	}
}

// waitTask waits for task tk, failing the test if it hangs.
func waitTask(t *testing.T, tk *Task) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), hangLimit)
	defer cancel()
	select {
	case <-tk.Done():
		return tk.Err()
	case <-ctx.Done():
		t.Fatalf("task %d (%s) did not complete within %v", tk.ID, tk.Name, hangLimit)
		return nil
	}
}

// recv waits for ch, failing the test if it hangs.
func recv(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(hangLimit):
		t.Fatalf("%s did not happen within %v", what, hangLimit)
	}
}

// Buffers and clauses over []int32.

func bufOf(s []int32, name string) mapping.Buf {
	return mapping.Buf{Ptr: unsafe.Pointer(unsafe.SliceData(s)), Size: int64(len(s)) * 4, Name: name}
}

func mapOf(s []int32, name string, typ mapping.MapType) MapItem {
	return MapItem{Buf: bufOf(s, name), Type: typ}
}

func sliceArg(s []int32, name string, typ mapping.MapType) KernelArg {
	return KernelArg{Slice: reflect.ValueOf(s), Map: mapOf(s, name, typ), Len: len(s)}
}

func depOf(kind DepKind, s []int32) Dep {
	return Dep{Kind: kind, Addr: uintptr(unsafe.Pointer(unsafe.SliceData(s))), Keep: unsafe.Pointer(unsafe.SliceData(s))}
}

func filled(n int, v int32) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = v
	}
	return s
}

// allEqual reports whether every element of s is v.
func allEqual(s []int32, v int32) bool {
	for _, x := range s {
		if x != v {
			return false
		}
	}
	return true
}
