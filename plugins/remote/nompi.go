//go:build !mpi

package remote

import (
	"fmt"
	"os"
	"sync"

	"github.com/goffload/offload/internal/mpi"
	"github.com/goffload/offload/plugin"
)

// Without the mpi build tag there are no MPI devices. The kind is there to
// say how to get them.
func init() {
	plugin.RegisterKind(plugin.Kind{
		Name:  "mpi",
		Open:  openMPI,
		Order: 40,
		Help:  "mpi[:N]  the ranks of an MPI job other than the host's (needs a build with -tags mpi)",
	})
}

// openMPI refuses. A program that names mpi devices and cannot have them
// fails at Start, with a configuration error. It does not run their work on
// the host.
func openMPI(string) ([]plugin.Device, error) {
	return nil, configError(errNoMPI.Error())
}

var errNoMPI = fmt.Errorf("this program was built without MPI support: build it with go build -tags mpi (the default MPI, found by pkg-config), -tags mpi,openmpi or -tags mpi,mpich to pick one, or CC=mpicc go build -tags mpi,mpicc")

var warnOnce sync.Once

// serveMPIIfDevice warns under an MPI launcher. Every rank of this build runs
// as a host of its own.
func serveMPIIfDevice(*plugin.Image) {
	rank, ok := mpi.LaunchRank()
	if !ok || rank != "0" {
		return
	}
	warnOnce.Do(func() {
		fmt.Fprintf(os.Stderr, "goffload: started by an MPI launcher, but %v; every rank runs as a host\n", errNoMPI)
	})
}

// FinishMPI ends MPI on the host rank of an MPI job. This build has no MPI.
func FinishMPI() error { return nil }

// HoldMPIForTests keeps MPI running across offload.Stop; this build has no
// MPI.
func HoldMPIForTests() (finish func() error) { return FinishMPI }
