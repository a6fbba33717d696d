package opencl_test

import (
	"testing"

	"github.com/goffload/offload/internal/opencltest"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/plugintest"
	"github.com/goffload/offload/plugins/opencl"
)

// openAll opens two devices on the machine's first OpenCL device
// ("opencl:0,opencl:0": PoCL has one), in the emulate mode (the suite's
// kernels without OpenCL C run their Go bodies over copies of device
// memory, in queue order; those with OpenCL C run on the driver). The test
// skips where there is no OpenCL device, unless GOFFLOAD_REQUIRE_OPENCL is
// set (scripts/test installs PoCL and sets it).
func openAll(t *testing.T) []plugin.Device {
	t.Helper()
	t.Cleanup(opencl.UseEmulationForTests())
	k, ok := plugin.LookupKind("opencl")
	if !ok {
		t.Fatal("the opencl kind is not registered")
	}
	var devs []plugin.Device
	for range 2 {
		ds, err := k.Open("0")
		if err != nil {
			opencltest.Skip(t, "no OpenCL device: opencl:0: %v", err)
		}
		devs = append(devs, ds...)
	}
	return devs
}

// TestConformance runs the conformance suite on the machine's OpenCL
// driver (PoCL in CI) with shared virtual memory where it has it.
func TestConformance(t *testing.T) {
	plugintest.Run(t, openAll)
}

// TestConformanceBuffers runs it with buffers (GOFFLOAD_OPENCL_SVM=0), as
// on a device without SVM (NVIDIA's OpenCL).
func TestConformanceBuffers(t *testing.T) {
	t.Setenv(opencl.SVMEnv, "0")
	plugintest.Run(t, openAll)
}
