package anyrun

import (
	"io"
	"reflect"
	"testing"
	"time"
	"unsafe"

	"github.com/goffload/offload/internal/config"
	"github.com/goffload/offload/internal/core"
	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/internal/fakedev"
	"github.com/goffload/offload/internal/mapping"
)

// kCopyInc is y = x+1, the kernel the tests place.
var kCopyInc = func() *entries.Kernel {
	k, err := entries.RegisterKernel("anyruntest.copyinc", func(x, y []int32) {
		for i := range x {
			y[i] = x[i] + 1
		}
	})
	if err != nil {
		panic(err)
	}
	return k
}()

// newFakeRuntime starts a runtime (OMP_TARGET_OFFLOAD=MANDATORY) over n
// fake devices; setup, if not nil, scripts device i before Start. The
// runtime is stopped at the end of the test, after every stall is
// released; a Stop that hangs fails the test.
func newFakeRuntime(t *testing.T, n int, setup func(i int, d *fakedev.Device)) (*core.Runtime, []*fakedev.Device) {
	t.Helper()
	devs := make([]*fakedev.Device, n)
	for i := range devs {
		devs[i] = fakedev.New(i)
		if setup != nil {
			setup(i, devs[i])
		}
	}
	spec, forget := fakedev.Register(devs)
	r, err := core.Start(config.Config{Policy: config.PolicyMandatory, Devices: spec, DevicesSet: true, InfoOut: io.Discard})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		for _, d := range devs {
			d.ReleaseAll()
		}
		done := make(chan struct{})
		go func() { _ = r.Stop(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Error("Stop: hung for 10s")
		}
		forget()
	})
	return r, devs
}

// waitTask waits for tk, failing the test if it hangs.
func waitTask(t *testing.T, tk *core.Task) error {
	t.Helper()
	select {
	case <-tk.Done():
		return tk.Err()
	case <-time.After(10 * time.Second):
		t.Fatalf("task %d: hung for 10s", tk.ID)
		return nil
	}
}

func bufOf(s []int32, name string) mapping.Buf {
	return mapping.Buf{Ptr: unsafe.Pointer(unsafe.SliceData(s)), Size: int64(len(s)) * 4, Name: name}
}

func sliceArg(s []int32, name string, typ mapping.MapType) core.KernelArg {
	return core.KernelArg{Slice: reflect.ValueOf(s), Map: core.MapItem{Buf: bufOf(s, name), Type: typ}, Len: len(s)}
}

func filled(n int, v int32) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = v
	}
	return s
}

func allEqual(s []int32, v int32) bool {
	for _, x := range s {
		if x != v {
			return false
		}
	}
	return true
}
