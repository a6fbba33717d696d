package main

import (
	"testing"

	"github.com/goffload/offload/internal/opencltest"
)

// TestCholeskyOpenCL runs the example on the machine's OpenCL driver (PoCL in CI: a
// real driver, which builds the OpenCL C that goffload-gen made from
// examples/apps/cholesky's Go bodies when the program starts): on one
// OpenCL device, on two devices that share it, and beside a host device,
// the devices mandatory, so the kernels ran their OpenCL C; run verifies
// the result (opencltest.RunExample). It skips without an OpenCL device,
// unless GOFFLOAD_REQUIRE_OPENCL is set.
func TestCholeskyOpenCL(t *testing.T) {
	opencltest.RunExample(t, func() error { return run(4, 16, false) })
}
