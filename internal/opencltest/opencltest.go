// Package opencltest is what tests need of the machine's OpenCL driver
// (PoCL in CI, which scripts/test installs): its first device through the
// opencl kind, or a skip where there is none, which GOFFLOAD_REQUIRE_OPENCL
// (set by scripts/test) turns into a failure. It is for tests only; the
// opencl kind must be registered (a test of the offload package, of an
// example, or of the kind itself).
package opencltest

import (
	"os"
	"testing"

	"github.com/goffload/offload/plugin"
)

// Skip skips the test for the reason format and args give, or fails it
// where GOFFLOAD_REQUIRE_OPENCL is set.
func Skip(t testing.TB, format string, args ...any) {
	t.Helper()
	if os.Getenv("GOFFLOAD_REQUIRE_OPENCL") != "" {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// Open opens one device on the machine's first OpenCL device (the spec
// "opencl:0"), closed when the test ends; without one the test skips, as
// Skip says.
func Open(t testing.TB) plugin.Device {
	t.Helper()
	k, ok := plugin.LookupKind("opencl")
	if !ok {
		t.Fatal("the opencl kind is not registered")
	}
	ds, err := k.Open("0")
	if err != nil {
		Skip(t, "no OpenCL device: opencl:0: %v", err)
	}
	t.Cleanup(func() {
		for _, d := range ds {
			d.Close()
		}
	})
	return ds[0]
}

// Need skips the test where the machine has no OpenCL device, as Open
// does, and leaves no device open.
func Need(t testing.TB) {
	t.Helper()
	k, ok := plugin.LookupKind("opencl")
	if !ok {
		t.Fatal("the opencl kind is not registered")
	}
	ds, err := k.Open("0")
	if err != nil {
		Skip(t, "no OpenCL device: opencl:0: %v", err)
	}
	for _, d := range ds {
		d.Close()
	}
}

// RunExample runs an example's run function on the machine's OpenCL
// driver: on one OpenCL device, on two devices that share it (what goes
// between them is the driver's copies and barriers), beside a host
// device, and proxied: served by a local device process
// (local:1[opencl]), and by two of them beside it in the program. The devices are mandatory (OMP_TARGET_OFFLOAD=MANDATORY), and
// OpenCL devices run no Go bodies, so the kernels run their OpenCL C; run
// verifies its result. Without an OpenCL device it skips, as Need does.
func RunExample(t *testing.T, run func() error) {
	t.Helper()
	Need(t)
	t.Setenv("OMP_TARGET_OFFLOAD", "MANDATORY")
	for _, devices := range []string{"opencl:0", "opencl:0,opencl:0", "opencl:0,host", "local:1[opencl]", "local:2[opencl],opencl:0"} {
		t.Setenv("GOFFLOAD_DEVICES", devices)
		if err := run(); err != nil {
			t.Fatalf("GOFFLOAD_DEVICES=%q: %v", devices, err)
		}
	}
}
