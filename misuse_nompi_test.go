//go:build !mpi

package offload_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/goffload/offload"
)

// TestMPIWithoutMPIBuild: naming mpi devices in a build without MPI is an
// error at Start that says how to build with it; their work does not run
// quietly on the host.
func TestMPIWithoutMPIBuild(t *testing.T) {
	for _, devices := range []string{"mpi", "host,mpi:2"} {
		err := offload.Start(offload.WithDevices(devices))
		if err == nil {
			offload.Stop()
			t.Fatalf("Start with %q succeeded in a build without MPI", devices)
		}
		if !errors.Is(err, offload.ErrConfig) || !strings.Contains(err.Error(), "-tags mpi") || !strings.Contains(err.Error(), "without MPI support") {
			t.Errorf("%q: %v; want ErrConfig saying how to build with MPI", devices, err)
		}
	}
}
