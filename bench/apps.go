package main

import (
	"fmt"
	"runtime"
	"time"

	"github.com/goffload/offload"
	"github.com/goffload/offload/examples/apps/cg"
	"github.com/goffload/offload/examples/apps/cholesky"
	"github.com/goffload/offload/examples/apps/jacobi"
)

// Suite apps: real workloads on two local device processes, each timed
// against the same work on one of them and against plain goroutines on this
// machine, and checked cell by cell against the plain-Go result every round.
//
//   - apps.jacobi_2dev_vs_1dev: Jacobi iteration (examples/apps/jacobi) on
//     an -apps-n² grid for -apps-iters iterations, row blocks on devices 0
//     and 1 with halo rows device to device, against device 0 alone.
//     Goal: ≤ 0.59 (two devices at least 1.7× as fast as one).
//   - apps.jacobi_2dev_vs_goroutines: the same against plain goroutines
//     (GOMAXPROCS of them).
//   - apps.jacobi_2dev_recorded_vs_goroutines and
//     apps.jacobi_2dev_recorded_vs_unrecorded: the same iteration recorded
//     once per parity as an offload.Taskgraph and replayed
//     (jacobi.SolveRecorded), against plain goroutines and against Solve.
//   - apps.jacobi_any_vs_hand: the same iteration with every task an
//     Any-task (jacobi.SolveAny: a band per device and iteration, the
//     runtime placing them and moving the halo rows) against Solve's hand
//     placement, each timed from the call to its end with the grid back in
//     the program's memory. Goal: ≤ 1.1.
//   - apps.cholesky_vs_goroutines: tiled Cholesky (examples/apps/cholesky)
//     of -apps-tiles² tiles of -apps-b² on devices 0 and 1 against a
//     goroutine fork-join version of the same tile operations. Goal: ≤ 1.5.
//   - apps.cholesky_any_vs_hand: the same factorization with every task an
//     Any-task (cholesky.FactorAny: the runtime places the tasks and moves
//     the tiles) against Factor's hand placement, each timed from the call
//     to its end with the tiles back in the program's memory. Goal: ≤ 1.1.
//   - apps.cholesky_uneven_any_vs_rr and apps.cholesky_uneven_any_vs_hand:
//     the same with the two devices of unequal speed, against round robin
//     and the best hand placement (appsuneven.go).
//   - apps.cholesky_any_killed_vs_clean and
//     apps.cholesky_any_stopped_vs_clean: FactorAny with device 1's
//     process SIGKILLed or SIGSTOPped halfway, against FactorAny without a
//     fault, each on a runtime of its own (appsfault.go). Goal: ≤ 2.
//   - apps.cg_local1_vs_host: the conjugate gradient method
//     (examples/apps/cg) on the 2-D Poisson matrix of an -apps-cg-n² grid
//     (5-point Laplacian in CSR form, -apps-cg-n² rows), -apps-cg-iters
//     iterations, matrix and vectors kept on the device, on one device
//     process with every core (local:1) against the same on the host
//     device (the runtime's CPU device in this process). For it the suite
//     restarts the runtime with "local:1,host", rounds alternating between
//     the two, and starts its own devices again afterwards; x is checked
//     against a plain-Go run of the same iterations after every solve.
//     Goal: ≤ 1.15.
//   - apps.cg_local1_recorded_vs_host: the same with the iteration
//     recorded once and replayed (cg.SolveRecorded: the step sizes are made
//     on the device, so the iterations are queued at once and nothing comes
//     back between them), on both devices. Goal: ≤ 1.1.
//     apps.cg_local1_recorded_vs_unrecorded: recorded against unrecorded
//     on the device process.
//
// Times are of the iterations only (from the first enqueued task to the
// last one's end), not of moving the grid onto the devices and back.
func init() { register("apps", Suite{Devices: appsDevices, Run: runApps}) }

// The apps suite's sizes: -apps-n, -apps-iters, -apps-tiles, -apps-b,
// -apps-cg-n, -apps-cg-iters.
var (
	appsN       = 2048
	appsIters   = 200
	appsTiles   = 8
	appsB       = 128
	appsCGN     = 512
	appsCGIters = 50
)

const (
	appsDevices = "local:2"
	// cgDevices are the devices of apps.cg_local1_vs_host: a device
	// process with every core, and the host device.
	cgDevices = "local:1,host"
)

func runApps(env *Env) error {
	if offload.NumDevices() < 2 {
		return fmt.Errorf("the apps suite needs two devices, has %d", offload.NumDevices())
	}
	two := []offload.Device{offload.On(0), offload.On(1)}
	n, iters := appsN, appsIters
	env.Comment("apps.jacobi_*: %d² grid, %d iterations; %d rounds, median; each round checked against plain Go", n, iters, max(env.Rounds, 1))
	var t2, t1, tg, tr []float64
	for round := range max(env.Rounds, 1) + 1 { // the first round warms up
		want, goTime := jacobi.Reference(n, iters)
		times := make([]time.Duration, 2)
		for i, devs := range [][]offload.Device{two, two[:1]} {
			grid, t, err := jacobi.Solve(devs, n, iters)
			if err != nil {
				return err
			}
			if err := jacobi.Check(grid, want, n); err != nil {
				return fmt.Errorf("on %d device(s): %w", len(devs), err)
			}
			times[i] = t
		}
		grid, trec, err := jacobi.SolveRecorded(two, n, iters)
		if err != nil {
			return err
		}
		if err := jacobi.Check(grid, want, n); err != nil {
			return fmt.Errorf("recorded: %w", err)
		}
		if round > 0 {
			tr = append(tr, float64(trec.Nanoseconds()))
			t2 = append(t2, float64(times[0].Nanoseconds()))
			t1 = append(t1, float64(times[1].Nanoseconds()))
			tg = append(tg, float64(goTime.Nanoseconds()))
		}
	}
	m2, m1, mg, mr := median(t2), median(t1), median(tg), median(tr)
	env.Report(Result{Metric: "apps.jacobi_2dev_vs_1dev", Goffload: m2, Baseline: m1,
		Note: fmt.Sprintf("%d² × %d: devices 0,1 vs device 0 alone (goal ≤ 0.59)", n, iters)})
	env.Report(Result{Metric: "apps.jacobi_2dev_vs_goroutines", Goffload: m2, Baseline: mg,
		Note: fmt.Sprintf("%d² × %d: devices 0,1 vs plain goroutines", n, iters)})
	env.Report(Result{Metric: "apps.jacobi_2dev_recorded_vs_goroutines", Goffload: mr, Baseline: mg,
		Note: fmt.Sprintf("%d² × %d: devices 0,1, each parity's iteration recorded once and replayed, vs plain goroutines (goal ≤ 1.0)", n, iters)})
	env.Report(Result{Metric: "apps.jacobi_2dev_recorded_vs_unrecorded", Goffload: mr, Baseline: m2,
		Note: fmt.Sprintf("%d² × %d: devices 0,1, recorded and replayed vs the same tasks made each iteration", n, iters)})
	if err := appsJacobiAny(env, two); err != nil {
		return err
	}
	return appsCholesky(env, two)
}

// appsJacobiAny times Jacobi with Any-tasks (one band per device) against
// the hand placement on devs, each from the call to its end with the grid
// back in the program's memory, in alternating rounds, checking the grid.
func appsJacobiAny(env *Env, devs []offload.Device) error {
	if offload.NumDevices() != len(devs) {
		env.Comment("apps.jacobi_any_vs_hand: left out (Any() places on every device: %d, the hand placement uses %d)", offload.NumDevices(), len(devs))
		return nil
	}
	n, iters := appsN, appsIters
	want, _ := jacobi.Reference(n, iters)
	var ta, th []float64
	for round := range max(env.Rounds, 1) + 1 { // the first round warms up
		var times [2]time.Duration
		for i, solve := range []func() ([]float64, error){
			func() ([]float64, error) { g, _, err := jacobi.SolveAny(len(devs), n, iters); return g, err },
			func() ([]float64, error) { g, _, err := jacobi.Solve(devs, n, iters); return g, err },
		} {
			t0 := time.Now()
			grid, err := solve()
			if err != nil {
				return err
			}
			times[i] = time.Since(t0)
			if err := jacobi.Check(grid, want, n); err != nil {
				return err
			}
		}
		if round > 0 {
			ta = append(ta, float64(times[0].Nanoseconds()))
			th = append(th, float64(times[1].Nanoseconds()))
		}
	}
	env.Report(Result{Metric: "apps.jacobi_any_vs_hand", Goffload: median(ta), Baseline: median(th),
		Note: fmt.Sprintf("%d² × %d: Any() bands on devices 0,1 vs Solve's hand placement (blocks, halo copies), each with its copies in and out (goal ≤ 1.1)", n, iters)})
	return nil
}

// appsCholesky times the tiled Cholesky factorization on devs against the
// goroutine fork-join version, checking L every round.
func appsCholesky(env *Env, devs []offload.Device) error {
	tiles, b := appsTiles, appsB
	var tc, tg []float64
	tasks := 0
	for round := range max(env.Rounds, 1) + 1 { // the first round warms up
		want := cholesky.NewMatrix(tiles, b)
		goTime := cholesky.Reference(want, runtime.GOMAXPROCS(0))
		m := cholesky.NewMatrix(tiles, b)
		n, t, err := cholesky.Factor(devs, m)
		if err != nil {
			return err
		}
		if err := cholesky.Check(m, want); err != nil {
			return err
		}
		tasks = n
		if round > 0 {
			tc = append(tc, float64(t.Nanoseconds()))
			tg = append(tg, float64(goTime.Nanoseconds()))
		}
	}
	env.Report(Result{Metric: "apps.cholesky_vs_goroutines", Goffload: median(tc), Baseline: median(tg),
		Note: fmt.Sprintf("n=%d in %d×%d tiles, %d tasks on devices 0,1 vs goroutine fork-join (goal ≤ 1.5)", tiles*b, tiles, tiles, tasks)})
	if err := appsCholeskyAny(env, devs); err != nil {
		return err
	}
	if err := appsCholeskyUneven(env); err != nil {
		return err
	}
	if err := appsCholeskyFault(env); err != nil {
		return err
	}
	return appsCG(env)
}

// appsCholeskyAny times the factorization with Any-tasks against the hand
// placement, each from the call to its end with the tiles back in the
// program's memory, in alternating rounds, checking L every round.
func appsCholeskyAny(env *Env, devs []offload.Device) error {
	if offload.NumDevices() != len(devs) {
		env.Comment("apps.cholesky_any_vs_hand: left out (Any() places on every device: %d, the hand placement uses %d)", offload.NumDevices(), len(devs))
		return nil
	}
	tiles, b := appsTiles, appsB
	var ta, th []float64
	for round := range max(env.Rounds, 1) + 1 { // the first round warms up
		want := cholesky.NewMatrix(tiles, b)
		cholesky.Reference(want, runtime.GOMAXPROCS(0))
		var times [2]time.Duration
		for i, factor := range []func(*cholesky.Matrix) error{
			func(m *cholesky.Matrix) error { _, _, err := cholesky.FactorAny(m); return err },
			func(m *cholesky.Matrix) error { _, _, err := cholesky.Factor(devs, m); return err },
		} {
			m := cholesky.NewMatrix(tiles, b)
			t0 := time.Now()
			if err := factor(m); err != nil {
				return err
			}
			times[i] = time.Since(t0)
			if err := cholesky.Check(m, want); err != nil {
				return err
			}
		}
		if round > 0 {
			ta = append(ta, float64(times[0].Nanoseconds()))
			th = append(th, float64(times[1].Nanoseconds()))
		}
	}
	env.Report(Result{Metric: "apps.cholesky_any_vs_hand", Goffload: median(ta), Baseline: median(th),
		Note: fmt.Sprintf("n=%d in %d×%d tiles: Any() on devices 0,1 vs Factor's hand placement (row owners, replicas), each with its copies in and out (goal ≤ 1.1)", tiles*b, tiles, tiles)})
	return nil
}

// appsCG times the conjugate gradient on a local:1 device against the host
// device, on a runtime restarted with cgDevices, checking x after every
// solve.
func appsCG(env *Env) error {
	n, iters := appsCGN, appsCGIters
	want, goTime, err := cg.Reference(n, iters)
	if err != nil {
		return err
	}
	return withDevices(cgDevices, suiteDevices(env, appsDevices), func() error {
		var cores [2]int
		for d, kind := range []string{"local", "host"} {
			info, err := offload.On(d).Info()
			if err != nil {
				return err
			}
			if info.Kind != kind {
				return fmt.Errorf("device %d of %q is a %q device, want a %s device", d, cgDevices, info.Kind, kind)
			}
			cores[d] = info.Cores
		}
		env.Comment("apps.cg_local1_vs_host: runtime restarted with devices %q: device 0 a device process with %d cores, device 1 the host device with %d; %d² grid (%d rows, %d nonzeros), %d iterations, each of 3 synchronous kernels (SpMV with p·Ap, axpys with r·r, p = r + βp), two of them bringing one number back; plain Go on one goroutine: %s",
			cgDevices, cores[0], cores[1], n, n*n, 5*n*n-4*n, iters, human(float64(goTime.Nanoseconds())))
		solver := func(f func(offload.Device, int, int) ([]float64, time.Duration, error), d int) func() (time.Duration, error) {
			return func() (time.Duration, error) {
				x, t, err := f(offload.On(d), n, iters)
				if err != nil {
					return 0, err
				}
				if err := cg.Check(x, want); err != nil {
					return 0, fmt.Errorf("on device %d: %w", d, err)
				}
				return t, nil
			}
		}
		// The four alternate, round by round: unrecorded and recorded,
		// on the device process and on the host device.
		t, err := env.CompareSelfTimed(solver(cg.Solve, 0), solver(cg.Solve, 1), solver(cg.SolveRecorded, 0), solver(cg.SolveRecorded, 1))
		if err != nil {
			return err
		}
		env.Report(Result{Metric: "apps.cg_local1_vs_host", Goffload: t[0], Baseline: t[1],
			Note: fmt.Sprintf("%d² Poisson, %d iterations: local:1 device (%d cores) vs host device (%d) (goal ≤ 1.15)", n, iters, cores[0], cores[1])})
		env.Report(Result{Metric: "apps.cg_local1_recorded_vs_host", Goffload: t[2], Baseline: t[3],
			Note: fmt.Sprintf("%d² Poisson, %d iterations, the iteration recorded once and replayed (cg.SolveRecorded: step sizes made on the device, nothing back between iterations): local:1 device vs host device (goal ≤ 1.1)", n, iters)})
		env.Report(Result{Metric: "apps.cg_local1_recorded_vs_unrecorded", Goffload: t[2], Baseline: t[0],
			Note: fmt.Sprintf("%d² Poisson, %d iterations on the local:1 device: recorded iteration vs three synchronous kernels an iteration", n, iters)})
		return nil
	})
}
