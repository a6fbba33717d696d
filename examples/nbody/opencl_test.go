package main

import (
	"testing"

	"github.com/goffload/offload/internal/opencltest"
)

// TestNBodyOpenCL runs the example on the machine's OpenCL driver (PoCL in
// CI), whose kernels are the OpenCL C generated from the Go bodies
// (zz_offload_gen.go): on one OpenCL device, on two that share it, and
// beside a host device (offload.Any then chooses between them), the
// devices mandatory; run verifies the result against plain Go.
func TestNBodyOpenCL(t *testing.T) {
	opencltest.RunExample(t, func() error { return run(256, 4, 4) })
}
