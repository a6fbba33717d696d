// Command bench measures goffload's runtime and, where one applies, the same
// work done without it (the baseline), in one run:
//
//	go run ./bench -suite host                 # aligned table with units
//	go run ./bench -suite host -format tsv     # metric, goffload, baseline, ratio
//	go run ./bench -suite host -time 3s        # longer measurements, steadier figures
//	go run ./bench -suite host,remote          # several suites, one after the other
//	go run ./bench -suite all -plot docs/bench # and PNG plots of the figures (plot.go)
//
// Each figure is the median, over -rounds rounds, of the time per operation;
// the number of operations per round grows (as testing.Benchmark does) until
// a round lasts about -time divided by -rounds. The ratio is the goffload
// time divided by the baseline time: lower is better, 1 means no overhead.
//
// A suite is a file of this package that registers itself in suites from an
// init function (host.go is suite "host", remote.go suites "remote" and
// "remote-socket", async.go suite "async"); bench starts the runtime with
// the suite's devices and environment (remote-socket's:
// GOFFLOAD_LOCAL_LINK=socket), runs it, and stops the runtime before the
// next suite. Suites remote, remote-socket and async start this executable
// again, as local device processes and as the raw baselines' peer
// (peer.go, over a socketpair or shared memory, peershm.go): main lets
// those serve before it does anything else.
//
// Between two machines: suites remote, remote-socket and async measure
// device processes on this machine (local:1, local:2) against raw peers on
// this machine. To
// measure a TCP device on another machine B instead, from a host machine
// A, run one bench binary on both (a host and a device must be built from
// the same code: same kernels):
//
//	go build -o bench ./bench        # copy it to both machines
//	# on B, the device machine: a TCP device, and the raw baselines' peers
//	GOFFLOAD_ROLE=device GOFFLOAD_LISTEN=0.0.0.0:7070 GOFFLOAD_SECRET=$SECRET ./bench &
//	./bench -serve-peer :7071 &
//	# on A, the host machine
//	GOFFLOAD_SECRET=$SECRET ./bench -suite remote -devices tcp://B:7070 -peer B:7071
//	GOFFLOAD_SECRET=$SECRET ./bench -suite async -devices tcp://B:7070,tcp://B:7070 -peer B:7071
//
// -devices replaces the device list of suites remote, remote-socket and
// async (remote measures device 0, async devices 0 and 1: here two sessions
// of the one TCP device; two TCP devices work as well; remote-socket
// measures local devices only and says so for others). -peer makes their
// raw baselines talk to the bench -serve-peer on B, over the same network
// as the devices' links, instead of to child processes over socketpairs or
// shared memory; tcp devices require it. The output's comments name the
// devices and the peer measured. async.two_devices_vs_2cores, which
// compares with a local:1 device, is left out then. A -serve-peer serves whoever connects, until
// it is killed: run it on a trusted network only. The same commands with
// 127.0.0.1 for B measure TCP on one machine (TestRemoteSuiteTCP does).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/goffload/offload"
	"github.com/goffload/offload/examples/apps/cg"
	"github.com/goffload/offload/examples/apps/cholesky"
	"github.com/goffload/offload/examples/apps/jacobi"
	"github.com/goffload/offload/role"
)

// Suite is a named set of metrics.
type Suite struct {
	// Devices is the device list the runtime is started with for the
	// suite, as offload.WithDevices takes it.
	Devices string
	// Remote says the suite measures device processes against raw peers
	// (peer.go): -devices replaces its Devices, and -peer names the peer
	// its raw baselines talk to instead of a child process.
	Remote bool
	// Env, if set, is environment the runtime is started with for the
	// suite (GOFFLOAD_LOCAL_LINK=socket, say): set before offload.Start
	// and restored after offload.Stop.
	Env map[string]string
	// Run measures the suite's metrics on the started runtime and reports
	// each with env.Report.
	Run func(env *Env) error
	// Skip, if set, says why the suite cannot run here ("" if it can).
	Skip func() string
}

// skipReason says why suite s cannot run here, or "". Under an MPI
// launcher only the mpi suite runs: the others would run on every rank.
func skipReason(name string, s Suite) string {
	if s.Skip != nil {
		if why := s.Skip(); why != "" {
			return why
		}
	}
	if name != "mpi" && role.UnderMPI() {
		return "under an MPI launcher only the mpi suite runs"
	}
	return ""
}

// suites holds the registered suites by name.
var suites = map[string]Suite{}

// suiteFlags add the flags of suites that have some (their settings in
// package variables); a suite's file appends to it from its init function.
var suiteFlags []func(fs *flag.FlagSet)

// register adds a suite; call it from an init function.
func register(name string, s Suite) {
	if _, dup := suites[name]; dup {
		panic("bench: suite " + name + " registered twice")
	}
	suites[name] = s
}

// Result is one metric: the time per operation through goffload and, when
// one applies, of the same work done without it.
type Result struct {
	Metric   string
	Goffload float64 // nanoseconds per operation
	Baseline float64 // nanoseconds per operation; NaN when no baseline applies
	Note     string  // shown in the table only
	// Bytes is what one operation moves (not printed; the plots' x); 0
	// where the metric is no transfer.
	Bytes int64
}

// HasBaseline reports whether the result has a baseline.
func (r Result) HasBaseline() bool { return !math.IsNaN(r.Baseline) }

// Ratio is goffload time ÷ baseline time, NaN without a baseline.
func (r Result) Ratio() float64 {
	if !r.HasBaseline() || r.Baseline == 0 {
		return math.NaN()
	}
	return r.Goffload / r.Baseline
}

// Env is what a suite measures with.
type Env struct {
	// Budget is the target measuring time of one figure, all rounds
	// together.
	Budget time.Duration
	// Rounds is the number of timed rounds whose median is reported.
	Rounds int

	// Devices is the device list the runtime was started with for the
	// suite being run: the suite's own, or -devices for a Remote suite. A
	// suite that restarts the runtime with other devices starts these
	// again when it is done.
	Devices string
	// Peer is -peer: the address of a raw peer server (bench -serve-peer)
	// for the raw baselines of Remote suites, or "" to start the peers as
	// child processes.
	Peer string

	override string // -devices
	out      printer
	results  []Result // what Report printed, in order, for the plots
}

// Report prints a result.
func (e *Env) Report(r Result) {
	e.results = append(e.results, r)
	e.out.row(r)
}

// Comment prints a line of information about the run (a '#' line in tsv).
func (e *Env) Comment(format string, args ...any) { e.out.comment(fmt.Sprintf(format, args...)) }

// Measure times f, which does n operations, and returns the median time per
// operation in nanoseconds over e.Rounds rounds. The operation count of a
// round is calibrated first so that a round lasts about Budget/Rounds (the
// last calibration run is the first round); at least one operation runs per
// round.
func (e *Env) Measure(f func(n int) error) (float64, error) {
	t, err := e.measure(f)
	if err != nil {
		return 0, err
	}
	return t[0], nil
}

// Compare measures f and its baseline g as Measure does, alternating their
// rounds, so that drift in the machine's speed (frequency, memory bandwidth
// shared with neighbours) weighs on both alike. It returns the median times
// per operation of f and of g.
func (e *Env) Compare(f, g func(n int) error) (ft, gt float64, err error) {
	t, err := e.measure(f, g)
	if err != nil {
		return 0, 0, err
	}
	return t[0], t[1], nil
}

// measure calibrates each of fs, then runs their rounds interleaved and
// returns the median time per operation of each. The last calibration run
// of each, which lasted about a round, counts as its first round.
func (e *Env) measure(fs ...func(n int) error) ([]float64, error) {
	rounds := max(e.Rounds, 1)
	target := e.Budget / time.Duration(rounds)
	ns := make([]int, len(fs))
	per := make([][]float64, len(fs))
	for i, f := range fs {
		n, d, err := calibrate(f, target)
		if err != nil {
			return nil, err
		}
		ns[i] = n
		per[i] = append(per[i], float64(d.Nanoseconds())/float64(n))
	}
	for range rounds - 1 {
		for i, f := range fs {
			d, err := timed(f, ns[i])
			if err != nil {
				return nil, err
			}
			per[i] = append(per[i], float64(d.Nanoseconds())/float64(ns[i]))
		}
	}
	out := make([]float64, len(fs))
	for i, p := range per {
		out[i] = median(p)
	}
	return out, nil
}

// CompareSelfTimed measures operations that time themselves: each of fs
// does one operation (a solver's run, say) and returns how long the part
// that counts took (its iterations, not its set-up or checks). Each is run
// once to warm up, which also sizes its rounds by the operation's whole
// time so that a round lasts about Budget/Rounds; then their rounds
// alternate as Compare's do. It returns, for each, the median over the
// rounds of the mean time that counts per operation, in nanoseconds.
func (e *Env) CompareSelfTimed(fs ...func() (time.Duration, error)) ([]float64, error) {
	rounds := max(e.Rounds, 1)
	target := e.Budget / time.Duration(rounds)
	counts := make([]int, len(fs))
	for i, f := range fs {
		t0 := time.Now()
		if _, err := f(); err != nil {
			return nil, err
		}
		counts[i] = int(min(max(target/max(time.Since(t0), 1), 1), 1e6))
	}
	per := make([][]float64, len(fs))
	for range rounds {
		for i, f := range fs {
			runtime.GC()
			var sum time.Duration
			for range counts[i] {
				d, err := f()
				if err != nil {
					return nil, err
				}
				sum += d
			}
			per[i] = append(per[i], float64(sum.Nanoseconds())/float64(counts[i]))
		}
	}
	out := make([]float64, len(fs))
	for i, p := range per {
		out[i] = median(p)
	}
	return out, nil
}

// calibrate grows the operation count until f(n) lasts target, as
// testing.Benchmark does, and returns n and how long that last run took.
func calibrate(f func(n int) error, target time.Duration) (int, time.Duration, error) {
	n := 1
	for {
		d, err := timed(f, n)
		if err != nil {
			return 0, 0, err
		}
		if d >= target || n >= 1e9 {
			return n, d, nil
		}
		next := int(float64(n) * 1.2 * float64(target) / float64(max(d, 1)))
		n = min(max(next, n+1), 100*n, 1e9)
	}
}

// timed runs f(n) after a garbage collection and returns how long it took.
func timed(f func(n int) error, n int) (time.Duration, error) {
	runtime.GC()
	t0 := time.Now()
	err := f(n)
	return time.Since(t0), err
}

func median(v []float64) float64 {
	v = slices.Clone(v)
	sort.Float64s(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// human formats nanoseconds with a unit and three significant digits.
func human(ns float64) string {
	unit, div := "ns", 1.0
	switch {
	case ns >= 1e9:
		unit, div = "s", 1e9
	case ns >= 1e6:
		unit, div = "ms", 1e6
	case ns >= 1e3:
		unit, div = "µs", 1e3
	}
	v := ns / div
	prec := 2
	switch {
	case v >= 100:
		prec = 0
	case v >= 10:
		prec = 1
	}
	return strconv.FormatFloat(v, 'f', prec, 64) + " " + unit
}

// gbps is bytes per nanosecond-per-op as GB/s (10^9 bytes per second),
// or as MB/s with three significant digits below 1 GB/s.
func gbps(bytes int64, ns float64) string {
	if ns <= 0 {
		return "?"
	}
	if v := float64(bytes) / ns; v < 1 {
		return strconv.FormatFloat(v*1e3, 'g', 3, 64) + " MB/s"
	}
	return strconv.FormatFloat(float64(bytes)/ns, 'f', 1, 64) + " GB/s"
}

func main() {
	// A process this one started as a raw peer (peer.go) or as a local
	// remote device serves and exits before parsing flags or printing.
	servePeerRole()
	role.ServeDevice()
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// run parses args, runs the chosen suites and writes the results to out.
func run(args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(errOut)
	names := make([]string, 0, len(suites))
	for n := range suites {
		names = append(names, n)
	}
	slices.Sort(names)
	suiteList := fs.String("suite", "host", "comma-separated suites to run: "+strings.Join(names, ", ")+"; all: every suite that can run here")
	format := fs.String("format", "table", "output format: table, tsv or md (markdown tables, as the README shows them)")
	budget := fs.Duration("time", time.Second, "target measuring time of each figure, all rounds together")
	rounds := fs.Int("rounds", 5, "timed rounds per figure; the median is reported")
	plotDir := fs.String("plot", "", "after the suites, write PNG plots of their figures into this directory (created if missing)")
	tsvFile := fs.String("tsv", "", "also write the results in the tsv format to this file")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the suites (go tool pprof) to this file")
	for _, add := range suiteFlags {
		add(fs)
	}
	fs.IntVar(&appsN, "apps-n", appsN, "suite apps: the Jacobi grid's side")
	fs.IntVar(&appsIters, "apps-iters", appsIters, "suite apps: Jacobi iterations")
	fs.IntVar(&appsTiles, "apps-tiles", appsTiles, "suite apps: Cholesky tiles per side")
	fs.IntVar(&appsB, "apps-b", appsB, "suite apps: Cholesky tile side")
	fs.IntVar(&appsCGN, "apps-cg-n", appsCGN, "suite apps: the conjugate gradient's grid side (its matrix has the square of it rows)")
	fs.IntVar(&appsCGIters, "apps-cg-iters", appsCGIters, "suite apps: conjugate gradient iterations")
	devices := fs.String("devices", "", "suites remote, remote-socket and async: measure these devices instead of the suite's own (local:1, local:2), e.g. tcp://HOST:PORT (GOFFLOAD_SECRET set); tcp devices need -peer")
	peerAt := fs.String("peer", "", "suites remote, remote-socket and async: the raw baselines' peer, a bench -serve-peer at HOST:PORT, instead of child processes over socketpairs or shared memory")
	servePeers := fs.String("serve-peer", "", "serve the raw baselines' peers over TCP on HOST:PORT (:PORT for every address) until killed, instead of running suites")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *servePeers != "" {
		if fs.NArg() > 0 {
			return fmt.Errorf("unexpected arguments %q", fs.Args())
		}
		ln, err := net.Listen("tcp", *servePeers)
		if err != nil {
			return fmt.Errorf("-serve-peer: %w", err)
		}
		fmt.Fprintf(out, "bench: serving raw peers on %s (pid %d)\n", ln.Addr(), os.Getpid())
		return servePeersTCP(ln, errOut)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *budget <= 0 {
		return fmt.Errorf("-time %v: want a positive duration", *budget)
	}
	if *rounds < 1 {
		return fmt.Errorf("-rounds %d: want at least 1", *rounds)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		defer pprof.StopCPUProfile()
	}
	if err := jacobi.CheckSize(appsN, appsIters); err != nil {
		return fmt.Errorf("-apps-n %d -apps-iters %d: %w", appsN, appsIters, err)
	}
	if err := cholesky.CheckSize(appsTiles, appsB); err != nil {
		return fmt.Errorf("-apps-tiles %d -apps-b %d: %w", appsTiles, appsB, err)
	}
	if err := cg.CheckSize(appsCGN, appsCGIters); err != nil {
		return fmt.Errorf("-apps-cg-n %d -apps-cg-iters %d: %w", appsCGN, appsCGIters, err)
	}
	var p printer
	switch *format {
	case "table":
		p = &tablePrinter{w: out}
	case "tsv":
		p = tsvPrinter{w: out}
	case "md":
		p = &mdPrinter{w: out}
	default:
		return fmt.Errorf("-format %q: want table, tsv or md", *format)
	}
	var chosen, skipped []string
	skippedWhy := map[string]string{} // suite -> why -suite all skipped it
	for _, n := range strings.Split(*suiteList, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if n == "all" {
			for _, m := range names {
				if why := skipReason(m, suites[m]); why != "" {
					skipped = append(skipped, fmt.Sprintf("suite %s skipped: %s", m, why))
					skippedWhy[m] = why
				} else if !slices.Contains(chosen, m) {
					chosen = append(chosen, m)
				}
			}
			continue
		}
		if _, ok := suites[n]; !ok {
			return fmt.Errorf("unknown suite %q; known suites: %s", n, strings.Join(names, ", "))
		}
		if why := skipReason(n, suites[n]); why != "" {
			return fmt.Errorf("suite %s cannot run here: %s", n, why)
		}
		if !slices.Contains(chosen, n) {
			chosen = append(chosen, n)
		}
	}
	if len(chosen) == 0 {
		return fmt.Errorf("-suite %q names no suite; known suites: %s", *suiteList, strings.Join(names, ", "))
	}
	if err := checkDeviceFlags(*devices, *peerAt, chosen); err != nil {
		return err
	}
	if *plotDir != "" {
		if err := os.MkdirAll(*plotDir, 0o755); err != nil {
			return fmt.Errorf("-plot: %w", err)
		}
	}

	if *tsvFile != "" {
		f, err := os.Create(*tsvFile)
		if err != nil {
			return fmt.Errorf("-tsv: %w", err)
		}
		defer f.Close()
		p = printers{p, tsvPrinter{w: f}}
	}
	p.start(fmt.Sprintf("suites %s, %s %s/%s, GOMAXPROCS=%d, -time %v, -rounds %d",
		strings.Join(chosen, ","), runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), *budget, *rounds))
	env := &Env{Budget: *budget, Rounds: *rounds, Peer: *peerAt, override: *devices, out: p}
	for _, why := range skipped {
		env.Comment("%s", why)
	}
	for _, n := range chosen {
		if err := runSuite(env, n, suites[n]); err != nil {
			return fmt.Errorf("suite %s: %w", n, err)
		}
	}
	if *plotDir != "" {
		if err := writePlots(env, *plotDir, chosen, skippedWhy); err != nil {
			return fmt.Errorf("-plot %s: %w", *plotDir, err)
		}
	}
	return nil
}

// checkDeviceFlags checks -devices and -peer against the chosen suites:
// they apply to Remote suites only, and tcp devices need a peer on their
// machine for the raw baselines (a child process here would measure this
// machine's sockets instead).
func checkDeviceFlags(devices, peerAt string, chosen []string) error {
	if devices == "" && peerAt == "" {
		return nil
	}
	if !slices.ContainsFunc(chosen, func(n string) bool { return suites[n].Remote }) {
		return fmt.Errorf("-devices and -peer apply to suites remote, remote-socket and async, and -suite %s runs none of them", strings.Join(chosen, ","))
	}
	if peerAt != "" {
		if _, _, err := net.SplitHostPort(peerAt); err != nil {
			return fmt.Errorf("-peer %q: want HOST:PORT: %w", peerAt, err)
		}
	}
	if strings.Contains(devices, "tcp://") && peerAt == "" {
		return fmt.Errorf("-devices %q: tcp devices need -peer HOST:PORT, a bench -serve-peer on the devices' machine, for the raw baselines", devices)
	}
	return nil
}

// describeDevicesOf checks that devices 0..n-1 are of one of kinds (want
// names them in the error: "a remote device") and says what they are in
// comments.
func describeDevicesOf(env *Env, n int, want string, kinds ...string) error {
	if have := offload.NumDevices(); have < n {
		return fmt.Errorf("%d device(s) of %q, want at least %d", have, env.Devices, n)
	}
	for d := range n {
		info, err := offload.On(d).Info()
		if err != nil {
			return err
		}
		if !slices.Contains(kinds, info.Kind) {
			return fmt.Errorf("device %d is a %q device, want %s", d, info.Kind, want)
		}
		env.Comment("device %d: %s (%s), %d cores, pid %d", d, info.Kind, info.Name, info.Cores, info.PID)
	}
	return nil
}

// runSuite starts the runtime with the suite's devices (a Remote suite's
// are -devices, when given) and environment, runs the suite and stops the
// runtime.
// MANDATORY offload makes an unavailable device an error instead of a
// silent measurement of the initial device.
func runSuite(env *Env, name string, s Suite) (err error) {
	env.Devices = s.Devices
	from := ""
	if s.Remote && env.override != "" {
		env.Devices = env.override
		from = fmt.Sprintf(" (-devices, instead of the suite's %q)", s.Devices)
	}
	defer setEnv(s.Env)() // after Stop
	if err := offload.Start(offload.WithDevices(env.Devices), offload.WithOffload("MANDATORY")); err != nil {
		return err
	}
	defer func() { err = errors.Join(err, offload.Stop()) }()
	env.Comment("suite %s: devices %q%s, %d device(s)%s", name, env.Devices, from, offload.NumDevices(), envNote(s.Env))
	if s.Remote {
		env.Comment("suite %s: raw baselines' peer: %s", name, env.peerWhere())
	}
	start := time.Now()
	err = s.Run(env)
	env.Comment("suite %s: %.1f s", name, time.Since(start).Seconds())
	return err
}

// setEnv sets the environment vars says and returns what restores each as
// it was.
func setEnv(vars map[string]string) (restore func()) {
	var undo []func()
	for k, v := range vars {
		if old, ok := os.LookupEnv(k); ok {
			undo = append(undo, func() { os.Setenv(k, old) })
		} else {
			undo = append(undo, func() { os.Unsetenv(k) })
		}
		os.Setenv(k, v)
	}
	return func() {
		for _, u := range undo {
			u()
		}
	}
}

// envNote writes a suite's environment for its comment line: ", with
// GOFFLOAD_LOCAL_LINK=socket", or "" for none.
func envNote(vars map[string]string) string {
	if len(vars) == 0 {
		return ""
	}
	kv := make([]string, 0, len(vars))
	for k, v := range vars {
		kv = append(kv, k+"="+v)
	}
	slices.Sort(kv)
	return ", with " + strings.Join(kv, " ")
}
