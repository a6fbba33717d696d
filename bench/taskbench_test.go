package main

import (
	"bytes"
	"context"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goffload/offload"
)

// restoreTaskbench returns what puts the taskbench flags' settings back as
// they are now (a run's flags change them): defer restoreTaskbench()().
func restoreTaskbench() func() {
	pats, kinds, iters, inMPI, peak := tbPatternList, tbKindList, tbMaxIters, tbInMPI, tbPeak
	return func() { tbPatternList, tbKindList, tbMaxIters, tbInMPI, tbPeak = pats, kinds, iters, inMPI, peak }
}

func mustPattern(t testing.TB, s string) tbPattern {
	t.Helper()
	p, err := parseTBPattern(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTBPatternDeps checks the patterns' dependencies against cases worked
// by hand from Task Bench's core.cc.
func TestTBPatternDeps(t *testing.T) {
	spread93 := tbPattern{Kind: tbSpread, Radix: 3, Period: 3}
	for _, c := range []struct {
		pat         tbPattern
		w, dset, p  int
		deps, rdeps []int
	}{
		{tbPattern{Kind: tbTrivial}, 4, 0, 2, nil, nil},
		{tbPattern{Kind: tbNoComm}, 4, 0, 2, []int{2}, []int{2}},
		{tbPattern{Kind: tbStencil1D}, 4, 0, 0, []int{0, 1}, []int{0, 1}},
		{tbPattern{Kind: tbStencil1D}, 4, 0, 1, []int{0, 1, 2}, []int{0, 1, 2}},
		{tbPattern{Kind: tbStencil1D}, 4, 0, 3, []int{2, 3}, []int{2, 3}},
		{tbPattern{Kind: tbStencil1D}, 2, 0, 1, []int{0, 1}, []int{0, 1}},
		{tbPattern{Kind: tbStencil1D}, 1, 0, 0, []int{0}, []int{0}},
		// nearest: deps [p - radix/2, p + (radix-1)/2], rdeps mirrored.
		{tbPattern{Kind: tbNearest, Radix: 3}, 5, 0, 2, []int{1, 2, 3}, []int{1, 2, 3}},
		{tbPattern{Kind: tbNearest, Radix: 5}, 5, 0, 2, []int{0, 1, 2, 3, 4}, []int{0, 1, 2, 3, 4}},
		{tbPattern{Kind: tbNearest, Radix: 5}, 5, 0, 0, []int{0, 1, 2}, []int{0, 1, 2}},
		{tbPattern{Kind: tbNearest, Radix: 5}, 7, 0, 6, []int{4, 5, 6}, []int{4, 5, 6}},
		{tbPattern{Kind: tbNearest, Radix: 4}, 6, 0, 2, []int{0, 1, 2, 3}, []int{1, 2, 3, 4}},
		{tbPattern{Kind: tbNearest, Radix: 1}, 6, 0, 2, []int{2}, []int{2}},
		{tbPattern{Kind: tbNearest, Radix: 0}, 6, 0, 2, nil, nil},
		// spread: (p + i·w/radix + (i>0 ? dset : 0)) mod w.
		{spread93, 9, 0, 0, []int{0, 3, 6}, []int{0, 6, 3}},
		{spread93, 9, 1, 0, []int{0, 4, 7}, []int{0, 5, 2}},
		{spread93, 9, 2, 0, []int{0, 5, 8}, []int{0, 4, 1}},
		{spread93, 9, 2, 8, []int{8, 4, 7}, []int{8, 3, 0}},
		{tbPattern{Kind: tbSpread, Radix: 2, Period: 1}, 2, 0, 1, []int{1, 0}, []int{1, 0}},
		{tbPattern{Kind: tbSpread, Radix: 3, Period: 2}, 5, 1, 4, []int{4, (4 + 1 + 1) % 5, (4 + 3 + 1) % 5}, []int{4, 2, 0}},
		{tbPattern{Kind: tbAllToAll}, 3, 0, 1, []int{0, 1, 2}, []int{0, 1, 2}},
	} {
		name := c.pat.Name()
		if got := c.pat.deps(nil, c.w, c.dset, c.p); !slices.Equal(got, c.deps) {
			t.Errorf("%s width %d dset %d: deps of %d = %v, want %v", name, c.w, c.dset, c.p, got, c.deps)
		}
		if got := c.pat.rdeps(nil, c.w, c.dset, c.p); !slices.Equal(got, c.rdeps) {
			t.Errorf("%s width %d dset %d: reverse deps of %d = %v, want %v", name, c.w, c.dset, c.p, got, c.rdeps)
		}
	}
}

// TestTBPatternMirror: as Task Bench's App::check demands, a point's
// dependencies repeat no point, and the reverse dependencies are their
// mirror, for every pattern, width and dependence set.
func TestTBPatternMirror(t *testing.T) {
	for _, s := range []string{"trivial", "no_comm", "stencil_1d", "nearest_r1", "nearest_r2", "nearest_r3", "nearest_r4", "nearest_r5", "spread_r1", "spread_r2", "spread_r3", "spread_r4", "all_to_all"} {
		for w := 1; w <= 12; w++ {
			pat := tbForWidth(mustPattern(t, s), w)
			if err := pat.check(w); err != nil {
				t.Errorf("%s at width %d: %v", s, w, err)
				continue
			}
			for d := range pat.dsets() {
				reads := map[[2]int]bool{} // (q, p): p reads q
				for p := range w {
					deps := pat.deps(nil, w, d, p)
					for _, q := range deps {
						if q < 0 || q >= w {
							t.Fatalf("%s width %d dset %d: point %d depends on %d, outside the width", s, w, d, p, q)
						}
						if reads[[2]int{q, p}] {
							t.Errorf("%s width %d dset %d: point %d depends on %d twice: %v", s, w, d, p, q, deps)
						}
						reads[[2]int{q, p}] = true
					}
				}
				n := 0
				for q := range w {
					for _, p := range pat.rdeps(nil, w, d, q) {
						n++
						if !reads[[2]int{q, p}] {
							t.Errorf("%s width %d dset %d: %d is a reverse dependency of %d, but does not depend on it", s, w, d, p, q)
						}
					}
				}
				if n != len(reads) {
					t.Errorf("%s width %d dset %d: %d reverse dependencies, %d dependencies", s, w, d, n, len(reads))
				}
			}
		}
	}
}

func TestTBPatternParams(t *testing.T) {
	// Task Bench's spread: period 3 and radix 3 by default; at width 2
	// only radix 2 and period 1 are valid (ceil(2/2) = 1).
	if got := tbForWidth(mustPattern(t, "spread_r3"), 2); got != (tbPattern{Kind: tbSpread, Radix: 2, Period: 1}) {
		t.Errorf("spread_r3 at width 2 = %+v", got)
	}
	if got := tbForWidth(mustPattern(t, "spread_r3"), 9); got != (tbPattern{Kind: tbSpread, Radix: 3, Period: 3}) {
		t.Errorf("spread_r3 at width 9 = %+v", got)
	}
	if got := tbForWidth(mustPattern(t, "nearest_r5"), 2); got != (tbPattern{Kind: tbNearest, Radix: 5}) {
		t.Errorf("nearest_r5 at width 2 = %+v", got)
	}
	sp := tbPattern{Kind: tbSpread, Radix: 3, Period: 3}
	for d, want := range []int{0, 1, 2, 0, 1} {
		if got := sp.dset(d); got != want {
			t.Errorf("spread period 3: dset(%d) = %d, want %d", d, got, want)
		}
	}
	if in := sp.inputs(nil, 9, 0, 4); len(in) != 0 {
		t.Errorf("inputs at timestep 0: %v, want none", in)
	}
	if in := sp.inputs(nil, 9, 4, 0); !slices.Equal(in, []int{0, 4, 7}) { // dset 1
		t.Errorf("inputs of (4, 0): %v", in)
	}
	for _, bad := range []struct {
		p tbPattern
		w int
	}{{sp, 6}, {tbPattern{Kind: tbSpread, Radix: 3, Period: 1}, 2}, {tbPattern{Kind: tbStencil1D}, 0}} {
		if err := bad.p.check(bad.w); err == nil {
			t.Errorf("%+v at width %d passes the check, want an error", bad.p, bad.w)
		}
	}
	for _, s := range []string{"stencil", "nearest", "nearest_r", "nearest_r0x", "spread_r0", "all_to_all_r2", ""} {
		if p, err := parseTBPattern(s); err == nil {
			t.Errorf("parseTBPattern(%q) = %+v, want an error", s, p)
		}
	}
	for _, s := range []string{"trivial", "no_comm", "stencil_1d", "nearest_r3", "nearest_r5", "spread_r3", "all_to_all"} {
		if got := mustPattern(t, s).Name(); got != s {
			t.Errorf("parseTBPattern(%q).Name() = %q", s, got)
		}
	}
}

// TestTBMETG checks the interpolation on synthetic sweeps.
func TestTBMETG(t *testing.T) {
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Abs(b) }
	// 2 µs at 30%, 4 µs at 60%: 50% lies 2/3 of the way in log scale.
	gran := []float64{16e3, 1e3, 4e3, 2e3, 8e3} // any order
	eff := []float64{1.0, 0.1, 0.6, 0.3, 0.9}
	m, below, ok := tbMETG(gran, eff, 0.5)
	if want := 2e3 * math.Pow(2, 2.0/3); !ok || below || !near(m, want) {
		t.Errorf("METG = %v (below %v, ok %v), want %v", m, below, ok, want)
	}
	// A point exactly at 50% is the METG.
	if m, _, ok := tbMETG([]float64{1e3, 2e3, 4e3}, []float64{0.2, 0.5, 0.9}, 0.5); !ok || !near(m, 2e3) {
		t.Errorf("METG with a point at 50%%: %v, want 2 µs", m)
	}
	// A dip above the threshold at a larger grain does not matter: the
	// smallest efficient granularity counts, as in Task Bench.
	if m, _, ok := tbMETG([]float64{1e3, 2e3, 4e3, 8e3}, []float64{0.25, 0.75, 0.4, 1}, 0.5); !ok || !near(m, 1e3*math.Pow(2, 0.5)) {
		t.Errorf("METG with a dip: %v, want %v", m, 1e3*math.Sqrt2)
	}
	// Every point efficient: at most the smallest.
	if m, below, ok := tbMETG([]float64{3e3, 6e3}, []float64{0.7, 0.9}, 0.5); !ok || !below || m != 3e3 {
		t.Errorf("METG of an all-efficient sweep = %v, %v, %v; want 3 µs, below", m, below, ok)
	}
	// None: not ok.
	if _, _, ok := tbMETG([]float64{3e3, 6e3}, []float64{0.2, 0.4}, 0.5); ok {
		t.Error("METG of a sweep below 50% everywhere: ok")
	}
	// Efficiency from points: the peak of a pattern is the goroutines'
	// plateau on it, the median rate of their largest tasks; a kind with
	// its own peak has its own plateau.
	rate := func(iters int64, wall float64) tbPoint { return tbPoint{Iters: iters, Tasks: 10, Wall: wall, Cores: 2} }
	pts := []tbPoint{rate(1, 1e6)}
	for i, w := range []float64{8e6, 1e6, 1e6, 2e6, 2e6, 2e6} { // iterations 1000 to 6000, rates unequal
		pts = append(pts, rate(1000*int64(i+1), w*float64(i+1)/2))
	}
	// The plateau: the 5 largest, iterations 2000 to 6000 (pts[2:]).
	dev := []tbPoint{rate(1000, 4e6)}
	peer := []tbPoint{rate(1000, 1e6), rate(1, 1e6)}
	sweeps := []tbSweep{
		{Req: "a", Kind: "goroutines", Points: pts},
		{Req: "a", Kind: "local2", Points: dev},
		{Req: "b", Kind: "goroutines", Points: dev},
		{Req: "a", Kind: "peer", Points: peer, OwnPeak: true},
	}
	effs, peaks := tbEfficiency(sweeps)
	base := tbFlopsPerTask(1000) * 10 / 4e-3 // dev's rate
	want := []float64{
		median([]float64{pts[2].FlopRate(), pts[3].FlopRate(), pts[4].FlopRate(), pts[5].FlopRate(), pts[6].FlopRate()}),
		0, base, median([]float64{peer[0].FlopRate(), peer[1].FlopRate()}),
	}
	want[1] = want[0]
	for i := range want {
		if !near(peaks[i], want[i]) {
			t.Errorf("peak of sweep %d: %v, want %v", i, peaks[i], want[i])
		}
	}
	if !near(effs[1][0], base/want[0]) || effs[2][0] != 1 || !near(effs[3][0], peer[0].FlopRate()/want[3]) {
		t.Errorf("efficiencies %v", effs)
	}
	defer restoreTaskbench()()
	tbPeak = 2 * base / 1e9 // -taskbench-peak
	if effs, p := tbEfficiency(sweeps); !near(p[0], 2*base) || !near(p[1], 2*base) || !near(effs[1][0], 0.5) || !near(p[3], want[3]) {
		t.Errorf("with -taskbench-peak: efficiency %v, peaks %v", effs, p)
	}
	if g := pts[0].Granularity(); g != 2e5 {
		t.Errorf("granularity %v, want 1 ms × 2 cores ÷ 10 tasks = 200 µs", g)
	}
}

// TestTBExecute: a task checks its inputs and fills its output; the
// kernels do their work.
func TestTBExecute(t *testing.T) {
	g := tbGraph{Pattern: tbPattern{Kind: tbStencil1D}, Width: 3, Kernel: tbComputeBound, Iters: 10}
	out := make([]int64, 2)
	s := g.scratch()
	ok := [][]int64{{4, 0}, {4, 1}, {4, 2}}
	if err := tbExecute(g.args(5, 1), out, s, ok); err != nil || out[0] != 5 || out[1] != 1 {
		t.Errorf("tbExecute: %v, output %v", err, out)
	}
	for _, bad := range [][][]int64{
		{{4, 0}, {4, 1}},         // one missing
		{{4, 0}, {3, 1}, {4, 2}}, // an old output
		{{4, 0}, {4, 2}, {4, 1}}, // out of order
		{{4, 0}, {4, 1}, {}},     // empty
	} {
		if err := tbExecute(g.args(5, 1), out, s, bad); err == nil {
			t.Errorf("tbExecute with inputs %v: no error", bad)
		}
	}
	s[0] = 0
	if err := tbExecute(g.args(5, 1), out, s, ok); err == nil || !strings.Contains(err.Error(), "magic") {
		t.Errorf("tbExecute with a scratch buffer lacking the magic word: %v", err)
	}
	if r := tbCompute(0); r <= 0 || math.IsNaN(r) {
		t.Errorf("tbCompute(0) = %v", r)
	}
	if r := tbCompute(1000); !math.IsInf(r, 1) {
		t.Errorf("tbCompute(1000) = %v, want +Inf", r)
	}
	m := tbGraph{Pattern: tbPattern{Kind: tbNoComm}, Width: 1, Kernel: tbMemoryBound, Iters: 3, Scratch: 16, Samples: 4}
	s = m.scratch()
	for i := range s {
		if i%4 != 0 {
			s[i] = int64(i)
		}
	}
	if err := tbExecute(m.args(0, 0), out, s, nil); err != nil {
		t.Fatal(err)
	}
	// Timestep 0, 3 iterations: samples 0, 1, 2 copied their first half
	// over their second; sample 3 untouched.
	want := []int64{tbMagic, 1, tbMagic, 1, tbMagic, 5, tbMagic, 5, tbMagic, 9, tbMagic, 9, tbMagic, 13, 14, 15}
	if !slices.Equal(s, want) {
		t.Errorf("memory_bound scratch %v, want %v", s, want)
	}
}

// tbTestPatterns are run end to end: each pattern the suite runs, and the
// irregular ones at widths where they differ.
var tbTestPatterns = []string{"trivial", "no_comm", "stencil_1d", "nearest_r3", "nearest_r5", "spread_r3", "all_to_all"}

func TestTBGoroutines(t *testing.T) {
	for _, s := range tbTestPatterns {
		for _, w := range []int{1, 2, 5} {
			for _, k := range []tbKernelKind{tbEmpty, tbComputeBound, tbMemoryBound} {
				g := tbGraph{Pattern: tbForWidth(mustPattern(t, s), w), Width: w, Steps: 7, Kernel: k, Iters: 3, Scratch: 8, Samples: 2}
				if _, err := runTBGoroutines(g); err != nil {
					t.Errorf("%s width %d, %s: %v", s, w, tbKernelNames[k], err)
				}
			}
		}
	}
}

// TestTBDevices runs every pattern end to end, with the inputs checked by
// every task, on host:2 and local:2: width 2 (a point a device) and width
// 4 (two points a device, so that some inputs are on the task's device
// and others are copied).
func TestTBDevices(t *testing.T) {
	ctx := context.Background()
	for _, devices := range []string{"host:2", "local:2"} {
		t.Run(devices, func(t *testing.T) {
			if err := offload.Start(offload.WithDevices(devices), offload.WithOffload("MANDATORY")); err != nil {
				t.Fatal(err)
			}
			defer offload.Stop()
			devs := []offload.Device{offload.On(0), offload.On(1)}
			for _, s := range tbTestPatterns {
				for _, w := range []int{2, 4} {
					for _, k := range []tbKernelKind{tbComputeBound, tbMemoryBound} {
						g := tbGraph{Pattern: tbForWidth(mustPattern(t, s), w), Width: w, Steps: 5, Kernel: k, Iters: 2, Scratch: 8, Samples: 2}
						if _, err := runTBDevices(ctx, g, devs); err != nil {
							t.Errorf("%s width %d, %s: %v", s, w, tbKernelNames[k], err)
						}
					}
				}
			}
			// A task given another task's output fails, and says so.
			a := tbGraph{Pattern: tbPattern{Kind: tbNoComm}, Width: 1, Kernel: tbEmpty}.args(3, 0)
			out, scratch, stale := make([]int64, 2), []int64{tbMagic, 0}, []int64{1, 0}
			err := tbTask1.Nowait(devs[1].Nowait(), a, out, scratch, stale).Wait()
			if !errors.Is(err, offload.ErrKernelFailed) || !strings.Contains(err.Error(), "holds (t=1, p=0), want (t=2, p=0)") {
				t.Errorf("a task with a stale input: %v, want a kernel failure naming it", err)
			}
			offload.Taskwait(ctx)
		})
	}
}

// TestTaskbenchSuite checks suite taskbench in the shared run (two
// patterns, every CPU kind, tiny tasks): a sweep line for every kind, and
// rows or the reason there are none.
func TestTaskbenchSuite(t *testing.T) {
	out := suiteSection(t, "taskbench")
	t.Logf("output:\n%s", out)
	for _, pat := range []string{"stencil_1d", "spread_r3"} {
		for _, kind := range []string{"goroutines", "host2", "local2", "tcp2"} {
			metric := "taskbench." + pat + "." + kind
			if !strings.Contains(out, "\n# "+metric+" sweep (iterations:granularity/efficiency): 1:") {
				t.Errorf("no sweep line for %s", metric)
			}
			if !strings.Contains(out, "\n"+metric+".metg\t") && !strings.Contains(out, "\n# "+metric+".metg: not reported: ") {
				t.Errorf("neither a row nor a reason for %s.metg", metric)
			}
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if f := strings.Split(line, "\t"); len(f) != 4 || !strings.HasPrefix(f[0], "taskbench.") || !strings.HasSuffix(f[0], ".metg") {
			t.Errorf("line %q: want a taskbench.*.metg row of 4 fields", line)
		}
	}
	defer func(dpi int) { plotDPI = dpi }(plotDPI)
	plotDPI = allPlotDPI
	checkPNGs(t, allRun.dir, "taskbench_stencil_1d.png", "taskbench_spread_r3.png")
	var o, errOut bytes.Buffer
	for _, args := range [][]string{
		{"-suite", "taskbench", "-taskbench-patterns", "stencil"},
		{"-suite", "taskbench", "-taskbench-kinds", "gpu"},
		{"-suite", "taskbench", "-taskbench-max-iters", "0"},
	} {
		if err := run(args, &o, &errOut); err == nil {
			t.Errorf("run(%q) succeeded, want an error", args)
		}
	}
}

// TestTBPeer: Task Bench's flags for each pattern, and what is read of a
// run's output (a shell standing in for Task Bench).
func TestTBPeer(t *testing.T) {
	g := tbGraph{Pattern: tbPattern{Kind: tbSpread, Radix: 2, Period: 1}, Width: 2, Steps: 8, Kernel: tbComputeBound, Iters: 64}
	if got, want := strings.Join(tbPeerArgs(g), " "), "-steps 8 -width 2 -type spread -radix 2 -period 1 -kernel compute_bound -iter 64"; got != want {
		t.Errorf("spread: %q, want %q", got, want)
	}
	g.Pattern = tbPattern{Kind: tbNearest, Radix: 5}
	if got, want := strings.Join(tbPeerArgs(g), " "), "-steps 8 -width 2 -type nearest -radix 5 -kernel compute_bound -iter 64"; got != want {
		t.Errorf("nearest: %q, want %q", got, want)
	}
	g.Pattern = tbPattern{Kind: tbStencil1D}
	if got, want := strings.Join(tbPeerArgs(g), " "), "-steps 8 -width 2 -type stencil_1d -kernel compute_bound -iter 64"; got != want {
		t.Errorf("stencil_1d: %q, want %q", got, want)
	}
	fake := func(tasks int) []string {
		return []string{"sh", "-c", "echo 'Total Tasks " + strconv.Itoa(tasks) + "'; echo 'Elapsed Time 1.500000e-03 seconds'", "task_bench"}
	}
	if d, err := runTBPeer(fake(16), g); err != nil || d != 1500*time.Microsecond {
		t.Errorf("runTBPeer = %v, %v; want 1.5ms", d, err)
	}
	if _, err := runTBPeer(fake(15), g); err == nil {
		t.Error("runTBPeer with the wrong task count: no error")
	}
	if _, err := runTBPeer([]string{"sh", "-c", "exit 3"}, g); err == nil {
		t.Error("runTBPeer of a failing command: no error")
	}
}
