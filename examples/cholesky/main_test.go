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

// TestCholesky factors on device processes, on host devices, mixed, and on
// the initial device alone; run checks L against plain Go every time.
func TestCholesky(t *testing.T) {
	for _, devices := range []string{"", "host:2", "host,local:2", "host"} {
		if devices != "" {
			t.Setenv("GOFFLOAD_DEVICES", devices)
		}
		if err := run(4, 16); err != nil {
			t.Fatalf("GOFFLOAD_DEVICES=%q: %v", devices, err)
		}
	}
	if err := run(0, 16); err == nil {
		t.Error("run(0 tiles) = nil; want an error")
	}
}
