package main

import (
	"testing"

	"github.com/goffload/offload"
)

// TestSaxpy runs the main job on the default devices and on two host
// devices; run verifies the result against the host itself.
func TestSaxpy(t *testing.T) {
	for _, devices := range []string{"", "host:2"} {
		if devices != "" {
			t.Setenv("GOFFLOAD_DEVICES", devices)
		}
		if err := run(10007); err != nil {
			t.Fatalf("GOFFLOAD_DEVICES=%q: %v", devices, err)
		}
	}
	if offload.NumDevices() != 0 {
		t.Error("run did not stop the runtime")
	}
}
