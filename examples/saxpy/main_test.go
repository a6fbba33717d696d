package main

import (
	"os"
	"testing"

	"github.com/goffload/offload"
)

// The device processes this test starts are this test binary.
func TestMain(m *testing.M) {
	offload.ServeDevice()
	os.Exit(m.Run())
}

// TestSaxpy runs the main job as the README's command does (two local
// device processes), then mixed with a host device, then on the host alone;
// run verifies the result against the host itself.
func TestSaxpy(t *testing.T) {
	for _, devices := range []string{"", "host,local:2", "host", "local:1"} {
		if devices != "" {
			t.Setenv("GOFFLOAD_DEVICES", devices)
		}
		if err := run(100_003); err != nil {
			t.Fatalf("GOFFLOAD_DEVICES=%q: %v", devices, err)
		}
		if offload.NumDevices() != 0 {
			t.Fatal("run did not stop the runtime")
		}
	}
}
