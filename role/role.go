// Package role tells a goffload process which part it plays.
// The host runs the program; a device process serves a host.
//
// offload.Start finds the role itself. A program needs this package only
// where it starts before Start. That is a test binary whose tests start
// device processes, or a main that chooses its devices by how it was
// launched.
package role

import (
	_ "github.com/goffload/offload" // registers the device kinds
	"github.com/goffload/offload/internal/core"
	"github.com/goffload/offload/internal/mpi"
)

// ServeDevice serves as a device and ends the process if this process is a
// device process. Otherwise it returns at once. A device process is one
// started with GOFFLOAD_ROLE=device, or a device rank under an MPI launcher.
// offload.Start calls ServeDevice first.
//
// A test binary whose tests start device processes (GOFFLOAD_DEVICES=
// local:N) calls it at the top of TestMain. Its device processes then serve
// instead of running the tests:
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
// this process. In a program built with the mpi build tag, the devices are
// then by default the job's ranks other than the host's, one device each.
// GOFFLOAD_HOST_RANK names the host's rank (default 0). Start serves on the
// other ranks.
func UnderMPI() bool { return mpi.Launched() }
