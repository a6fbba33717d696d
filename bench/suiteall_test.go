package main

import (
	"bytes"
	"os"
	"strings"
	"sync"
	"testing"
)

// The suites' tests check one run of -suite all, every suite at tiny
// sizes, each its own section of the output. A run of each suite again
// for its own test cost the package a minute and a half under -race.

// allSweepSizes and allPlotDPI are the shared run's sweep and plots.
var allSweepSizes = []int64{8, 4 << 10, 1 << 20}

const allPlotDPI = 48

// allRun is the shared run of -suite all.
var allRun struct {
	once     sync.Once
	dir      string // its plots
	out      string
	errOut   string
	err      error
	sections map[string]string // suite -> its lines
	// localLink is GOFFLOAD_LOCAL_LINK before the run, and whether it was set.
	localLink    string
	hadLocalLink bool
}

// allArgs are the shared run's flags: suite apps at tiny sizes, suite
// taskbench's stencil_1d and spread_r3 on every CPU kind for 4 iterations.
var allArgs = []string{"-suite", "all", "-format", "tsv", "-time", "5ms", "-rounds", "1",
	"-apps-n", "24", "-apps-iters", "2", "-apps-tiles", "2", "-apps-b", "4",
	"-apps-cg-n", "16", "-apps-cg-iters", "4", "-apps-fault-timeout", "1s",
	"-taskbench-patterns", "stencil_1d,spread_r3", "-taskbench-kinds", "host2,local2,tcp2",
	"-taskbench-max-iters", "4"}

// suiteAll runs -suite all once for the package's tests. It returns the
// whole output and fails t if the run failed.
func suiteAll(t *testing.T) string {
	t.Helper()
	allRun.once.Do(runAll)
	if allRun.err != nil {
		t.Fatalf("-suite all: %v\nstderr:\n%s\nstdout:\n%s", allRun.err, allRun.errOut, allRun.out)
	}
	return allRun.out
}

// suiteSection is suite's part of the shared run: its lines from its
// "# suite NAME: devices" comment to the next suite's. It fails t if the
// run has no such part.
func suiteSection(t *testing.T, suite string) string {
	t.Helper()
	out := suiteAll(t)
	s, ok := allRun.sections[suite]
	if !ok {
		t.Fatalf("-suite all has no section of suite %s:\n%s", suite, out)
	}
	return s
}

func runAll() {
	defer restoreAppsSizes()()
	defer restoreTaskbench()()
	// Suite peer has its own test (where LLVM 22 is installed): skipped here.
	peer := suites["peer"]
	defer func() { suites["peer"] = peer }()
	suites["peer"] = Suite{Devices: peer.Devices, Run: peer.Run, Skip: func() string { return "left to TestPeerSuiteTSV" }}
	defer func(sizes []int64, dpi int) { sweepSizes, plotDPI = sizes, dpi }(sweepSizes, plotDPI)
	sweepSizes, plotDPI = allSweepSizes, allPlotDPI
	allRun.localLink, allRun.hadLocalLink = os.LookupEnv(envLocalLink)
	dir, err := os.MkdirTemp("", "goffload-bench-all-")
	if err != nil {
		allRun.err = err
		return
	}
	allRun.dir = dir + "/plots" // -plot creates it
	var out, errOut bytes.Buffer
	allRun.err = run(append(allArgs, "-plot", allRun.dir), &out, &errOut)
	allRun.out, allRun.errOut = out.String(), errOut.String()
	allRun.sections = splitSuites(allRun.out)
}

// splitSuites cuts a run's output into its suites' sections.
func splitSuites(out string) map[string]string {
	sections := map[string]string{}
	name := ""
	for _, line := range strings.SplitAfter(out, "\n") {
		if rest, ok := strings.CutPrefix(line, "# suite "); ok {
			if n, _, ok := strings.Cut(rest, ": devices "); ok && !strings.Contains(n, " ") {
				name = n
			}
		}
		sections[name] += line
	}
	return sections
}

// removeAllRun removes the shared run's files (TestMain, after the tests).
func removeAllRun() {
	if allRun.dir != "" {
		os.RemoveAll(strings.TrimSuffix(allRun.dir, "/plots"))
	}
}

// TestSplitSuites: a run's output is cut at each suite's devices comment,
// and what comes before the first goes to "".
func TestSplitSuites(t *testing.T) {
	out := "# suite mpi skipped: why\n# suite a: devices \"host\", 1 device(s)\na.x\t1\t-\t-\n# suite a: raw baselines' peer: p\n# suite b-c: devices \"local:1\", 1 device(s)\nb_c.y\t1\t-\t-\n"
	got := splitSuites(out)
	want := map[string]string{
		"":    "# suite mpi skipped: why\n",
		"a":   "# suite a: devices \"host\", 1 device(s)\na.x\t1\t-\t-\n# suite a: raw baselines' peer: p\n",
		"b-c": "# suite b-c: devices \"local:1\", 1 device(s)\nb_c.y\t1\t-\t-\n",
	}
	if len(got) != len(want) {
		t.Errorf("%d sections %q, want %d", len(got), got, len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("section %q = %q, want %q", k, got[k], v)
		}
	}
}
