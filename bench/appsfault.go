package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/goffload/offload"
	"github.com/goffload/offload/examples/apps/cholesky"
	"github.com/goffload/offload/tool"
)

// The apps suite's Cholesky with a device lost halfway through: issue 31's
// "a lost device's Any-tasks run again elsewhere", on local:2.
//
//   - apps.cholesky_any_killed_vs_clean: cholesky.FactorAny with device 1's
//     process SIGKILLed once half of the factorization's kernel tasks have
//     ended (a Tool counts them, on both devices, and sends the signal from
//     the event), against FactorAny without a fault. Goal: ≤ 2.
//   - apps.cholesky_any_stopped_vs_clean: the same with device 1's process
//     SIGSTOPped, so that it is lost only once GOFFLOAD_DEVICE_TIMEOUT
//     (-apps-fault-timeout) passes in silence, against FactorAny without a
//     fault under the same timeout. Goal: ≤ 2.
//
// A lost device cannot be used again, so every factorization timed here
// runs on a runtime started afresh for it (with the suite's devices, a
// fresh placement model and a Tool), after one factorization that is not
// timed (it teaches the model the kernels' times, as the runtime of
// apps.cholesky_any_vs_hand has learned them); the times are from the
// call to its end with the tiles back in the program's memory, and leave
// out the start and stop of the runtime. Every factorization is checked
// against the plain-Go one, and a faulted one must have lost device 1.
// The comments break the extra time down: when the fault came, how long
// the loss took to be seen (the first construct on device 1 to fail),
// the re-runs (each a synchronous launch on the program's CPU or the
// device left, several at once), with their summed time, and the outputs
// read from device 0 instead of re-run; and they say what was left
// after each runtime stopped (goroutines, memory, device processes).
// Both rows are left out where the suite's devices are not its own
// (-devices).
var appsFaultTimeout = 300 * time.Millisecond

func init() {
	suiteFlags = append(suiteFlags, func(fs *flag.FlagSet) {
		fs.DurationVar(&appsFaultTimeout, "apps-fault-timeout", appsFaultTimeout, "suite apps: GOFFLOAD_DEVICE_TIMEOUT for apps.cholesky_any_stopped_vs_clean and its baseline (at least 10ms)")
	})
}

// A faultRun is one timed factorization on a fresh runtime: how it was
// hurt, and what its Tool saw.
type faultRun struct {
	sig     syscall.Signal // 0: no fault
	timeout time.Duration  // GOFFLOAD_DEVICE_TIMEOUT, 0 for the default
	elapsed time.Duration
	tool    faultTool
}

// appsCholeskyFault measures the two rows, with runtimes of its own, and
// starts the suite's devices again afterwards.
func appsCholeskyFault(env *Env) (err error) {
	if devices := suiteDevices(env, appsDevices); devices != appsDevices {
		env.Comment("apps.cholesky_any_*_vs_clean: left out: they kill the suite's own device processes (%s), and -devices %q measures others", appsDevices, devices)
		return nil
	}
	if appsFaultTimeout < 10*time.Millisecond {
		return fmt.Errorf("-apps-fault-timeout %v: want at least 10ms", appsFaultTimeout)
	}
	defer func() {
		if rerr := restart(appsDevices); err == nil && rerr != nil {
			err = fmt.Errorf("starting the suite's devices %q again: %w", appsDevices, rerr)
		}
	}()
	if err := offload.Stop(); err != nil {
		return err
	}
	tiles, b := appsTiles, appsB
	want := cholesky.NewMatrix(tiles, b)
	cholesky.Reference(want, runtime.GOMAXPROCS(0))
	kinds := []struct {
		sig     syscall.Signal
		timeout time.Duration
	}{{0, 0}, {syscall.SIGKILL, 0}, {0, appsFaultTimeout}, {syscall.SIGSTOP, appsFaultTimeout}}
	runs := make([][]*faultRun, len(kinds))
	var left []leftOver
	runtime.GC()
	before := leftNow(nil)
	for round := range max(env.Rounds, 1) {
		for i, k := range kinds {
			r := &faultRun{sig: k.sig, timeout: k.timeout}
			pids, err := r.run(want)
			if err != nil {
				return fmt.Errorf("apps.cholesky_any_*_vs_clean, round %d, %s: %w", round+1, r.name(), err)
			}
			runs[i] = append(runs[i], r)
			left = append(left, leftNow(pids[:]))
		}
	}
	tasks := tiles * (tiles + 1) * (tiles + 2) / 6
	env.Comment("apps.cholesky_any_*_vs_clean: n=%d in %d×%d tiles (%d tasks) on %q, each factorization on a runtime started for it after one untimed factorization; device 1's process hurt once %d kernel tasks have ended; %d rounds, medians; load %s",
		tiles*b, tiles, tiles, tasks, appsDevices, tasks/2, max(env.Rounds, 1), loadAvg())
	for i, metric := range []string{"apps.cholesky_any_killed_vs_clean", "apps.cholesky_any_stopped_vs_clean"} {
		clean, hurt := runs[2*i], runs[2*i+1]
		env.Comment("%s", breakdown(metric, clean, hurt))
		timeout := "the default GOFFLOAD_DEVICE_TIMEOUT"
		if t := hurt[0].timeout; t > 0 {
			timeout = "GOFFLOAD_DEVICE_TIMEOUT=" + t.String()
		}
		env.Report(Result{Metric: metric, Goffload: medianOf(hurt, elapsedOf), Baseline: medianOf(clean, elapsedOf),
			Note: fmt.Sprintf("n=%d: Any() with device 1 %s halfway vs without a fault, both under %s (goal ≤ 2)", tiles*b, hurt[0].name(), timeout)})
	}
	env.Comment("apps.cholesky_any_*_vs_clean: %s", leftSummary(before, left))
	return nil
}

// name says how the run was hurt: "SIGKILLed", "SIGSTOPped", "clean".
func (r *faultRun) name() string {
	switch r.sig {
	case syscall.SIGKILL:
		return "SIGKILLed"
	case syscall.SIGSTOP:
		return "SIGSTOPped"
	}
	return "clean"
}

// run starts the runtime with the suite's devices and r's timeout, factors
// once untimed and once timed, hurting device 1 in the timed one if r
// says so, checks both, and stops the runtime. It returns the devices'
// processes.
func (r *faultRun) run(want *cholesky.Matrix) (pids [2]int, err error) {
	vars := map[string]string{}
	if r.timeout > 0 {
		vars["GOFFLOAD_DEVICE_TIMEOUT"] = r.timeout.String()
	}
	restore := setEnv(vars)
	err = offload.Start(offload.WithDevices(appsDevices), offload.WithOffload("MANDATORY"), offload.WithTool(&r.tool),
		offload.WithInfo("placement", &r.tool))
	restore()
	if err != nil {
		return pids, err
	}
	defer func() {
		// A stopped device process is the runtime's to kill (it does
		// when it finds it silent): leftNow counts what Stop leaves.
		if serr := offload.Stop(); err == nil && serr != nil && !errors.Is(serr, offload.ErrDeviceLost) {
			err = fmt.Errorf("stopping the runtime: %w", serr)
		}
	}()
	if offload.NumDevices() != 2 {
		return pids, fmt.Errorf("%q made %d devices, want 2", appsDevices, offload.NumDevices())
	}
	for d := range pids {
		info, err := offload.On(d).Info()
		if err != nil {
			return pids, err
		}
		pids[d] = info.PID
	}
	for timed := range 2 {
		m := cholesky.NewMatrix(want.T, want.B)
		tasks := want.T * (want.T + 1) * (want.T + 2) / 6
		if timed == 1 && r.sig != 0 {
			r.tool.arm(pids[1], r.sig, tasks/2)
		}
		runtime.GC()
		t0 := time.Now()
		r.tool.start(t0)
		if _, _, err := cholesky.FactorAny(m); err != nil {
			return pids, fmt.Errorf("FactorAny (device 1 %s): %w", r.name(), err)
		}
		r.elapsed = time.Since(t0)
		if err := cholesky.Check(m, want); err != nil {
			return pids, fmt.Errorf("device 1 %s: %w", r.name(), err)
		}
	}
	if r.sig != 0 {
		if r.tool.fired.IsZero() {
			return pids, fmt.Errorf("the fault never came: fewer than %d kernel tasks ended", r.tool.at)
		}
		// A construct on device 1 that needs an answer from it fails once
		// its loss is seen (at once for a killed process, after the
		// timeout for a stopped one), also where device 1 had nothing
		// left to do when it was hurt: the placement may have given it
		// nothing after, and the factorization ended before the timeout.
		x := make([]byte, 8)
		if err := offload.On(1).EnterData(offload.To(x)); !errors.Is(err, offload.ErrDeviceLost) {
			if err == nil {
				offload.On(1).ExitData(offload.Delete(x))
			}
			return pids, fmt.Errorf("device 1 after %v: copying 8 bytes to it: %v, want it lost", r.sig, err)
		}
	}
	return pids, nil
}

// faultTool is a Tool that, once armed, hurts a device process with a
// signal when a number of kernel tasks (Any-tasks' kernels, on any
// device) have ended, and keeps what the breakdown needs: when the fault
// came and was seen, and the re-runs (synchronous kernel constructs) and
// restores (the runtime's host tasks) after it. Its methods do not block.
type faultTool struct {
	mu      sync.Mutex
	t0      time.Time // when the factorization was called
	pid     int
	sig     syscall.Signal
	at      int // kernel tasks ended when the fault comes; 0: not armed
	ended   int
	onDev   [2]int    // kernel tasks ended without error per device, of this factorization
	fired   time.Time // when the signal was sent
	seen    time.Time // when the first construct on device 1 failed after it
	begun   map[uint64]time.Time
	reruns  int           // re-runs on devices (a synchronous kernel construct of the runtime's)
	onHost  int           // re-runs on the program's CPU, counted from their info lines (the initial device's constructs have no target events)
	rerunOn [2]int        // re-runs per device
	rerunT  time.Duration // their summed time, begin to end
	lastRun time.Time     // the last re-run's end
	restore int
	read    int // outputs read from a device that still held them, instead of re-run, counted from their info lines
}

// Write counts the re-runs on the host from the runtime's info lines
// (GOFFLOAD_INFO=placement), once the fault came.
func (f *faultTool) Write(p []byte) (int, error) {
	n, read := bytes.Count(p, []byte(" ran again on the host")), bytes.Count(p, []byte(" still holds it as the task left it"))
	if n+read > 0 {
		f.mu.Lock()
		if !f.fired.IsZero() && f.begun != nil {
			f.onHost += n
			f.read += read
			if n > 0 {
				f.lastRun = time.Now() // the line comes at the re-run's end
			}
		}
		f.mu.Unlock()
	}
	return len(p), nil
}

func (f *faultTool) arm(pid int, sig syscall.Signal, at int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pid, f.sig, f.at = pid, sig, at
}

// start begins a factorization's counts.
func (f *faultTool) start(t0 time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.t0, f.ended, f.onDev = t0, 0, [2]int{}
	f.begun = map[uint64]time.Time{}
}

// kernelTask says whether e is the construct of one of the
// factorization's kernels (an Any-task's, or a re-run's).
func kernelTask(e tool.TargetEvent) bool {
	return strings.HasPrefix(e.Name, "target cholesky.")
}

func (f *faultTool) TargetBegin(e tool.TargetEvent) {
	if !kernelTask(e) || e.Nowait {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.begun != nil && !f.fired.IsZero() {
		f.begun[e.Task] = e.Time
	}
}

func (f *faultTool) TargetEnd(e tool.TargetEvent) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.begun == nil {
		return
	}
	if !f.fired.IsZero() && f.seen.IsZero() && e.Device == 1 && e.Err != nil {
		f.seen = e.Time
	}
	if strings.HasPrefix(e.Name, "Any(): restore") && !f.fired.IsZero() {
		f.restore++
	}
	if !kernelTask(e) {
		return
	}
	if !e.Nowait { // a re-run: a synchronous launch of the runtime's
		if b, ok := f.begun[e.Task]; ok {
			delete(f.begun, e.Task)
			f.reruns++
			if e.Device >= 0 && e.Device < len(f.rerunOn) {
				f.rerunOn[e.Device]++
			}
			f.rerunT += e.Time.Sub(b)
			f.lastRun = e.Time
		}
		return
	}
	if e.Err == nil && e.Device >= 0 && e.Device < len(f.onDev) {
		f.onDev[e.Device]++
	}
	if f.ended++; f.ended == f.at && f.pid > 0 && f.fired.IsZero() {
		syscall.Kill(f.pid, f.sig)
		f.fired = time.Now()
	}
}

func (f *faultTool) DataOp(tool.DataEvent)         {}
func (f *faultTool) KernelLaunch(tool.KernelEvent) {}
func (f *faultTool) Wait(tool.WaitEvent)           {}

func elapsedOf(r *faultRun) float64 { return float64(r.elapsed.Nanoseconds()) }

// medianOf is the median of f over runs.
func medianOf(runs []*faultRun, f func(*faultRun) float64) float64 {
	v := make([]float64, len(runs))
	for i, r := range runs {
		v[i] = f(r)
	}
	return median(v)
}

// breakdown says where a faulted factorization's time went, against the
// clean ones: medians over the rounds.
func breakdown(metric string, clean, hurt []*faultRun) string {
	ms := func(runs []*faultRun, f func(*faultRun) time.Duration) string {
		return human(medianOf(runs, func(r *faultRun) float64 { return float64(f(r).Nanoseconds()) }))
	}
	// seen is the median time from the fault to its being seen, of the
	// runs where a construct on device 1 failed during the factorization.
	var seen []*faultRun
	for _, r := range hurt {
		if !r.tool.seen.IsZero() {
			seen = append(seen, r)
		}
	}
	seenAfter := "not during the factorization (device 1 had nothing left to do)"
	if len(seen) > 0 {
		seenAfter = ms(seen, func(r *faultRun) time.Duration { return r.tool.seen.Sub(r.tool.fired) }) + " after it"
	}
	n := func(runs []*faultRun, f func(*faultRun) int) string {
		return strconv.FormatFloat(medianOf(runs, func(r *faultRun) float64 { return float64(f(r)) }), 'f', -1, 64)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: clean %s (kernel tasks on devices 0/1: %s/%s), faulted %s, extra %s; the fault came %s after the call, was seen %s; then %s re-runs on the program's CPU (GOFFLOAD_ANY_RERUN_HOST) and %s on devices (on device 1: %s), several at once, those on devices taking %s together, the last of these ending %s after the fault; %s outputs read from device 0 instead of re-run; %s restores into the program's memory; kernel tasks completed on devices 0/1 %s/%s; all times:",
		metric,
		ms(clean, func(r *faultRun) time.Duration { return r.elapsed }),
		n(clean, func(r *faultRun) int { return r.tool.onDev[0] }), n(clean, func(r *faultRun) int { return r.tool.onDev[1] }),
		ms(hurt, func(r *faultRun) time.Duration { return r.elapsed }),
		human(medianOf(hurt, elapsedOf)-medianOf(clean, elapsedOf)),
		ms(hurt, func(r *faultRun) time.Duration { return r.tool.fired.Sub(r.tool.t0) }),
		seenAfter,
		n(hurt, func(r *faultRun) int { return r.tool.onHost }),
		n(hurt, func(r *faultRun) int { return r.tool.reruns }),
		n(hurt, func(r *faultRun) int { return r.tool.rerunOn[1] }),
		ms(hurt, func(r *faultRun) time.Duration { return r.tool.rerunT }),
		ms(hurt, func(r *faultRun) time.Duration { return r.tool.lastRun.Sub(r.tool.fired) }),
		n(hurt, func(r *faultRun) int { return r.tool.read }),
		n(hurt, func(r *faultRun) int { return r.tool.restore }),
		n(hurt, func(r *faultRun) int { return r.tool.onDev[0] }), n(hurt, func(r *faultRun) int { return r.tool.onDev[1] }))
	for i := range hurt {
		fmt.Fprintf(&b, " %s/%s", human(elapsedOf(clean[i])), human(elapsedOf(hurt[i])))
	}
	return b.String()
}

// leftOver is what this process had after a runtime stopped: its
// goroutines, its resident memory, and which of the runtime's device
// processes still existed.
type leftOver struct {
	goroutines int
	rssKiB     int64
	alive      int
}

// leftNow measures what is left, pids being the stopped runtime's device
// processes.
func leftNow(pids []int) leftOver {
	debug.FreeOSMemory()
	l := leftOver{goroutines: runtime.NumGoroutine(), rssKiB: rssKiB()}
	for _, p := range pids {
		if p > 0 && processExists(p) {
			l.alive++
		}
	}
	return l
}

// processExists says whether process pid exists and has not exited (a
// zombie, exited but not waited for, counts as existing).
func processExists(pid int) bool {
	return syscall.Kill(pid, 0) == nil
}

// rssKiB is this process's resident memory (VmRSS), or -1.
func rssKiB() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return -1
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err == nil {
				return n
			}
		}
	}
	return -1
}

// leftSummary says what the runs left behind.
func leftSummary(before leftOver, left []leftOver) string {
	var g, rss []string
	alive := 0
	for _, l := range left {
		g = append(g, strconv.Itoa(l.goroutines))
		rss = append(rss, strconv.FormatInt(l.rssKiB/1024, 10))
		alive += l.alive
	}
	return fmt.Sprintf("after each stopped runtime (%d, clean and faulted in turn): goroutines %s (%d before the first); resident memory %s MiB (%d before); device processes left %d",
		len(left), strings.Join(g, " "), before.goroutines, strings.Join(rss, " "), before.rssKiB/1024, alive)
}

// loadAvg is the first three fields of /proc/loadavg, or "unknown".
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
