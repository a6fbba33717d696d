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
// lasts about -time ÷ points ÷ repetitions, at least tbMinSteps). Width =
// number of devices (2) for the device kinds; task (t, p) runs on device
// p mod 2 (taskbench_run.go says how outputs move between devices).
//
// Per point: granularity = wall × cores ÷ tasks (Task Bench's time per
// task; cores = runtime.NumCPU()), FLOP/s = 2·64·iterations + 64 per task
// (Task Bench's count) × tasks ÷ wall, efficiency = FLOP/s ÷ peak. The peak
// is the best FLOP/s measured in the same run, over every kind and pattern
// (usually the goroutines' at the largest granularity); Task Bench's own
// rule is a peak measured apart for the machine (--peak-compute-bandwidth
// of its chart_metg.py): on a machine shared with others, the best of the
// same run is the steadier yardstick. METG(50%) = the smallest granularity
// at which the efficiency is ≥ 50%, interpolated (tbMETG).
//
// Rows: taskbench.PATTERN.KIND.metg, the METG in ns per task, against the
// goroutines' METG for the same pattern as the baseline (the goroutines'
// own row has none); each sweep is printed as a comment line, and -plot
// draws taskbench_PATTERN.png: efficiency against granularity, one line
// per kind. Suite mpi adds KIND mpi2 (the job's device ranks) against the
// goroutines of the host rank (mpi.go).

func init() {
	register("taskbench", Suite{Devices: "host:2", Run: runTaskbench})
	suiteFlags = append(suiteFlags, func(fs *flag.FlagSet) {
		fs.StringVar(&tbPatternList, "taskbench-patterns", tbPatternList, "suites taskbench and mpi: Task Bench patterns, comma-separated: trivial, no_comm, stencil_1d, nearest_rR, spread_rR, all_to_all")
		fs.StringVar(&tbKindList, "taskbench-kinds", tbKindList, "suite taskbench: kinds to measure, comma-separated: goroutines (always measured: the baseline), host2, local2, tcp2")
		fs.Int64Var(&tbMaxIters, "taskbench-max-iters", tbMaxIters, "suites taskbench and mpi: compute_bound iterations of the largest tasks (the sweep doubles from 1 up to it)")
		fs.BoolVar(&tbInMPI, "taskbench-mpi", tbInMPI, "suite mpi: also measure Task Bench's METG on the device ranks")
		fs.Float64Var(&tbPeak, "taskbench-peak", tbPeak, "suites taskbench and mpi: the peak FLOP/s efficiency is measured against, in GFLOP/s (Task Bench's rule: the machine's, measured apart); 0: the best of the run")
	})
	for _, p := range strings.Split(tbPatternList, ",") {
		plotSpecs = append(plotSpecs, tbPlotSpec("taskbench", p))
	}
}

// The suite's settings (flags).
var (
	tbPatternList = "trivial,no_comm,stencil_1d,nearest_r3,nearest_r5,spread_r3,all_to_all"
	tbKindList    = "goroutines,host2,local2,tcp2"
	tbMaxIters    = int64(1 << 16)
	tbInMPI       = true
	tbPeak        = 0.0 // GFLOP/s; 0: the best of the run
)

const (
	tbMinSteps = 8    // timesteps of a run at least
	tbMaxSteps = 2000 // and at most
)

// tbKind is a way of running the graphs: the goroutines, or goffload on
// devices.
type tbKind struct {
	Name    string // in metrics: goroutines, host2, local2, tcp2, mpi2
	Devices string // the device list the runtime is restarted with; "" for goroutines or the runtime's devices as they are
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

// runTaskbench runs suite taskbench.
func runTaskbench(env *Env) error {
	pats, err := tbPatterns()
	if err != nil {
		return err
	}
	var kinds []tbKind
	for _, k := range strings.Split(tbKindList, ",") {
		switch k = strings.TrimSpace(k); k {
		case "goroutines", "":
		case "host2":
			kinds = append(kinds, tbKind{Name: k, Devices: "host:2"})
		case "local2":
			kinds = append(kinds, tbKind{Name: k, Devices: "local:2"})
		case "tcp2":
			kinds = append(kinds, tbKind{Name: k}) // devices: once started
		default:
			return fmt.Errorf("-taskbench-kinds: unknown kind %q: want goroutines, host2, local2, tcp2", k)
		}
	}
	back := suiteDevices(env, "host:2")
	return measureTaskbench(env, "taskbench", pats, kinds, back)
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

// measureTaskbench measures the goroutines and kinds on pats, reports the
// METG rows and keeps the sweeps for suite's plots. A kind with Devices
// runs on the runtime restarted with them (and with back afterwards); tcp2
// starts its two TCP devices first; a kind without Devices runs on the
// runtime's devices as they are.
func measureTaskbench(env *Env, suite string, pats []tbPattern, kinds []tbKind, back string) error {
	cores := runtime.NumCPU()
	var iters []int64
	for i := int64(1); i <= tbMaxIters; i *= 2 {
		iters = append(iters, i)
	}
	reps := max(env.Rounds, 1)
	perRun := env.Budget / time.Duration(len(iters)*reps)
	env.Comment("%s: compute_bound kernel, %d to %d iterations doubling (%.0f to %.3g FLOPs a task); per point %d runs (-rounds) after one that warms up and sizes them, the fastest counts, each ~%v, at least %d timesteps; %d cores, GOMAXPROCS %d",
		suite, iters[0], iters[len(iters)-1], tbFlopsPerTask(iters[0]), tbFlopsPerTask(iters[len(iters)-1]), reps, perRun.Round(time.Microsecond), tbMinSteps, cores, runtime.GOMAXPROCS(0))
	var sweeps []tbSweep
	// The goroutines first: their speed sizes the other kinds' first runs.
	w := runtime.GOMAXPROCS(0)
	nsPerIter := tbNsPerIter()
	for _, p := range pats {
		pw := tbForWidth(p, w)
		t0 := time.Now()
		pts, err := tbSweepOne(pw, w, iters, reps, perRun, cores, nsPerIter, runTBGoroutines)
		if err != nil {
			return fmt.Errorf("%s, goroutines: %w", pw.Name(), err)
		}
		sweeps = append(sweeps, tbSweep{Req: p.Name(), Pattern: pw, Kind: "goroutines", Width: w, Points: pts})
		env.Comment("%s: %s, goroutines (width %d%s): measured in %v", suite, p.Name(), w, tbAsRun(p, pw), time.Since(t0).Round(time.Millisecond))
	}
	for _, k := range kinds {
		run := func() error {
			nd := offload.NumDevices()
			if nd < 1 {
				return fmt.Errorf("kind %s: no devices", k.Name)
			}
			devs := make([]offload.Device, nd)
			for d := range devs {
				devs[d] = offload.On(d)
				info, err := devs[d].Info()
				if err != nil {
					return err
				}
				env.Comment("%s: kind %s: device %d: %s (%s), %d cores", suite, k.Name, d, info.Kind, info.Name, info.Cores)
			}
			ctx := context.Background()
			for _, p := range pats {
				pw := tbForWidth(p, nd)
				t0 := time.Now()
				pts, err := tbSweepOne(pw, nd, iters, reps, perRun, cores, nsPerIter, func(g tbGraph) (time.Duration, error) { return runTBDevices(ctx, g, devs) })
				if err != nil {
					return fmt.Errorf("%s, %s: %w", pw.Name(), k.Name, err)
				}
				sweeps = append(sweeps, tbSweep{Req: p.Name(), Pattern: pw, Kind: k.Name, Width: nd, Points: pts})
				env.Comment("%s: %s, %s (width %d%s): measured in %v", suite, p.Name(), k.Name, nd, tbAsRun(p, pw), time.Since(t0).Round(time.Millisecond))
			}
			return nil
		}
		var err error
		switch {
		case k.Name == "tcp2":
			err = withTCPDevices(2, func(devices string) error { return withDevices(devices, back, run) })
		case k.Devices != "":
			err = withDevices(k.Devices, back, run)
		default:
			err = run()
		}
		if err != nil {
			return err
		}
	}
	if tbPeerCmd != "" && suite == "taskbench" {
		cmd := strings.Fields(tbPeerCmd)
		w := tbPeerWidth
		for _, p := range pats {
			pw := tbForWidth(p, w)
			t0 := time.Now()
			pts, err := tbSweepOne(pw, w, iters, reps, perRun, cores, nsPerIter, func(g tbGraph) (time.Duration, error) { return runTBPeer(cmd, g) })
			if err != nil {
				return fmt.Errorf("%s, taskbench_peer: %w", pw.Name(), err)
			}
			sweeps = append(sweeps, tbSweep{Req: p.Name(), Pattern: pw, Kind: "taskbench_peer", Width: w, Points: pts, OwnPeak: true})
			env.Comment("%s: %s, taskbench_peer (width %d%s): measured in %v: %s", suite, p.Name(), w, tbAsRun(p, pw), time.Since(t0).Round(time.Millisecond), tbPeerCmd)
		}
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

// tbSweepOne measures pattern p at width w for each of iters, largest
// first: one run that warms up and whose time sizes the next runs' steps
// so that each lasts about perRun, then reps runs, the fastest of which is
// the point's: on a machine shared with others, what they take from a run
// only slows it (Task Bench averages its repetitions).
func tbSweepOne(p tbPattern, w int, iters []int64, reps int, perRun time.Duration, cores int, nsPerIter float64, run func(tbGraph) (time.Duration, error)) ([]tbPoint, error) {
	var pts []tbPoint
	// Estimated wall time of a timestep: the kernels of the width on the
	// cores, at first; then what the last point measured, halved.
	step := nsPerIter * float64(iters[len(iters)-1]) * float64(w) / float64(min(w, cores))
	for k := len(iters) - 1; k >= 0; k-- {
		g := tbGraph{Pattern: p, Width: w, Kernel: tbComputeBound, Iters: iters[k]}
		g.Steps = tbSteps(float64(perRun), step)
		d, err := run(g)
		if err != nil {
			return nil, err
		}
		step = max(float64(d.Nanoseconds())/float64(g.Steps), 1)
		g.Steps = tbSteps(float64(perRun), step)
		walls := make([]float64, reps)
		for r := range walls {
			d, err := run(g)
			if err != nil {
				return nil, err
			}
			walls[r] = float64(d.Nanoseconds())
		}
		wall := slices.Min(walls)
		pts = append(pts, tbPoint{Iters: iters[k], Tasks: g.Steps * w, Wall: wall, Cores: cores})
		step = wall / float64(g.Steps) / 2
	}
	slices.Reverse(pts)
	return pts, nil
}

// tbSteps is the timesteps of a run that should last perRun at step
// nanoseconds a timestep, within [tbMinSteps, tbMaxSteps].
func tbSteps(perRun, step float64) int {
	return int(min(max(perRun/max(step, 1), tbMinSteps), tbMaxSteps))
}

// tbEfficiency returns, for each sweep, the efficiency of each point
// against the peak, and the peak: -taskbench-peak, or else the best FLOP/s
// of all the points. A sweep with OwnPeak is against the best of its
// kind's sweeps instead.
func tbEfficiency(sweeps []tbSweep) ([][]float64, float64) {
	peak := tbPeak * 1e9
	own := map[string]float64{}
	for _, s := range sweeps {
		for _, p := range s.Points {
			if s.OwnPeak {
				own[s.Kind] = max(own[s.Kind], p.FlopRate())
			} else if tbPeak <= 0 {
				peak = max(peak, p.FlopRate())
			}
		}
	}
	effs := make([][]float64, len(sweeps))
	for i, s := range sweeps {
		pk := peak
		if s.OwnPeak {
			pk = own[s.Kind]
		}
		for _, p := range s.Points {
			effs[i] = append(effs[i], p.FlopRate()/pk)
		}
	}
	return effs, peak
}

// tbReport prints a comment per sweep and the METG rows.
func tbReport(env *Env, suite string, sweeps []tbSweep) {
	effs, peak := tbEfficiency(sweeps)
	how := "the best of the run (efficiency 100%)"
	if tbPeak > 0 {
		how = "-taskbench-peak"
	}
	env.Comment("%s: peak %.3g GFLOP/s: %s; granularity = wall × %d cores ÷ tasks", suite, peak/1e9, how, runtime.NumCPU())
	for _, s := range sweeps {
		if s.OwnPeak && s.Pattern.Kind == sweeps[len(sweeps)-1].Pattern.Kind {
			best := 0.0
			for _, t := range sweeps {
				if t.Kind == s.Kind {
					for _, p := range t.Points {
						best = max(best, p.FlopRate())
					}
				}
			}
			env.Comment("%s: kind %s: efficiency against its own peak, %.3g GFLOP/s (another kernel)", suite, s.Kind, best/1e9)
		}
	}
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

// withTCPDevices starts n TCP device processes of this executable on
// 127.0.0.1 (GOFFLOAD_ROLE=device, GOFFLOAD_LISTEN=127.0.0.1:0) with a
// fresh secret, runs f with their device list (GOFFLOAD_SECRET set for
// the host while f runs) and kills them.
func withTCPDevices(n int, f func(devices string) error) (err error) {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	key := make([]byte, 16)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	secret := hex.EncodeToString(key)
	defer setEnv(map[string]string{"GOFFLOAD_SECRET": secret})()
	var addrs []string
	for range n {
		cmd := exec.Command(exe)
		cmd.Env = append(os.Environ(), "GOFFLOAD_ROLE=device", "GOFFLOAD_LISTEN=127.0.0.1:0", "GOFFLOAD_SECRET="+secret)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		stderr, err := cmd.StderrPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("starting a TCP device: %w", err)
		}
		defer func() {
			cmd.Process.Kill()
			cmd.Wait()
		}()
		addr := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(stderr)
			for sc.Scan() {
				if _, a, ok := strings.Cut(sc.Text(), " serving on "); ok {
					select {
					case addr <- a:
					default:
					}
				}
			}
		}()
		select {
		case a := <-addr:
			addrs = append(addrs, "tcp://"+a)
		case <-time.After(30 * time.Second):
			return errors.New("a TCP device did not say where it serves within 30s")
		}
	}
	return f(strings.Join(addrs, ","))
}
