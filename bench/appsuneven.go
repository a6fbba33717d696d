package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/goffload/offload"
	"github.com/goffload/offload/examples/apps/cholesky"
	"github.com/goffload/offload/tool"
)

// The apps suite's Cholesky on devices of unequal speed: its two local
// device processes, each of one core (started with GOMAXPROCS=1: a device
// process runs kernels of several queues at once, on as many cores as its
// Go runtime has), the second also held to -apps-slow-share (0.5) of a CPU
// by the kernel's CPU bandwidth controller (a cgroup of its own:
// cpuLimit). A device of one core beside one of half a core, as on a
// machine whose other tenants take half of its core.
//
//   - apps.cholesky_uneven_any_vs_rr: cholesky.FactorAny (the runtime
//     places the tasks, learning each kernel's time on each device)
//     against the same task graph placed round robin (cholesky.RoundRobin:
//     the tiles dealt to the devices in turn, each task on its tile's
//     device), each from the call to its end with the tiles back. Goal:
//     ≤ 1/1.3 ≈ 0.77 (Any() at least 1.3× as fast).
//   - apps.cholesky_uneven_any_vs_hand: the same against the best of the
//     hand placements that know the speeds: rows dealt by work divided by
//     each device's speed (cholesky.ByRows) with the speed ratio measured
//     before the rounds (gemms in a row on each device alone), with that ratio
//     made a quarter smaller and larger, and with equal speeds (Factor's
//     own placement), and device 0 alone (the slower device left out);
//     each one's median over the rounds, the least taken.
//     Goal: ≤ 1.1.
//
// Both are left out, with the reason, where the suite's devices are not
// its own (-devices) or no cgroup can be made (not root, no cpu
// controller).
var appsSlowShare = 0.5

func init() {
	suiteFlags = append(suiteFlags, func(fs *flag.FlagSet) {
		fs.Float64Var(&appsSlowShare, "apps-slow-share", appsSlowShare, "suite apps: the share of its one core the second device is held to for apps.cholesky_uneven_* (0 to 1)")
	})
}

// appsCholeskyUneven measures the two rows on a runtime restarted with the
// suite's devices and a kernel counter (a fresh placement model, which
// learns the devices' speeds from the first round), and starts the
// suite's devices again afterwards.
func appsCholeskyUneven(env *Env) (err error) {
	if devices := suiteDevices(env, appsDevices); devices != appsDevices {
		env.Comment("apps.cholesky_uneven_*: left out: they hold the second of the suite's own devices (%s) to part of a CPU, and -devices %q measures others", appsDevices, devices)
		return nil
	}
	if !(appsSlowShare > 0 && appsSlowShare <= 1) {
		return fmt.Errorf("-apps-slow-share %g: want more than 0, at most 1", appsSlowShare)
	}
	defer func() {
		if rerr := restart(appsDevices); err == nil && rerr != nil {
			err = fmt.Errorf("starting the suite's devices %q again: %w", appsDevices, rerr)
		}
	}()
	if err := offload.Stop(); err != nil {
		return err
	}
	kernels := &launchCounter{}
	if err := startOneCore(offload.WithDevices(appsDevices), offload.WithOffload("MANDATORY"), offload.WithTool(kernels)); err != nil {
		return fmt.Errorf("restarting with devices %q: %w", appsDevices, err)
	}
	if offload.NumDevices() != 2 {
		return fmt.Errorf("%q made %d devices, want 2", appsDevices, offload.NumDevices())
	}
	var pids [2]int
	for d := range pids {
		info, err := offload.On(d).Info()
		if err != nil {
			return err
		}
		pids[d] = info.PID
	}
	lim, err := limitCPU(pids[1], appsSlowShare)
	if err != nil {
		env.Comment("apps.cholesky_uneven_*: left out: %v", err)
		return nil
	}
	defer func() {
		if cerr := lim.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	return appsUnevenRounds(env, kernels, pids)
}

// startOneCore starts the runtime with opts, its device processes with
// GOMAXPROCS=1 (they inherit this process's environment, which is as it
// was again afterwards).
func startOneCore(opts ...offload.Option) error {
	old, had := os.LookupEnv("GOMAXPROCS")
	os.Setenv("GOMAXPROCS", "1")
	defer func() {
		if had {
			os.Setenv("GOMAXPROCS", old)
		} else {
			os.Unsetenv("GOMAXPROCS")
		}
	}()
	return offload.Start(opts...)
}

// appsUnevenRounds runs the rounds of the two rows; devices 0 and 1
// (processes pids) have one core each, device 1 held to appsSlowShare of
// it.
func appsUnevenRounds(env *Env, kernels *launchCounter, pids [2]int) error {
	tiles, b := appsTiles, appsB
	devs := []offload.Device{offload.On(0), offload.On(1)}
	ratio, gemm, err := gemmSpeeds(devs, b)
	if err != nil {
		return err
	}
	env.Comment("apps.cholesky_uneven_*: n=%d in %d×%d tiles on devices 0,1 of %q, processes of one core (GOMAXPROCS=1; pids %d and %d), device 1 held to %g of it (period %v): %d² gemms in a row take %s each on device 0, %s on device 1 (speed ratio %.2f)",
		tiles*b, tiles, tiles, appsDevices, pids[0], pids[1], appsSlowShare, cpuPeriod(appsSlowShare), b, human(gemm[0]), human(gemm[1]), ratio)

	// The hand placements, told the speeds (and told them a quarter off
	// either way, and equal): the distinct ones.
	type hand struct {
		name  string
		devs  []offload.Device
		owner cholesky.Owners
		times []float64
	}
	var hands []*hand
	seen := map[string]bool{}
	for _, r := range []float64{ratio, ratio * 0.75, min(ratio/0.75, 1), 1} {
		o := cholesky.ByRows(tiles, []float64{1, r})
		rows := ownersKey(o, tiles)
		if seen[rows] {
			continue
		}
		seen[rows] = true
		hands = append(hands, &hand{name: fmt.Sprintf("ByRows 1:%.2f (rows %s)", r, rows), devs: devs, owner: o})
	}
	// And the slower device left out (no replicas made there either).
	hands = append(hands, &hand{name: "device 0 alone", devs: devs[:1], owner: func(int, int) int { return 0 }})
	var ta, trr []float64
	var anyOn [2]int
	for round := range max(env.Rounds, 1) + 1 { // the first round warms up (and teaches the model)
		want := cholesky.NewMatrix(tiles, b)
		cholesky.Reference(want, runtime.GOMAXPROCS(0))
		timed := func(factor func(*cholesky.Matrix) error) (float64, error) {
			m := cholesky.NewMatrix(tiles, b)
			runtime.GC()
			t0 := time.Now()
			if err := factor(m); err != nil {
				return 0, err
			}
			t := time.Since(t0)
			return float64(t.Nanoseconds()), cholesky.Check(m, want)
		}
		before := kernels.snapshot()
		a, err := timed(func(m *cholesky.Matrix) error { _, _, err := cholesky.FactorAny(m); return err })
		if err != nil {
			return fmt.Errorf("FactorAny: %w", err)
		}
		after := kernels.snapshot()
		rr, err := timed(func(m *cholesky.Matrix) error {
			_, _, err := cholesky.FactorOn(devs, m, cholesky.RoundRobin(2))
			return err
		})
		if err != nil {
			return fmt.Errorf("round robin: %w", err)
		}
		for _, h := range hands {
			t, err := timed(func(m *cholesky.Matrix) error { _, _, err := cholesky.FactorOn(h.devs, m, h.owner); return err })
			if err != nil {
				return fmt.Errorf("%s: %w", h.name, err)
			}
			if round > 0 {
				h.times = append(h.times, t)
			}
		}
		if round > 0 {
			ta, trr = append(ta, a), append(trr, rr)
			for d := range anyOn {
				anyOn[d] += after[d] - before[d]
			}
		}
	}
	best := hands[0]
	var each []string
	for _, h := range hands {
		if median(h.times) < median(best.times) {
			best = h
		}
		each = append(each, fmt.Sprintf("%s %s", h.name, human(median(h.times))))
	}
	env.Comment("apps.cholesky_uneven_*: medians: Any() %s (%d of its %d kernels on device 1), round robin %s; hand placements: %s",
		human(median(ta)), anyOn[1], anyOn[0]+anyOn[1], human(median(trr)), strings.Join(each, ", "))
	env.Report(Result{Metric: "apps.cholesky_uneven_any_vs_rr", Goffload: median(ta), Baseline: median(trr),
		Note: fmt.Sprintf("n=%d in %d×%d tiles, devices of 1 and %g core: Any() vs tiles dealt round robin, each with its copies in and out (goal ≤ 0.77)", tiles*b, tiles, tiles, appsSlowShare)})
	env.Report(Result{Metric: "apps.cholesky_uneven_any_vs_hand", Goffload: median(ta), Baseline: median(best.times),
		Note: fmt.Sprintf("the same: Any() vs the best hand placement, %s (goal ≤ 1.1)", best.name)})
	return nil
}

// gemmSpeeds times b×b gemms on each of devs alone, eight in a row on
// tiles mapped in a data region (long enough for a device held to part of
// a CPU to be held back: its speed when it is busy, not after it was
// idle), the median of three such runs after one to warm up, and returns
// device 1's speed relative to device 0's and the two times per gemm in
// nanoseconds.
func gemmSpeeds(devs []offload.Device, b int) (ratio float64, ns [2]float64, err error) {
	const inARow = 8
	a, bt, c := make([]float64, b*b), make([]float64, b*b), make([]float64, b*b)
	for i := range a {
		a[i], bt[i] = float64(i%7)/7, float64(i%5)/5
	}
	var times [2][]float64
	for d, dev := range devs[:2] {
		if err := dev.EnterData(offload.To(a), offload.To(bt), offload.To(c)); err != nil {
			return 0, ns, err
		}
		for round := range 4 {
			t0 := time.Now()
			for range inARow {
				if err := cholesky.Gemm.Run(dev, a, bt, c, b); err != nil {
					dev.ExitData(offload.Delete(a), offload.Delete(bt), offload.Delete(c))
					return 0, ns, fmt.Errorf("timing gemms on device %d: %w", d, err)
				}
			}
			if round > 0 {
				times[d] = append(times[d], float64(time.Since(t0).Nanoseconds())/inARow)
			}
		}
		if err := dev.ExitData(offload.Delete(a), offload.Delete(bt), offload.Delete(c)); err != nil {
			return 0, ns, err
		}
	}
	ns = [2]float64{median(times[0]), median(times[1])}
	return ns[0] / ns[1], ns, nil
}

// ownersKey is the devices of a placement's rows, as "0101…": the same
// for placements that are the same.
func ownersKey(o cholesky.Owners, tiles int) string {
	var s strings.Builder
	for i := range tiles {
		fmt.Fprint(&s, o(i, 0))
	}
	return s.String()
}

// launchCounter is a Tool that counts kernel launches per device.
type launchCounter struct {
	mu sync.Mutex
	n  [2]int
}

func (c *launchCounter) TargetBegin(tool.TargetEvent) {}
func (c *launchCounter) TargetEnd(tool.TargetEvent)   {}
func (c *launchCounter) DataOp(tool.DataEvent)        {}
func (c *launchCounter) Wait(tool.WaitEvent)          {}
func (c *launchCounter) KernelLaunch(e tool.KernelEvent) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e.Device >= 0 && e.Device < len(c.n) {
		c.n[e.Device]++
	}
}

func (c *launchCounter) snapshot() [2]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}
