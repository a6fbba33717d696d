package main

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/goffload/offload"
	"github.com/goffload/offload/internal/cudadrv/cudafake"
	"github.com/goffload/offload/plugins/cuda"
	"github.com/goffload/offload/role"
)

// The device processes this test starts are this test binary.
func TestMain(m *testing.M) {
	role.ServeDevice()
	os.Exit(m.Run())
}

// TestSaxpy runs the main job as the README's command does (two local
// device processes, linked through shared memory), then mixed with a host
// device, then on the host alone, then on local devices over their sockets
// (GOFFLOAD_LOCAL_LINK=socket); run verifies the result against the host
// itself.
func TestSaxpy(t *testing.T) {
	for _, devices := range []string{"", "host,local:2", "host", "local:1", "local:2 socket"} {
		if d, ok := strings.CutSuffix(devices, " socket"); ok {
			devices = d
			t.Setenv("GOFFLOAD_LOCAL_LINK", "socket")
		}
		if devices != "" {
			t.Setenv("GOFFLOAD_DEVICES", devices)
		}
		if err := run(100_003); err != nil {
			t.Fatalf("GOFFLOAD_DEVICES=%q GOFFLOAD_LOCAL_LINK=%q: %v", devices, os.Getenv("GOFFLOAD_LOCAL_LINK"), err)
		}
		if offload.NumDevices() != 0 {
			t.Fatal("run did not stop the runtime")
		}
	}
}

// TestSaxpyFakeGPU runs the main job with GOFFLOAD_DEVICES=cuda on two
// fake GPUs (internal/cudadrv/cudafake): the cuda kind loads the PTX that
// goffload-gen made from the Go body (its .entry parameters parsed and
// checked against the kernel's and the hidden ones), packs the launch's
// parameters in order with the slice lengths, the device number and the
// fault record, and the fake GPU runs the entry's Go body over them
// (cudafake.SetGenerated).
func TestSaxpyFakeGPU(t *testing.T) {
	gpu := cudafake.H100
	drv := cudafake.New(cudafake.Config{GPUs: []cudafake.GPU{gpu, gpu}})
	if set := drv.SetGenerated(); !slices.Contains(set, "saxpy") {
		t.Fatalf("generated PTX entries %v: no saxpy", set)
	}
	defer cuda.UseDriverForTests(drv)()
	t.Setenv("GOFFLOAD_DEVICES", "cuda")
	t.Setenv("OMP_TARGET_OFFLOAD", "MANDATORY")
	if err := run(100_003); err != nil {
		t.Fatal(err)
	}
	if n := drv.Launches("saxpy"); n != 2 {
		t.Errorf("the fake GPUs ran saxpy %d times, want 2 (one part each)", n)
	}
	if n := drv.Calls("cuModuleLoadData"); n != 2 {
		t.Errorf("cuModuleLoadData called %d times, want 2 (the image once per GPU)", n)
	}
}
