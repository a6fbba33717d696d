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

// TestNBody runs the example on device processes (the default), on two
// host devices, and on none; run verifies the result against plain Go.
func TestNBody(t *testing.T) {
	for _, devices := range []string{"", "host:2", "host:1"} {
		if devices != "" {
			t.Setenv("GOFFLOAD_DEVICES", devices)
		}
		if err := run(256, 4, 4); err != nil {
			t.Fatalf("GOFFLOAD_DEVICES=%q: %v", devices, err)
		}
	}
}
