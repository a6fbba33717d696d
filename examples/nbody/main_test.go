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

// TestNBody runs the example on device processes (the default), on two
// host devices, and on none; run verifies the result against plain Go.
func TestNBody(t *testing.T) {
	for _, devices := range []string{"", "host:2", "host:1"} {
		if devices != "" {
			t.Setenv("GOFFLOAD_DEVICES", devices)
		}
		if err := run(256, 4, 4); err != nil {
			t.Fatalf("GOFFLOAD_DEVICES=%q: %v", devices, err)
		}
	}
}

// TestNBodyBesideGPU runs the example on a fake GPU beside the host
// device (as scripts/gpu-run does on a real one): the kernels have PTX
// that goffload-gen made from their Go bodies, so the runtime may place
// tasks on the GPU too, whose fake runs each entry's Go body over the
// parameters the PTX takes (cudafake.SetGenerated); run verifies the
// result.
func TestNBodyBesideGPU(t *testing.T) {
	drv := cudafake.New(cudafake.Config{GPUs: []cudafake.GPU{cudafake.H100}})
	drv.SetGenerated()
	defer cuda.UseDriverForTests(drv)()
	t.Setenv("GOFFLOAD_DEVICES", "cuda,host")
	t.Setenv("OMP_TARGET_OFFLOAD", "MANDATORY")
	if err := run(256, 3, 4); err != nil {
		t.Fatal(err)
	}
	if n := drv.Calls("cuLaunchKernel"); n != drv.Launches("nbody_accel")+drv.Launches("nbody_move") {
		t.Errorf("the GPU launched %d kernels, %d of them nbody's", n, drv.Launches("nbody_accel")+drv.Launches("nbody_move"))
	}
	t.Logf("the GPU ran %d accel and %d move tasks", drv.Launches("nbody_accel"), drv.Launches("nbody_move"))
}
