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

// TestJacobi runs the iteration on device processes (halo rows go between
// them), on host devices, mixed, and on the initial device alone; run
// verifies every grid against plain Go.
func TestJacobi(t *testing.T) {
	for _, devices := range []string{"", "host:2", "host,local:2", "local:3", "host"} {
		if devices != "" {
			t.Setenv("GOFFLOAD_DEVICES", devices)
		}
		if err := run(67, 30, devices == ""); err != nil {
			t.Fatalf("GOFFLOAD_DEVICES=%q: %v", devices, err)
		}
	}
}

// TestJacobiBadInput: a grid too small is an error, not a panic.
func TestJacobiBadInput(t *testing.T) {
	if err := run(2, 1, false); err == nil {
		t.Fatal("run(2, 1) = nil; want an error")
	}
}
