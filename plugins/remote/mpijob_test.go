package remote_test

import (
	"context"
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
	name, cc, launcher string
	args               []string // before -np
	env                []string
	pkgs               string
}

var mpiFlavors = []mpiFlavor{
	{name: "openmpi", cc: "mpicc.openmpi", launcher: "mpirun.openmpi", args: []string{"--oversubscribe"},
		env:  []string{"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "OMPI_MCA_pml=ob1"},
		pkgs: "libopenmpi-dev openmpi-bin"},
	{name: "mpich", cc: "mpicc.mpich", launcher: "mpiexec.mpich", pkgs: "libmpich-dev mpich"},
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
	gobin := filepath.Join(goRoot(t), "bin", "go")
	for _, f := range mpiFlavors {
		t.Run(f.name, func(t *testing.T) {
			for _, p := range []string{f.cc, f.launcher} {
				if _, err := exec.LookPath(p); err != nil {
					if os.Getenv("GOFFLOAD_REQUIRE_MPI") != "" {
						t.Fatalf("%s is missing (apt-get install -y %s) and GOFFLOAD_REQUIRE_MPI is set", p, f.pkgs)
					}
					t.Skipf("%s is not installed (apt-get install -y %s)", p, f.pkgs)
				}
			}
			dir := t.TempDir()
			build := func(args ...string) {
				t.Helper()
				cmd := exec.Command(gobin, args...)
				cmd.Env = append(os.Environ(), "CC="+f.cc, "CGO_ENABLED=1")
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
				}
			}
			test := filepath.Join(dir, "remote.test")
			build("test", "-c", "-race", "-tags", "mpi", "-o", test, ".")
			build("build", "-tags", "mpi", "-o", filepath.Join(dir, "saxpy"), "../../examples/saxpy")
			build("build", "-tags", "mpi", "-o", filepath.Join(dir, "pipeline"), "../../examples/pipeline")

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
