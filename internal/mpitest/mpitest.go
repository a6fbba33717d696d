// Package mpitest builds test binaries and programs against the MPIs that
// Debian installs (Open MPI and MPICH) and runs them as jobs under each
// one's launcher, for the tests that start MPI jobs (the remote package's
// TestMPIJobs, the root package's TestMatrixMPI).
package mpitest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A Flavor is an MPI implementation as Debian installs it.
type Flavor struct {
	Name     string
	CC       string // the compiler wrapper that must exist; CC for the build when Wrap is set
	Tags     string // the build tags
	Wrap     bool   // built with CC=cc (-tags mpi,mpicc), not with pkg-config's flags
	Launcher string
	Args     []string // before -np
	Env      []string
	Pkgs     string // what apt-get installs it
}

// OpenMPIEnv lets Open MPI's launcher run as root and place three ranks on
// two cores; MPICH's ignores it.
var OpenMPIEnv = []string{"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1", "OMPI_MCA_pml=ob1", "OMPI_MCA_rmaps_base_oversubscribe=1"}

// Flavors builds Open MPI's jobs with pkg-config's flags and MPICH's with
// its compiler wrapper, so that both ways of building are run.
var Flavors = []Flavor{
	{Name: "openmpi", CC: "mpicc.openmpi", Tags: "mpi,openmpi", Launcher: "mpirun.openmpi",
		Env: OpenMPIEnv, Pkgs: "libopenmpi-dev openmpi-bin pkgconf"},
	{Name: "mpich", CC: "mpicc.mpich", Tags: "mpi,mpicc", Wrap: true, Launcher: "mpiexec.mpich", Pkgs: "libmpich-dev mpich"},
}

// BuildEnv is the environment of a go build for f.
func (f Flavor) BuildEnv() []string {
	env := append(os.Environ(), "CGO_ENABLED=1")
	if f.Wrap {
		env = append(env, "CC="+f.CC)
	}
	return env
}

// Need skips t, or fails it under GOFFLOAD_REQUIRE_MPI, when a program of
// f's is missing.
func (f Flavor) Need(t testing.TB, progs ...string) {
	t.Helper()
	for _, p := range progs {
		if _, err := exec.LookPath(p); err != nil {
			if os.Getenv("GOFFLOAD_REQUIRE_MPI") != "" {
				t.Fatalf("%s is missing (apt-get install -y %s) and GOFFLOAD_REQUIRE_MPI is set", p, f.Pkgs)
			}
			t.Skipf("%s is not installed (apt-get install -y %s)", p, f.Pkgs)
		}
	}
}

// GoBuild runs the go command with f's build environment.
func (f Flavor) GoBuild(t testing.TB, args ...string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(GoRoot(t), "bin", "go"), args...)
	cmd.Env = f.BuildEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// Run runs prog as a job of np ranks under f's launcher, with extra
// launcher arguments before -np and env added to every rank's
// environment. It fails t if the job does not end within limit.
func (f Flavor) Run(t testing.TB, np int, limit time.Duration, extra, env []string, prog string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	argv := append(append(append([]string{}, f.Args...), extra...), "-np", strconv.Itoa(np), prog)
	cmd := exec.CommandContext(ctx, f.Launcher, append(argv, args...)...)
	cmd.Env = append(append(os.Environ(), f.Env...), env...)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("%s %s did not end within %v:\n%s", f.Launcher, strings.Join(append(argv, args...), " "), limit, out)
	}
	return string(out), err
}

// GoRoot is the GOROOT of the go command on PATH (go test puts its own
// first).
func GoRoot(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatalf("go env GOROOT: %v", err)
	}
	return strings.TrimSpace(string(out))
}
