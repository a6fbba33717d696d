package remote_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/goffload/offload/internal/mpi"
)

// mpiFlavor is an MPI implementation as Debian installs it.
type mpiFlavor struct {
	name     string
	cc       string // the compiler wrapper that must exist; CC for the build when wrap is set
	tags     string // the build tags
	wrap     bool   // built with CC=cc (-tags mpi,mpicc), not with pkg-config's flags
	launcher string
	args     []string // before -np
	env      []string
	pkgs     string
}

// openmpiEnv lets Open MPI's launcher run as root and place three ranks on
// two cores; MPICH's ignores it.
var openmpiEnv = []string{"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "OMPI_MCA_pml=ob1", "OMPI_MCA_rmaps_base_oversubscribe=1"}

// mpiFlavors builds Open MPI's jobs with pkg-config's flags and MPICH's
// with its compiler wrapper, so that both ways of building are run.
var mpiFlavors = []mpiFlavor{
	{name: "openmpi", cc: "mpicc.openmpi", tags: "mpi,openmpi", launcher: "mpirun.openmpi",
		env: openmpiEnv, pkgs: "libopenmpi-dev openmpi-bin pkgconf"},
	{name: "mpich", cc: "mpicc.mpich", tags: "mpi,mpicc", wrap: true, launcher: "mpiexec.mpich", pkgs: "libmpich-dev mpich"},
}

// buildEnv is the environment of a go build for f.
func (f mpiFlavor) buildEnv() []string {
	env := append(os.Environ(), "CGO_ENABLED=1")
	if f.wrap {
		env = append(env, "CC="+f.cc)
	}
	return env
}

// need skips t, or fails it under GOFFLOAD_REQUIRE_MPI, when a program of
// f's is missing.
func (f mpiFlavor) need(t *testing.T, progs ...string) {
	t.Helper()
	for _, p := range progs {
		if _, err := exec.LookPath(p); err != nil {
			if os.Getenv("GOFFLOAD_REQUIRE_MPI") != "" {
				t.Fatalf("%s is missing (apt-get install -y %s) and GOFFLOAD_REQUIRE_MPI is set", p, f.pkgs)
			}
			t.Skipf("%s is not installed (apt-get install -y %s)", p, f.pkgs)
		}
	}
}

// goBuild runs the go command with f's build environment.
func (f mpiFlavor) goBuild(t *testing.T, args ...string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(goRoot(t), "bin", "go"), args...)
	cmd.Env = f.buildEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestMPIJobs builds this package's tests and the examples with MPI support
// against OpenMPI and against MPICH, and runs them as jobs of three ranks
// under each one's launcher: the conformance suite and a kernel panic on
// MPI devices (the tests named MPIRank), saxpy, the pipeline with its
// device-to-device halos, and a device rank that exits in a kernel. An MPI
// that is not installed is skipped, unless GOFFLOAD_REQUIRE_MPI is set (as
// .ci/run does, after installing both).
func TestMPIJobs(t *testing.T) {
	if mpi.Launched() {
		t.Skip("inside an MPI job: this test starts the jobs")
	}
	if testing.Short() {
		t.Skip("-short: builds and runs MPI jobs")
	}
	for _, f := range mpiFlavors {
		t.Run(f.name, func(t *testing.T) {
			f.need(t, f.cc, f.launcher)
			dir := t.TempDir()
			test := filepath.Join(dir, "remote.test")
			f.goBuild(t, "test", "-c", "-race", "-tags", f.tags, "-o", test, ".")
			f.goBuild(t, "build", "-tags", f.tags, "-o", filepath.Join(dir, "saxpy"), "../../examples/saxpy")
			f.goBuild(t, "build", "-tags", f.tags, "-o", filepath.Join(dir, "pipeline"), "../../examples/pipeline")

			t.Run("conformance", func(t *testing.T) {
				out, err := f.run(t, nil, nil, test, "-test.run", "MPIRank", "-test.v")
				if err != nil || !strings.Contains(out, "--- PASS: TestMPIRankConformance") || !strings.Contains(out, "--- PASS: TestMPIRankKernelPanic") {
					t.Fatalf("%v\n%s", err, out)
				}
			})
			t.Run("saxpy", func(t *testing.T) {
				out, err := f.run(t, nil, nil, filepath.Join(dir, "saxpy"), "-n", "1000000")
				if err != nil || !strings.Contains(out, "on 2 device(s): verified") || !strings.Contains(out, "(mpi, ") {
					t.Fatalf("%v\n%s", err, out)
				}
			})
			t.Run("pipeline", func(t *testing.T) {
				out, err := f.run(t, nil, nil, filepath.Join(dir, "pipeline"), "-n", "100000", "-steps", "100")
				if err != nil || !strings.Contains(out, "on 2 device(s)") || !strings.Contains(out, "verified") {
					t.Fatalf("%v\n%s", err, out)
				}
			})
			t.Run("host and mpi", func(t *testing.T) {
				// An MPI device beside a host device: dependencies and
				// halos between them go through this process (issue 4's
				// fallback), those between the MPI devices straight.
				env := []string{"GOFFLOAD_DEVICES=host,mpi"}
				out, err := f.run(t, nil, env, filepath.Join(dir, "pipeline"), "-n", "30000", "-steps", "50")
				if err != nil || !strings.Contains(out, "on 3 device(s)") || !strings.Contains(out, "verified") {
					t.Fatalf("%v\n%s", err, out)
				}
				out, err = f.run(t, nil, env, filepath.Join(dir, "saxpy"), "-n", "30000")
				if err != nil || !strings.Contains(out, "on 3 device(s): verified") {
					t.Fatalf("%v\n%s", err, out)
				}
			})
			t.Run("rank stops", func(t *testing.T) {
				// A device rank stopped (SIGSTOP) is lost after
				// GOFFLOAD_DEVICE_TIMEOUT; the host goes on with the other.
				env := []string{"GOFFLOAD_TEST_RANK_STOP=1", "GOFFLOAD_DEVICE_TIMEOUT=1s"}
				out, _ := f.run(t, nil, env, test, "-test.run", "MPIRankStop", "-test.v")
				if !strings.Contains(out, "the other device rank went on") {
					t.Fatalf("the host did not lose the stopped device rank and go on:\n%s", out)
				}
			})
			t.Run("rank stubborn", func(t *testing.T) {
				// Stop kills a device whose kernel never returns (issue
				// 34): it says so on stderr, the rank exits without its
				// kernel, MPI is finalized, and the job's exit status is
				// the program's own (3).
				env := []string{"GOFFLOAD_TEST_RANK_STUBBORN=1"}
				out, err := f.run(t, nil, env, test, "-test.run", "MPIRankStubborn", "-test.v")
				var ee *exec.ExitError
				if !errors.As(err, &ee) || ee.ExitCode() != 3 || !strings.Contains(out, "stubborn: MPI finalized") ||
					!strings.Contains(out, "goffload: Stop: mpi device 0 (rank 1, pid ") {
					t.Fatalf("%s: %v; want exit status 3, MPI finalized and goffload's line on stderr:\n%s", f.launcher, err, out)
				}
			})
			t.Run("rank exits", func(t *testing.T) {
				// OpenMPI's mpirun ends the whole job when a rank exits
				// without MPI_Finalize; MPICH's mpiexec does too, unless
				// told -disable-auto-cleanup: then the host loses the
				// device after GOFFLOAD_DEVICE_TIMEOUT and goes on.
				var extra []string
				if f.name == "mpich" {
					extra = []string{"-disable-auto-cleanup"}
				}
				env := []string{"GOFFLOAD_TEST_RANK_EXIT=1", "GOFFLOAD_DEVICE_TIMEOUT=2s"}
				out, err := f.run(t, extra, env, test, "-test.run", "MPIRankExit", "-test.v")
				if err == nil {
					t.Fatalf("the job of a rank that exited ended with success:\n%s", out)
				}
				if f.name == "mpich" && !strings.Contains(out, "--- PASS: TestMPIRankExit") {
					t.Fatalf("the host did not report the lost device rank:\n%s", out)
				}
				t.Logf("%s: %v", f.launcher, err)
			})
		})
	}
}

// TestMPIBuildDefault builds saxpy as a user first would, `go build -tags
// mpi` with no CC: pkg-config's "mpi" names the system's default MPI, the
// one Debian's plain mpirun starts. And a program built for Open MPI and
// started by MPICH's launcher says so, instead of running three singletons
// that quietly keep every kernel on the host.
func TestMPIBuildDefault(t *testing.T) {
	if mpi.Launched() {
		t.Skip("inside an MPI job: this test starts the jobs")
	}
	if testing.Short() {
		t.Skip("-short: builds and runs MPI jobs")
	}
	openmpi, mpich := mpiFlavors[0], mpiFlavors[1]
	openmpi.need(t, "pkg-config", "mpirun", openmpi.launcher)
	mpich.need(t, mpich.launcher)
	dir := t.TempDir()
	plain := mpiFlavor{name: "default", tags: "mpi", launcher: "mpirun", env: openmpiEnv}
	plain.goBuild(t, "build", "-tags", "mpi", "-o", filepath.Join(dir, "saxpy"), "../../examples/saxpy")
	out, err := plain.run(t, nil, nil, filepath.Join(dir, "saxpy"), "-n", "100000")
	if err != nil || !strings.Contains(out, "on 2 device(s): verified") || !strings.Contains(out, "(mpi, ") {
		t.Fatalf("saxpy built with -tags mpi alone, under mpirun: %v\n%s", err, out)
	}

	openmpi.goBuild(t, "build", "-tags", openmpi.tags, "-o", filepath.Join(dir, "saxpy-openmpi"), "../../examples/saxpy")
	out, err = mpich.run(t, nil, nil, filepath.Join(dir, "saxpy-openmpi"), "-n", "1000")
	if err == nil || !strings.Contains(out, "the launcher started 3 ranks but MPI sees this process alone") || !strings.Contains(out, "Open MPI") {
		t.Fatalf("an Open MPI program under MPICH's launcher: want an error naming the mismatch, got %v\n%s", err, out)
	}
}

// run runs a job of three ranks, for two minutes at most.
func (f mpiFlavor) run(t *testing.T, extra, env []string, prog string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	argv := append(append(append([]string{}, f.args...), extra...), "-np", "3", prog)
	cmd := exec.CommandContext(ctx, f.launcher, append(argv, args...)...)
	cmd.Env = append(append(os.Environ(), f.env...), env...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s %s did not end within 2 minutes:\n%s", f.launcher, strings.Join(append(argv, args...), " "), out)
	}
	return string(out), err
}

func goRoot(t *testing.T) string {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatalf("go env GOROOT: %v", err)
	}
	return strings.TrimSpace(string(out))
}
