package core

import (
	"errors"
	"fmt"
	"testing"

	"github.com/goffload/offload/plugin"

	_ "github.com/goffload/offload/plugins/host"
	_ "github.com/goffload/offload/plugins/remote"
)

// TestSpecsAsWritten: an item reads back as the user wrote it (the kind in
// lower case): goffload-info and errors show tcp://HOST:PORT, not
// tcp:HOST:PORT.
func TestSpecsAsWritten(t *testing.T) {
	specs, err := ParseDevices(" host , Local:2,tcp://127.0.0.1:7070,local[host],local:2[host+host] ")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, sp := range specs {
		got = append(got, sp.String())
	}
	want := []string{"host", "local:2", "tcp://127.0.0.1:7070", "local[host]", "local:2[host+host]"}
	if len(got) != len(want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("item %d: %q, want %q", i, got[i], want[i])
		}
	}
	if specs, err := ParseDevices("  "); err != nil || len(specs) != 0 {
		t.Errorf("blank: %v %v, want no devices", specs, err)
	}
	if _, err := ParseDevices("host,,local"); !errors.Is(err, ErrConfig) {
		t.Errorf("empty item: %v", err)
	}
}

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
