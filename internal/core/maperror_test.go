package core

import (
	"errors"
	"fmt"
	"testing"

	"github.com/goffload/offload/plugin"
)

// TestMapErrorLeadsWithLoss: a mapping that fails because its device was
// lost says so first, then what it was doing.
func TestMapErrorLeadsWithLoss(t *testing.T) {
	lost := fmt.Errorf("local device 1 (pid 7): %w: device process 7: EOF", plugin.ErrDeviceLost)
	e := &MapError{Device: "device 1 (local)", Op: "target", Clause: "map(tofrom)", Name: "x", Addr: 0x10, Size: 4,
		Detail: "cannot allocate 4 bytes of device memory", Err: lost}
	want := `goffload: device 1 (local): local device 1 (pid 7): device lost: device process 7: EOF (during target map(tofrom) of "x" (HstPtr=0x10, Size=4): cannot allocate 4 bytes of device memory)`
	if got := e.Error(); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if !errors.Is(e, plugin.ErrDeviceLost) {
		t.Error("not ErrDeviceLost")
	}
}
