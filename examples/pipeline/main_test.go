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

// TestPipeline runs the stencil on device processes (halos go between
// them), on two host devices, mixed, and on the host alone; run verifies
// the result against the host computation.
func TestPipeline(t *testing.T) {
	for _, devices := range []string{"", "host:2", "host,local:2", "local:3", "host"} {
		if devices != "" {
			t.Setenv("GOFFLOAD_DEVICES", devices)
		}
		if err := run(10_001, 40); err != nil {
			t.Fatalf("GOFFLOAD_DEVICES=%q: %v", devices, err)
		}
	}
}
