package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/goffload/offload"
)

// Suite taskbench: Task Bench's METG(50%) (Slaughter et al., SC'20) for
// goffload. For each pattern (taskbench_graph.go) and each kind — the
// goroutine baseline (width GOMAXPROCS, a goroutine per column, a channel
// per edge), host:2, local:2 and two TCP devices on loopback (device
// processes of this executable that the suite starts, GOFFLOAD_LISTEN on
// 127.0.0.1 with a fresh secret) — the suite runs the graph with the
// compute_bound kernel at iteration counts doubling from 1 to
// -taskbench-max-iters, timing T timesteps each (T chosen so that a run
// lasts about -time ÷ points ÷ -rounds, at least tbMinSteps), the kinds'
// runs alternating in -rounds passes over the points (tbSweepAll: the
// runtime is started once with every kind's devices), a point's fastest
// run counting. Width = number of
// devices (2) for the device kinds; task (t, p) runs on device p mod 2
// (taskbench_run.go says how outputs move between devices). Kind opencl2,
// not in the default list, is two devices on OpenCL device 0 (PoCL on a
// CPU), whose tasks run the OpenCL C that goffload-gen made of the
// kernels' Go bodies (zz_offload_gen.go).
//
// Per point: granularity = wall × cores ÷ tasks (Task Bench's time per
// task; cores = runtime.NumCPU()), FLOP/s = 2·64·iterations + 64 per task
// (Task Bench's count) × tasks ÷ wall, efficiency = FLOP/s ÷ peak. The peak
// of a pattern is the goroutines' plateau on it (tbEfficiency), measured
// in the same passes as the other kinds;
// Task Bench's own rule is a peak measured apart for the machine
// (--peak-compute-bandwidth of its chart_metg.py): on a machine shared
// with others, the baseline measured alongside is the steadier yardstick
// (-taskbench-peak fixes one instead).
// METG(50%) = the smallest granularity at which the efficiency is ≥ 50%,
// interpolated (tbMETG).
//
// Rows: taskbench.PATTERN.KIND.metg, the METG in ns per task, against the
// goroutines' METG for the same pattern as the baseline (the goroutines'
// own row has none); each sweep is printed as a comment line, and -plot
// draws taskbench_PATTERN.png: efficiency against granularity, one line
// per kind. Suite mpi adds KIND mpi2 (the job's device ranks) against the
// goroutines of the host rank (mpi.go); -taskbench-peer adds Task Bench's
// own implementation (taskbench_peer.go).

func init() {
	register("taskbench", Suite{Devices: "host:2", Run: runTaskbench})
	suiteFlags = append(suiteFlags, func(fs *flag.FlagSet) {
		fs.StringVar(&tbPatternList, "taskbench-patterns", tbPatternList, "suites taskbench and mpi: Task Bench patterns, comma-separated: trivial, no_comm, stencil_1d, nearest_rR, spread_rR, all_to_all")
		fs.StringVar(&tbKindList, "taskbench-kinds", tbKindList, "suite taskbench: kinds to measure, comma-separated: goroutines (always measured: the baseline), host2, local2, tcp2, host2-graph, local2-graph and tcp2-graph (each point's graph recorded once and replayed), opencl2 (two devices on OpenCL device 0: the kernels' generated OpenCL C; not in the default list)")
		fs.Int64Var(&tbMaxIters, "taskbench-max-iters", tbMaxIters, "suites taskbench and mpi: compute_bound iterations of the largest tasks (the sweep doubles from 1 up to it)")
		fs.BoolVar(&tbInMPI, "taskbench-mpi", tbInMPI, "suite mpi: also measure Task Bench's METG on the device ranks")
		fs.Float64Var(&tbPeak, "taskbench-peak", tbPeak, "suites taskbench and mpi: the peak FLOP/s efficiency is measured against, in GFLOP/s (Task Bench's rule: the machine's, measured apart); 0: per pattern, the goroutines' plateau in the same run")
	})
	for _, p := range strings.Split(tbPatternList, ",") {
		plotSpecs = append(plotSpecs, tbPlotSpec("taskbench", p))
	}
}

// The suite's settings (flags).
var (
	tbPatternList = "trivial,no_comm,stencil_1d,nearest_r3,nearest_r5,spread_r3,all_to_all"
	tbKindList    = "goroutines,host2,local2,tcp2,host2-graph,local2-graph,tcp2-graph"
	tbMaxIters    = int64(1 << 16)
	tbInMPI       = true
	tbPeak        = 0.0 // GFLOP/s; 0: per pattern, the goroutines' plateau
)

const (
	tbMinSteps = 8    // timesteps of a run at least
	tbMaxSteps = 2000 // and at most
)

// tbRunner is a kind: a way of running the graphs, at its width.
type tbRunner struct {
	Name    string // in metrics: goroutines, host2, local2, tcp2, mpi2, taskbench_peer
	Width   int
	Run     func(tbGraph) (time.Duration, error)
	OwnPeak bool // see tbSweep
}

// tbSweep is the points of one kind and pattern.
type tbSweep struct {
	Req     string    // the pattern as -taskbench-patterns names it: in metrics
	Pattern tbPattern // as run at the width
	Kind    string
	Width   int
	Points  []tbPoint
	// OwnPeak: the efficiency of the points is against the best FLOP/s
	// of the kind's own sweeps (-taskbench-peer, whose kernel is another).
	OwnPeak bool
}

// tbSweeps is what the last run of a suite measured, by suite, for the
// plots (-plot draws after the suites ran).
var tbSweeps = map[string][]tbSweep{}

// runTaskbench runs suite taskbench: the runtime restarted once with the
// devices of every kind chosen (host:2, local:2, the two TCP devices, in
// that order), so that the kinds' runs can alternate, and with the suite's
// devices again afterwards.
func runTaskbench(env *Env) error {
	pats, err := tbPatterns()
	if err != nil {
		return err
	}
	type part struct{ name, devices string }
	var parts []part
	tcp := 0 // TCP device processes the kinds need
	for _, k := range strings.Split(tbKindList, ",") {
		switch k = strings.TrimSpace(k); k {
		case "goroutines", "":
		case "host2":
			parts = append(parts, part{k, "host:2"})
		case "local2":
			parts = append(parts, part{k, "local:2"})
		case "opencl2":
			// Two devices sharing the first OpenCL device (PoCL on a
			// CPU): the tasks run the OpenCL C made from the kernels'
			// Go bodies. Not in the default list.
			parts = append(parts, part{k, "opencl:0,opencl:0"})
		case "host2-graph":
			parts = append(parts, part{k, "host:2"})
		case "local2-graph":
			parts = append(parts, part{k, "local:2"})
		case "tcp2":
			parts = append(parts, part{k, ""}) // once started: two processes
			tcp += 2
		case "tcp2-graph":
			// Two sessions with one process: its sessions are siblings, which
			// wait on each other's events in the process, as a recorded edge
			// must. Two tcp:// processes have no link of their own, so an edge
			// between them would wait on the host, which a graph refuses.
			parts = append(parts, part{k, ""})
			tcp++
		default:
			return fmt.Errorf("-taskbench-kinds: unknown kind %q: want goroutines, host2, local2, tcp2, host2-graph, local2-graph, tcp2-graph, opencl2", k)
		}
	}
	measure := func(tcpDevices string) error {
		if len(parts) == 0 {
			return measureTaskbench(env, "taskbench", pats, nil)
		}
		var list []string
		tcpList := strings.Split(tcpDevices, ",")
		for _, p := range parts {
			switch p.name {
			case "tcp2": // the next two processes
				p.devices, tcpList = strings.Join(tcpList[:2], ","), tcpList[2:]
			case "tcp2-graph": // the next one, twice
				p.devices, tcpList = tcpList[0]+","+tcpList[0], tcpList[1:]
			}
			list = append(list, p.devices)
		}
		devices := strings.Join(list, ",")
		return withDevices(devices, suiteDevices(env, "host:2"), func() error {
			if n := offload.NumDevices(); n != 2*len(parts) {
				return fmt.Errorf("%d devices of %q, want %d", n, devices, 2*len(parts))
			}
			env.Comment("taskbench: runtime restarted with devices %q", devices)
			var kinds []tbRunner
			for i, p := range parts {
				kind := tbDeviceKind
				if strings.HasSuffix(p.name, "-graph") {
					kind = tbGraphKind
				}
				k, err := kind(env, "taskbench", p.name, 2*i, 2)
				if err != nil {
					return err
				}
				kinds = append(kinds, k)
			}
			return measureTaskbench(env, "taskbench", pats, kinds)
		})
	}
	if tcp > 0 {
		return withTCPDevices(tcp, measure)
	}
	return measure("")
}

// tbDevices returns devices first to first+n-1 of kind name, which it
// describes in comments, each ending with note.
func tbDevices(env *Env, suite, name string, first, n int, note string) ([]offload.Device, error) {
	devs := make([]offload.Device, n)
	for d := range devs {
		devs[d] = offload.On(first + d)
		info, err := devs[d].Info()
		if err != nil {
			return nil, err
		}
		env.Comment("%s: kind %s: device %d: %s (%s), %d cores%s", suite, name, first+d, info.Kind, info.Name, info.Cores, note)
	}
	return devs, nil
}

// tbDeviceKind is kind name: goffload on devices first to first+n-1, which
// it describes in comments.
func tbDeviceKind(env *Env, suite, name string, first, n int) (tbRunner, error) {
	devs, err := tbDevices(env, suite, name, first, n, "")
	if err != nil {
		return tbRunner{}, err
	}
	ctx := context.Background()
	return tbRunner{Name: name, Width: n, Run: func(g tbGraph) (time.Duration, error) { return runTBDevices(ctx, g, devs) }}, nil
}

// tbPatterns parses -taskbench-patterns.
func tbPatterns() ([]tbPattern, error) {
	var pats []tbPattern
	for _, s := range strings.Split(tbPatternList, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		p, err := parseTBPattern(s)
		if err != nil {
			return nil, fmt.Errorf("-taskbench-patterns: %w", err)
		}
		pats = append(pats, p)
	}
	if len(pats) == 0 {
		return nil, fmt.Errorf("-taskbench-patterns %q names no pattern", tbPatternList)
	}
	if tbMaxIters < 1 {
		return nil, fmt.Errorf("-taskbench-max-iters %d: want at least 1", tbMaxIters)
	}
	return pats, nil
}

// measureTaskbench measures the goroutines, kinds and -taskbench-peer
// (suite taskbench) on pats, their runs alternating, reports the METG rows
// and keeps the sweeps for suite's plots.
func measureTaskbench(env *Env, suite string, pats []tbPattern, kinds []tbRunner) error {
	cores := runtime.NumCPU()
	var iters []int64
	for i := int64(1); i <= tbMaxIters; i *= 2 {
		iters = append(iters, i)
	}
	reps := max(env.Rounds, 1)
	perRun := env.Budget / time.Duration(len(iters)*reps)
	env.Comment("%s: compute_bound kernel, %d to %d iterations doubling (%.0f to %.3g FLOPs a task); a pass that warms up and sizes the runs, then %d passes (-rounds) over the points, the kinds' runs alternating, a point's fastest run counts, each ~%v, at least %d timesteps; %d cores, GOMAXPROCS %d",
		suite, iters[0], iters[len(iters)-1], tbFlopsPerTask(iters[0]), tbFlopsPerTask(iters[len(iters)-1]), reps, perRun.Round(time.Microsecond), tbMinSteps, cores, runtime.GOMAXPROCS(0))
	all := append([]tbRunner{{Name: "goroutines", Width: runtime.GOMAXPROCS(0), Run: runTBGoroutines}}, kinds...)
	if tbPeerCmd != "" && suite == "taskbench" {
		cmd := strings.Fields(tbPeerCmd)
		all = append(all, tbRunner{Name: "taskbench_peer", Width: tbPeerWidth, OwnPeak: true, Run: func(g tbGraph) (time.Duration, error) { return runTBPeer(cmd, g) }})
		env.Comment("%s: kind taskbench_peer: %s", suite, tbPeerCmd)
	}
	nsPerIter := tbNsPerIter()
	var sweeps []tbSweep
	for _, p := range pats {
		t0 := time.Now()
		ss, err := tbSweepAll(p, all, iters, reps, perRun, cores, nsPerIter)
		if err != nil {
			return err
		}
		sweeps = append(sweeps, ss...)
		var widths []string
		for _, s := range ss {
			widths = append(widths, fmt.Sprintf("%s %d%s", s.Kind, s.Width, tbAsRun(p, s.Pattern)))
		}
		env.Comment("%s: %s measured in %v (widths: %s)", suite, p.Name(), time.Since(t0).Round(time.Millisecond), strings.Join(widths, ", "))
	}
	tbSweeps[suite] = sweeps
	tbReport(env, suite, sweeps)
	return nil
}

// tbAsRun says how pattern p was run at its width (pw), where tbForWidth
// changed it: ", radix 2, period 1"; "" elsewhere.
func tbAsRun(p, pw tbPattern) string {
	if p.Kind != tbSpread {
		return ""
	}
	return fmt.Sprintf(", radix %d, period %d", pw.Radix, pw.Period)
}

// tbNsPerIter times the compute_bound kernel on one goroutine: nanoseconds
// per iteration, to size the first runs of a sweep.
func tbNsPerIter() float64 {
	const n = 1 << 12
	tbCompute(n)
	t0 := time.Now()
	tbCompute(n)
	return float64(time.Since(t0).Nanoseconds()) / n
}

// tbSweepAll measures pattern p with each kind for each of iters. A
// first pass over the points (largest first) and kinds warms up and sizes
// each run's timesteps so that it lasts about perRun; then reps passes run
// each point of each kind once, the kinds' runs alternating, and the
// fastest run of a point is the kind's: each point's runs are spread over
// the whole measurement, seconds apart, so that a neighbour's load on a
// shared machine (which only slows runs) weighs on every kind alike and
// spares each point in some pass. Task Bench averages its repetitions.
func tbSweepAll(p tbPattern, kinds []tbRunner, iters []int64, reps int, perRun time.Duration, cores int, nsPerIter float64) ([]tbSweep, error) {
	sweeps := make([]tbSweep, len(kinds))
	graphs := make([][]tbGraph, len(kinds)) // [kind][point]
	walls := make([][][]float64, len(kinds))
	for i, k := range kinds {
		sweeps[i] = tbSweep{Req: p.Name(), Pattern: tbForWidth(p, k.Width), Kind: k.Name, Width: k.Width, OwnPeak: k.OwnPeak}
		graphs[i] = make([]tbGraph, len(iters))
		walls[i] = make([][]float64, len(iters))
		// A timestep's estimated wall time: at first, the kernels of the
		// width on the cores; then half the last point's.
		step := nsPerIter * float64(iters[len(iters)-1]) * float64(k.Width) / float64(min(k.Width, cores))
		for n := len(iters) - 1; n >= 0; n-- {
			g := tbGraph{Pattern: sweeps[i].Pattern, Width: k.Width, Kernel: tbComputeBound, Iters: iters[n]}
			g.Steps = tbSteps(float64(perRun), step)
			d, err := k.Run(g)
			if err != nil {
				return nil, fmt.Errorf("%s, %s: %w", g.Pattern.Name(), k.Name, err)
			}
			step = max(float64(d.Nanoseconds())/float64(g.Steps), 1)
			g.Steps = tbSteps(float64(perRun), step)
			graphs[i][n] = g
			step /= 2 // the next point's tasks are half as long
		}
	}
	for range reps {
		for n := len(iters) - 1; n >= 0; n-- {
			for i, k := range kinds {
				d, err := k.Run(graphs[i][n])
				if err != nil {
					return nil, fmt.Errorf("%s, %s: %w", graphs[i][n].Pattern.Name(), k.Name, err)
				}
				walls[i][n] = append(walls[i][n], float64(d.Nanoseconds()))
			}
		}
	}
	for i := range sweeps {
		for n, g := range graphs[i] {
			sweeps[i].Points = append(sweeps[i].Points, tbPoint{Iters: iters[n], Tasks: g.Steps * g.Width, Wall: slices.Min(walls[i][n]), Cores: cores})
		}
	}
	return sweeps, nil
}

// tbSteps is the timesteps of a run that should last perRun at step
// nanoseconds a timestep, within [tbMinSteps, tbMaxSteps].
func tbSteps(perRun, step float64) int {
	return int(min(max(perRun/max(step, 1), tbMinSteps), tbMaxSteps))
}

// tbPlateauPoints is how many of a sweep's largest tasks make its
// plateau: the FLOP/s where the overhead is negligible.
const tbPlateauPoints = 5

// tbEfficiency returns, for each sweep, the efficiency of each point
// against its peak, and the peak of each sweep. The peak of a pattern is
// the goroutines' plateau on it: the median FLOP/s of their
// tbPlateauPoints largest granularities (up to 4 ms tasks at the default
// -taskbench-max-iters), measured in the same passes as the other kinds.
// With -taskbench-peak it is that; a sweep with OwnPeak (another kernel)
// is against its kind's plateau over all its sweeps. The median, not the
// best: on a shared machine the best is the one moment no neighbour ran,
// and the plateau what the machine gave the run.
func tbEfficiency(sweeps []tbSweep) (effs [][]float64, peaks []float64) {
	best := func(match func(tbSweep) bool) float64 {
		var rates []float64
		for _, s := range sweeps {
			if !match(s) {
				continue
			}
			pts := slices.Clone(s.Points)
			slices.SortFunc(pts, func(a, b tbPoint) int { return int(b.Iters - a.Iters) })
			for _, p := range pts[:min(len(pts), tbPlateauPoints)] {
				rates = append(rates, p.FlopRate())
			}
		}
		if len(rates) == 0 {
			return 0
		}
		return median(rates)
	}
	effs = make([][]float64, len(sweeps))
	peaks = make([]float64, len(sweeps))
	for i, s := range sweeps {
		switch {
		case s.OwnPeak:
			peaks[i] = best(func(t tbSweep) bool { return t.Kind == s.Kind })
		case tbPeak > 0:
			peaks[i] = tbPeak * 1e9
		default:
			peaks[i] = best(func(t tbSweep) bool { return t.Kind == "goroutines" && t.Req == s.Req })
			if peaks[i] == 0 { // no goroutines: the best of all
				peaks[i] = best(func(t tbSweep) bool { return !t.OwnPeak })
			}
		}
		for _, p := range s.Points {
			effs[i] = append(effs[i], p.FlopRate()/peaks[i])
		}
	}
	return effs, peaks
}

// tbReport prints a comment per sweep and the METG rows.
func tbReport(env *Env, suite string, sweeps []tbSweep) {
	effs, peaks := tbEfficiency(sweeps)
	var pk []string
	for i, s := range sweeps {
		switch {
		case s.OwnPeak:
			pk = append(pk, fmt.Sprintf("%s %s %.3g (its own plateau: another kernel)", s.Req, s.Kind, peaks[i]/1e9))
		case s.Kind == "goroutines" || tbPeak > 0 && i == 0:
			pk = append(pk, fmt.Sprintf("%s %.3g", s.Req, peaks[i]/1e9))
		}
	}
	how := fmt.Sprintf("per pattern, the goroutines' plateau on it (the median of their %d largest granularities)", tbPlateauPoints)
	if tbPeak > 0 {
		how = "-taskbench-peak"
	}
	env.Comment("%s: peak GFLOP/s (efficiency 100%%), %s: %s; granularity = wall × %d cores ÷ tasks", suite, how, strings.Join(pk, ", "), runtime.NumCPU())
	type metg struct {
		v          float64
		below, ok  bool
		lowestGran float64
	}
	res := make([]metg, len(sweeps))
	for i, s := range sweeps {
		var b strings.Builder
		gran := make([]float64, len(s.Points))
		for j, p := range s.Points {
			gran[j] = p.Granularity()
			fmt.Fprintf(&b, " %d:%s/%.0f%%", p.Iters, human(gran[j]), 100*effs[i][j])
		}
		v, below, ok := tbMETG(gran, effs[i], 0.5)
		res[i] = metg{v, below, ok, slices.Min(gran)}
		env.Comment("taskbench.%s.%s sweep (iterations:granularity/efficiency):%s", s.Req, s.Kind, b.String())
	}
	// The comments first, then the rows: one table.
	for i, s := range sweeps {
		if !res[i].ok {
			env.Comment("taskbench.%s.%s.metg: not reported: no point of the sweep reached 50%% efficiency", s.Req, s.Kind)
		}
	}
	for i, s := range sweeps {
		m := res[i]
		metric := fmt.Sprintf("taskbench.%s.%s.metg", s.Req, s.Kind)
		if !m.ok {
			continue
		}
		r := Result{Metric: metric, Goffload: m.v, Baseline: math.NaN()}
		note := fmt.Sprintf("METG(50%%), width %d", s.Width)
		note += tbAsRun(s.Pattern, s.Pattern)
		if m.below {
			note += fmt.Sprintf("; ≤: the sweep's smallest tasks (%s) were still ≥ 50%% efficient", human(m.lowestGran))
		}
		if s.Kind != "goroutines" {
			for j, b := range sweeps {
				if b.Kind == "goroutines" && b.Req == s.Req && res[j].ok {
					r.Baseline = res[j].v
					note += fmt.Sprintf(" vs goroutines, width %d", b.Width)
				}
			}
		}
		r.Note = note
		env.Report(r)
	}
}

// useFreshSecret sets GOFFLOAD_SECRET to a fresh random secret, which it
// returns, until restore is called: the secret of the TCP devices this
// process starts and of its runtime.
func useFreshSecret() (secret string, restore func(), err error) {
	key := make([]byte, 16)
	if _, err := rand.Read(key); err != nil {
		return "", nil, err
	}
	secret = hex.EncodeToString(key)
	return secret, setEnv(map[string]string{"GOFFLOAD_SECRET": secret}), nil
}

// withTCPDevices starts n TCP device processes of this executable on
// 127.0.0.1 (GOFFLOAD_ROLE=device, GOFFLOAD_LISTEN=127.0.0.1:0) with a
// fresh secret, runs f with their device list (GOFFLOAD_SECRET set for
// the host while f runs) and kills them.
func withTCPDevices(n int, f func(devices string) error) (err error) {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	secret, restore, err := useFreshSecret()
	if err != nil {
		return err
	}
	defer restore()
	var addrs []string
	for range n {
		addr, stop, err := spawnTCPDevice(exe, "GOFFLOAD_SECRET="+secret)
		if err != nil {
			return err
		}
		defer stop()
		addrs = append(addrs, "tcp://"+addr)
	}
	return f(strings.Join(addrs, ","))
}

// spawnTCPDevice starts exe as a TCP device on 127.0.0.1
// (GOFFLOAD_ROLE=device, GOFFLOAD_LISTEN=127.0.0.1:0, and env after the
// process's own environment), waits for it to say where it serves, and
// returns that address and a function that kills it.
func spawnTCPDevice(exe string, env ...string) (addr string, stop func(), err error) {
	cmd := exec.Command(exe)
	cmd.Env = append(append(os.Environ(), "GOFFLOAD_ROLE=device", "GOFFLOAD_LISTEN=127.0.0.1:0"), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("starting a TCP device: %w", err)
	}
	stop = func() {
		cmd.Process.Kill()
		cmd.Wait()
	}
	addrs := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if _, a, ok := strings.Cut(sc.Text(), " serving on "); ok {
				select {
				case addrs <- a:
				default:
				}
			}
		}
	}()
	select {
	case a := <-addrs:
		return a, stop, nil
	case <-time.After(30 * time.Second):
		stop()
		return "", nil, errors.New("a TCP device did not say where it serves within 30s")
	}
}
