package main

import (
	"os"
	"testing"

	"github.com/goffload/offload/internal/cudadrv/cudafake"
	"github.com/goffload/offload/plugins/cuda"
	"github.com/goffload/offload/role"
)

// The device processes this test starts are this test binary.
func TestMain(m *testing.M) {
	role.ServeDevice()
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

// TestPipelineFakeGPU runs the stencil on fake GPUs
// (internal/cudadrv/cudafake), alone and beside the host device: the cuda
// kind loads the PTX goffload-gen made from Step's body (its .entry
// parameters parsed and checked), packs n, next and cur and the hidden
// parameters as the entry declares them, and the fake GPU runs the entry's
// Go body over them (cudafake.SetGenerated); the halos go between GPUs (cuMemcpyPeerAsync), within one
// GPU shared by two devices (cuMemcpyDtoDAsync), and between a GPU and
// the host device.
func TestPipelineFakeGPU(t *testing.T) {
	const cells, steps = 10_001, 40
	for _, c := range []struct {
		gpus    int
		devices string
		onGPU   int // devices that are GPUs
	}{
		{1, "cuda,host", 1},
		{2, "cuda", 2},
		{2, "host,cuda:1,cuda:0", 2},
		{1, "cuda:0,cuda:0", 2},
	} {
		gpus := make([]cudafake.GPU, c.gpus)
		for i := range gpus {
			gpus[i] = cudafake.H100
		}
		drv := cudafake.New(cudafake.Config{GPUs: gpus})
		drv.SetGenerated()
		restore := cuda.UseDriverForTests(drv)
		t.Setenv("GOFFLOAD_DEVICES", c.devices)
		t.Setenv("OMP_TARGET_OFFLOAD", "MANDATORY")
		err := run(cells, steps)
		restore()
		if err != nil {
			t.Fatalf("%d fake GPUs, GOFFLOAD_DEVICES=%s: %v", c.gpus, c.devices, err)
		}
		if n := drv.Launches("pipeline_step"); n != c.onGPU*steps {
			t.Errorf("%d fake GPUs, GOFFLOAD_DEVICES=%s: the fake GPUs ran step %d times, want %d (%d per GPU device)", c.gpus, c.devices, n, c.onGPU*steps, steps)
		}
	}
}
