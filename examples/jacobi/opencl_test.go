package main

import (
	"os"
	"testing"

	"github.com/goffload/offload/plugin"
)

// TestJacobiOpenCL runs the example on the machine's OpenCL driver (PoCL in CI: a
// real driver, which builds jacobi.cl (examples/apps/jacobi) when the program starts): on one
// OpenCL device, on two devices that share it (what goes between them is
// the driver's copies and barriers), and beside a host device. The
// devices are mandatory, and OpenCL devices run no Go bodies, so the
// kernels ran their OpenCL C; run verifies the result. It skips without
// an OpenCL device, unless GOFFLOAD_REQUIRE_OPENCL is set.
func TestJacobiOpenCL(t *testing.T) {
	k, _ := plugin.LookupKind("opencl")
	ds, err := k.Open("0")
	if err != nil {
		if os.Getenv("GOFFLOAD_REQUIRE_OPENCL") != "" {
			t.Fatalf("opencl:0: %v", err)
		}
		t.Skipf("no OpenCL device: %v", err)
	}
	ds[0].Close()
	t.Setenv("OMP_TARGET_OFFLOAD", "MANDATORY")
	for _, devices := range []string{"opencl:0", "opencl:0,opencl:0", "opencl:0,host"} {
		t.Setenv("GOFFLOAD_DEVICES", devices)
		if err := run(67, 30, false); err != nil {
			t.Fatalf("GOFFLOAD_DEVICES=%q: %v", devices, err)
		}
	}
}
