package offload_test

import (
	"context"
	"errors"
	"testing"

	"github.com/goffload/offload"
)

// TestNilContext (issue 34): one rule for every call that takes a
// context: a nil one is an error wrapping ErrBadArgument (as net/http's
// NewRequestWithContext returns), never a panic, and not taken as "no
// context" either.
func TestNilContext(t *testing.T) {
	start(t, offload.WithDevices("host"))
	x := filled(8, 1)
	pending := offload.On(0).Nowait().Run(SlowSet, int64(50), int32(2), offload.ToFrom(x))
	var g offload.Group
	g.Add(pending)
	d, err := offload.On(0).Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	defer offload.Free(d)
	h := offload.HostPtr(make([]byte, 64))
	var nilCtx context.Context
	nilDev := offload.On(0).WithContext(nilCtx)
	calls := map[string]func() error{
		"Task.WaitContext(nil)":          func() error { return pending.WaitContext(nilCtx) },
		"Group.Wait(nil)":                func() error { return g.Wait(nilCtx) },
		"Taskwait(nil)":                  func() error { return offload.Taskwait(nilCtx) },
		"Memcpy task's WaitContext(nil)": func() error { return offload.Nowait().Memcpy(d, h, 64).WaitContext(nilCtx) },
		"WithContext(nil).Run":           func() error { return nilDev.Run(benchTouch, make([]byte, 8)) },
		"WithContext(nil).Data":          func() error { return nilDev.Data(func() error { return nil }, offload.To(x)) },
		"WithContext(nil).EnterData":     func() error { return nilDev.EnterData(offload.To(x)) },
		"WithContext(nil).ExitData":      func() error { return nilDev.ExitData(offload.Release(x)) },
		"WithContext(nil).Update":        func() error { return nilDev.Update(offload.To(x)) },
		"typed K.Run(WithContext(nil))":  func() error { return benchTyped3.Run(nilDev, float32(1), make([]float32, 4), make([]float32, 4)) },
	}
	for name, call := range calls {
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s panicked: %v", name, p)
				}
			}()
			if err := call(); !errors.Is(err, offload.ErrBadArgument) {
				t.Errorf("%s: %v, want an error wrapping ErrBadArgument", name, err)
			}
		}()
	}
	if err := pending.Wait(); err != nil {
		t.Fatal(err)
	}
	// StopContext(nil) last: it stops nothing and says why.
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Errorf("StopContext(nil) panicked: %v", p)
			}
		}()
		if err := offload.StopContext(nilCtx); !errors.Is(err, offload.ErrBadArgument) {
			t.Errorf("StopContext(nil): %v, want an error wrapping ErrBadArgument", err)
		}
	}()
	if offload.NumDevices() != 1 {
		t.Error("StopContext(nil) stopped the runtime")
	}
}
