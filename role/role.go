// Package role tells a goffload process which part it plays: the host,
// which runs the program, or a device process, which serves a host.
//
// offload.Start finds the role itself. A program needs this package only
// where it starts before Start: a test binary whose tests start device
// processes, and a main that chooses its devices by how it was launched.
package role

import (
	_ "github.com/goffload/offload" // registers the device kinds
	"github.com/goffload/offload/internal/core"
	"github.com/goffload/offload/internal/mpi"
)

// ServeDevice serves as a device and ends the process if this process is
// a device process (GOFFLOAD_ROLE=device, or a device rank under an MPI
// launcher); otherwise it returns at once. offload.Start calls it first.
// A test binary whose tests start device processes (GOFFLOAD_DEVICES=
// local:N) calls it at the top of TestMain, so that its device processes
// serve instead of running the tests:
//
//	func TestMain(m *testing.M) {
//		role.ServeDevice()
//		os.Exit(m.Run())
//	}
//
// Under an MPI launcher, the host rank must call offload.Stop before it
// exits: Stop ends the device ranks and finalizes MPI.
func ServeDevice() { core.ServeDevice() }

// UnderMPI reports whether an MPI launcher (mpirun, mpiexec, srun) started
// this process. In a program built with the mpi build tag, the devices
// are then by default the job's ranks other than the host's
// (GOFFLOAD_HOST_RANK, default 0), one device each, and Start serves on
// those ranks.
func UnderMPI() bool { return mpi.Launched() }
