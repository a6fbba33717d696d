package offload_test

import (
	"testing"

	"github.com/goffload/offload"
	"github.com/goffload/offload/internal/opencltest"
)

// addOneCL is an OpenCL kernel that adds 1 to the n longs at x.
const addOneCL = `
kernel void addone(global long *x, long n) {
	long i = get_global_id(0);
	if (i < n) x[i] += 1;
}
`

// declCLAdd is addone with a Go body for CPU devices.
var declCLAdd = offload.MustKernel2("declare.cl_addone", func(ctx offload.Ctx, x offload.InOut[int64], n int) {
	for i := range n {
		x[i]++
	}
}).OpenCL([]byte(addOneCL), "addone")

// needOpenCL skips the test where the machine has no OpenCL device,
// unless GOFFLOAD_REQUIRE_OPENCL is set (scripts/test installs PoCL).
func needOpenCL(t *testing.T) {
	t.Helper()
	opencltest.Need(t)
}

// TestDeclareToOpenCL: on an OpenCL device (PoCL's, a real driver) a "to"
// variable is present memory holding the host's value from Start on; an
// OpenCL C kernel given g.Host() as an argument works on the device's
// copy, which Update copies back; the host device keeps a copy of its
// own.
func TestDeclareToOpenCL(t *testing.T) {
	needOpenCL(t)
	c := declCounter.Host()
	defer func(v int64) { c[0] = v }(c[0])
	c[0] = 500
	start(t, offload.WithDevices("opencl:0,host"), offload.WithOffload("MANDATORY"))
	cl, host := offload.On(0), offload.On(1)
	if in, err := cl.Info(); err != nil || in.Kind != "opencl" {
		t.Fatalf("device 0: %+v, %v; want the OpenCL device", in, err)
	}
	check := func(what string, dev offload.Device, want int64) {
		t.Helper()
		c[0] = -1
		if err := dev.Update(offload.From(c)); err != nil {
			t.Fatalf("%s: update from: %v", what, err)
		}
		if c[0] != want {
			t.Fatalf("%s: counter %d, want %d", what, c[0], want)
		}
	}
	check("OpenCL device after Start", cl, 500)
	for i := range 3 {
		if err := declCLAdd.Run(cl, c, 1); err != nil {
			t.Fatalf("launch %d: %v", i, err)
		}
	}
	check("OpenCL device after three launches", cl, 503)
	if err := declCLAdd.Nowait(cl.Nowait(offload.DependInOut(c)), c, 1).Wait(); err != nil {
		t.Fatal(err)
	}
	check("OpenCL device after a task", cl, 504)
	check("host device", host, 500)
}
