package main

import (
	"bytes"
	"flag"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Task Bench's own implementations as a peer kind of suite taskbench
// (-taskbench-peer): a command that runs one of them, for example its MPI
// implementation built from github.com/StanfordLegion/task-bench
// (core/ and mpi/: make, seconds) and launched on two ranks:
//
//	-taskbench-peer "mpirun.openmpi --oversubscribe -np 2 /path/to/task-bench/mpi/nonblock"
//
// For each run the suite appends Task Bench's flags (-steps, -width, -type,
// -radix and -period where the pattern has them, -kernel compute_bound,
// -iter) and reads the run's own "Elapsed Time" and "Total Tasks" lines,
// so that the launcher's start-up is not counted. Its width is
// -taskbench-peer-width (the ranks: 2). Its kernel is Task Bench's C++ one
// (AVX2 FMAs where the CPU has them, several times the FLOP/s of the Go
// kernel), so its efficiency is against its own best FLOP/s over its
// sweeps, not the run's peak: the METGs, times, compare; the FLOP/s do not.

var (
	tbPeerCmd   string
	tbPeerWidth = 2
)

func init() {
	suiteFlags = append(suiteFlags, func(fs *flag.FlagSet) {
		fs.StringVar(&tbPeerCmd, "taskbench-peer", tbPeerCmd, "suite taskbench: also measure Task Bench's own implementation (kind taskbench_peer): the command that runs it, without Task Bench's flags, e.g. \"mpirun -np 2 task-bench/mpi/nonblock\"")
		fs.IntVar(&tbPeerWidth, "taskbench-peer-width", tbPeerWidth, "suite taskbench: the width of -taskbench-peer's graphs (its ranks or workers)")
	})
}

var (
	tbElapsedRE = regexp.MustCompile(`(?m)^Elapsed Time ([0-9.eE+-]+) seconds$`)
	tbTasksRE   = regexp.MustCompile(`(?m)^Total Tasks ([0-9]+)$`)
)

// tbPeerArgs are Task Bench's flags for graph g.
func tbPeerArgs(g tbGraph) []string {
	args := []string{"-steps", strconv.Itoa(g.Steps), "-width", strconv.Itoa(g.Width), "-type", tbPatternNames[g.Pattern.Kind]}
	switch g.Pattern.Kind {
	case tbNearest:
		args = append(args, "-radix", strconv.Itoa(g.Pattern.Radix))
	case tbSpread:
		args = append(args, "-radix", strconv.Itoa(g.Pattern.Radix), "-period", strconv.Itoa(g.Pattern.Period))
	}
	return append(args, "-kernel", tbKernelNames[g.Kernel], "-iter", strconv.FormatInt(g.Iters, 10))
}

// runTBPeer runs g with the command cmd (its words) and returns the time
// the run reports.
func runTBPeer(cmd []string, g tbGraph) (time.Duration, error) {
	if err := g.check(); err != nil {
		return 0, err
	}
	args := append(append([]string{}, cmd[1:]...), tbPeerArgs(g)...)
	c := exec.Command(cmd[0], args...)
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, &out
	if err := c.Run(); err != nil {
		return 0, fmt.Errorf("-taskbench-peer: %s %s: %w\n%s", cmd[0], strings.Join(args, " "), err, tail(out.String(), 2000))
	}
	m := tbElapsedRE.FindStringSubmatch(out.String())
	n := tbTasksRE.FindStringSubmatch(out.String())
	if m == nil || n == nil {
		return 0, fmt.Errorf("-taskbench-peer: %s %s: no \"Elapsed Time\" or \"Total Tasks\" line in its output:\n%s", cmd[0], strings.Join(args, " "), tail(out.String(), 2000))
	}
	if tasks, _ := strconv.Atoi(n[1]); tasks != g.Steps*g.Width {
		return 0, fmt.Errorf("-taskbench-peer: it ran %d tasks, want %d × %d", tasks, g.Steps, g.Width)
	}
	sec, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("-taskbench-peer: elapsed time %q: %w", m[1], err)
	}
	return time.Duration(sec * 1e9), nil
}

// tail is the last n bytes of s.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
