package offload_test

import (
	"encoding/json"
	"fmt"
	"go/ast"
	gobuild "go/build"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goffload/offload/internal/mpi"
	"github.com/goffload/offload/internal/mpitest"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/remote"
)

// The matrix's MPI kinds (issue 45): mpi, the device ranks of an MPI job
// serving their CPUs, and mpi-opencl, the same ranks serving the machine's
// OpenCL device (PoCL in CI) through mpi:N[opencl]. A device rank serves
// what the mpi item of its own GOFFLOAD_DEVICES names, whatever the host
// opens, so each kind has a job of its own: GOFFLOAD_DEVICES=mpi, or
// mpi[opencl], in every rank's environment.
//
// TestMatrixMPI builds this test binary with -tags mpi once per MPI (Open
// MPI and MPICH) and runs the matrix tests, the tests that call
// forEachKind (found in this package's sources), in a job of three ranks
// per kind under each one's launcher. Inside a job rank 0 runs them on
// the job's kind alone (n devices are mpi:n of the two device ranks), and
// ranks 1 and 2 serve. MPI stays up across the tests' Stops
// (remote.HoldMPIForTests) until TestMain ends it. Rank 0 writes each
// subtest's result to a file, and TestMatrixMPI checks it: every matrix
// test ran on the kind, none failed, and a kind was skipped only by the
// in-process gate (needInProcess), as local's and local-opencl's are.

// mpiKinds are the kinds the matrix runs on inside an MPI job.
var mpiKinds = []testKind{
	{name: "mpi", label: "mpi", spec: func(n int) string { return fmt.Sprintf("mpi:%d", n) }},
	{name: "mpi-opencl", label: "mpi", spec: func(n int) string {
		return fmt.Sprintf("mpi:%d[opencl]", n) // PoCL's device, served by n device ranks
	}, serves: "opencl"},
}

// mpiKindEnv is every rank's environment in the job of an MPI kind.
var mpiKindEnv = map[string][]string{
	"mpi":        {"GOFFLOAD_DEVICES=mpi"},
	"mpi-opencl": {"GOFFLOAD_DEVICES=mpi[opencl]", envEmulateOpenCL + "=1"},
}

// envMatrixMPI, set in an MPI job of this test binary, names the MPI kind
// the matrix runs on and the file rank 0 writes its results to: KIND:FILE.
const envMatrixMPI = "GOFFLOAD_TEST_MATRIX_MPI"

// mpiJob is what rank 0 of TestMatrixMPI's job records.
var mpiJob struct {
	out    string       // the results file; empty outside the job
	kind   testKind     // the kind the matrix runs on
	finish func() error // ends MPI (remote.HoldMPIForTests)

	mu      sync.Mutex
	gated   map[string]bool // subtests skipped by needInProcess
	results []matrixResult
}

// A matrixResult is one subtest's outcome on an MPI kind.
type matrixResult struct {
	Name    string // TestX/kind
	Failed  bool
	Skipped bool
	Gated   bool // skipped by the in-process gate
}

func init() {
	name, out, ok := strings.Cut(os.Getenv(envMatrixMPI), ":")
	if !ok || !mpi.Launched() {
		return
	}
	i := slices.IndexFunc(mpiKinds, func(k testKind) bool { return k.name == name })
	if i < 0 {
		panic(fmt.Sprintf("%s=%s: no MPI kind %q", envMatrixMPI, os.Getenv(envMatrixMPI), name))
	}
	mpiJob.out, mpiJob.kind = out, mpiKinds[i]
	mpiJob.gated = map[string]bool{}
	mpiJob.finish = remote.HoldMPIForTests()
}

// matrixKinds are the kinds forEachKind runs a test on: the MPI kind of
// TestMatrixMPI's job in the job, the others elsewhere.
func matrixKinds() []testKind {
	if mpiJob.out != "" {
		return []testKind{mpiJob.kind}
	}
	return kinds
}

// recordMPI records t's outcome when it ends, in TestMatrixMPI's job.
func recordMPI(t *testing.T) {
	if mpiJob.out == "" {
		return
	}
	t.Cleanup(func() {
		mpiJob.mu.Lock()
		defer mpiJob.mu.Unlock()
		mpiJob.results = append(mpiJob.results, matrixResult{Name: t.Name(), Failed: t.Failed(), Skipped: t.Skipped(), Gated: mpiJob.gated[t.Name()]})
	})
}

// noteGated records that needInProcess skips t, in TestMatrixMPI's job.
func noteGated(t *testing.T) {
	if mpiJob.out == "" {
		return
	}
	mpiJob.mu.Lock()
	mpiJob.gated[t.Name()] = true
	mpiJob.mu.Unlock()
}

// endMPIJob, called by TestMain after the tests, writes the results of
// TestMatrixMPI's job and ends MPI; elsewhere it does nothing.
func endMPIJob() error {
	if mpiJob.out == "" {
		return nil
	}
	mpiJob.mu.Lock()
	b, err := json.Marshal(mpiJob.results)
	mpiJob.mu.Unlock()
	if err == nil {
		err = os.WriteFile(mpiJob.out, b, 0o644)
	}
	if ferr := mpiJob.finish(); err == nil {
		err = ferr
	}
	return err
}

// TestMatrixMPI runs the semantics matrix on MPI devices: the mpi and
// mpi-opencl kinds, in a job under Open MPI's launcher and one under
// MPICH's. An MPI that is not installed is skipped, unless
// GOFFLOAD_REQUIRE_MPI is set.
func TestMatrixMPI(t *testing.T) {
	if mpi.Launched() {
		t.Skip("inside an MPI job: this test starts the jobs")
	}
	if testing.Short() {
		t.Skip("-short: builds this test binary with -tags mpi and runs the matrix in MPI jobs")
	}
	want := []string{"mpi", "mpi-opencl"}
	if !haveOpenCL() {
		if os.Getenv("GOFFLOAD_REQUIRE_OPENCL") != "" {
			t.Fatal("no OpenCL device (opencl:0), and GOFFLOAD_REQUIRE_OPENCL is set")
		}
		t.Log("no OpenCL device (opencl:0): the mpi-opencl kind skips")
		want = want[:1]
	}
	dir := t.TempDir()
	for _, f := range mpitest.Flavors {
		t.Run(f.Name, func(t *testing.T) {
			f.Need(t, f.CC, f.Launcher)
			tests := matrixTests(t, f.Tags)
			exe := filepath.Join(dir, f.Name+".test")
			began := time.Now()
			f.GoBuild(t, "test", "-c", "-tags", f.Tags, "-o", exe, ".")
			t.Logf("built in %v", time.Since(began).Round(time.Millisecond))
			for _, kind := range want {
				t.Run(kind, func(t *testing.T) {
					began := time.Now()
					results := filepath.Join(dir, f.Name+"-"+kind+".json")
					env := append([]string{envMatrixMPI + "=" + kind + ":" + results}, mpiKindEnv[kind]...)
					out, err := f.Run(t, 3, 4*time.Minute, nil, env, exe,
						"-test.run", "^("+strings.Join(tests, "|")+")$", "-test.v", "-test.timeout=3m")
					if err != nil || strings.Contains(out, "--- FAIL") {
						t.Fatalf("%s: %v\n%s", f.Launcher, err, out)
					}
					if msg := checkMatrixMPI(results, tests, []string{kind}); msg != "" {
						t.Fatalf("%s\n%s", msg, out)
					}
					t.Logf("%d tests: the job ran in %v", len(tests), time.Since(began).Round(time.Millisecond))
				})
			}
		})
	}
}

// checkMatrixMPI checks the results file of a job: each test of tests ran
// on each kind of want, passed, or was skipped only by the in-process
// gate. It says what is wrong, or nothing.
func checkMatrixMPI(file string, tests, want []string) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return fmt.Sprintf("the job's results: %v", err)
	}
	var rs []matrixResult
	if err := json.Unmarshal(b, &rs); err != nil {
		return fmt.Sprintf("the job's results: %v", err)
	}
	got := map[string]matrixResult{}
	for _, r := range rs {
		got[r.Name] = r
	}
	var bad []string
	for _, test := range tests {
		for _, k := range want {
			name := test + "/" + k
			r, ok := got[name]
			switch {
			case !ok:
				bad = append(bad, name+" did not run")
			case r.Failed:
				bad = append(bad, name+" failed")
			case r.Skipped && !r.Gated:
				bad = append(bad, name+" was skipped, not by the in-process gate")
			}
		}
	}
	if len(bad) > 0 {
		return fmt.Sprintf("the matrix on MPI devices (%d results): %s", len(rs), strings.Join(bad, "; "))
	}
	return ""
}

// matrixTests are the tests of this package, in the files that the build
// tags select, that run on every kind of the matrix (call forEachKind).
func matrixTests(t *testing.T, tags string) []string {
	t.Helper()
	ctx := gobuild.Default
	ctx.BuildTags = strings.Split(tags, ",")
	ctx.CgoEnabled = true
	names, err := filepath.Glob("*_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var tests []string
	for _, name := range names {
		if ok, err := ctx.MatchFile(".", name); err != nil || !ok {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if c, ok := n.(*ast.CallExpr); ok {
					if id, ok := c.Fun.(*ast.Ident); ok && id.Name == "forEachKind" {
						tests = append(tests, fn.Name.Name)
						return false
					}
				}
				return true
			})
		}
	}
	slices.Sort(tests)
	tests = slices.Compact(tests)
	if len(tests) < 20 {
		t.Fatalf("found %d matrix tests (%v): want the tests that call forEachKind", len(tests), tests)
	}
	return tests
}

// haveOpenCL reports whether the machine has an OpenCL device.
func haveOpenCL() bool {
	k, ok := plugin.LookupKind("opencl")
	if !ok {
		return false
	}
	ds, err := k.Open("0")
	for _, d := range ds {
		d.Close()
	}
	return err == nil && len(ds) > 0
}

// TestMatrixMPICheck: TestMatrixMPI's check of a job's results fails a
// test that did not run on a kind, failed, or was skipped other than by
// the in-process gate, and passes the rest.
func TestMatrixMPICheck(t *testing.T) {
	file := filepath.Join(t.TempDir(), "results.json")
	rs := []matrixResult{
		{Name: "TestA/mpi"}, {Name: "TestA/mpi-opencl"},
		{Name: "TestB/mpi", Skipped: true, Gated: true}, {Name: "TestB/mpi-opencl", Skipped: true, Gated: true},
		{Name: "TestC/mpi", Failed: true}, {Name: "TestC/mpi-opencl", Skipped: true},
		{Name: "TestD/mpi"},
	}
	b, err := json.Marshal(rs)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	kinds := []string{"mpi", "mpi-opencl"}
	if msg := checkMatrixMPI(file, []string{"TestA", "TestB"}, kinds); msg != "" {
		t.Errorf("passed and gated tests: %s", msg)
	}
	msg := checkMatrixMPI(file, []string{"TestA", "TestC", "TestD"}, kinds)
	for _, want := range []string{"TestC/mpi failed", "TestC/mpi-opencl was skipped, not by the in-process gate", "TestD/mpi-opencl did not run"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the check says %q; want it to say %q", msg, want)
		}
	}
	if msg := checkMatrixMPI(filepath.Join(t.TempDir(), "none.json"), []string{"TestA"}, kinds); !strings.Contains(msg, "the job's results") {
		t.Errorf("no results file: the check says %q", msg)
	}
}
