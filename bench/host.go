package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"time"

	"github.com/goffload/offload"
	"github.com/goffload/offload/examples/apps/jacobi"
)

// Suite host: the runtime's own costs on a host device (device 0), whose
// "device memory" is separate Go memory in this process, so the figures are
// the runtime's overhead plus real memory copies and nothing else.
//
// host.stencil_512_vs_goroutines is peer.stencil_512's workload (Jacobi
// iteration, examples/apps/jacobi, on a 512² grid for 100 iterations, the
// grid on device 0 alone) against the same iteration with plain goroutines
// on the same cores (jacobi.Reference: GOMAXPROCS goroutines, one row band
// each, started every iteration); both grids are checked cell by cell
// against plain Go's after every run, times are of the iterations only and
// rounds alternate. It is here rather than in suite peer, which needs LLVM
// and skips without it. Goal: ≤ 1.05.

func init() { register("host", Suite{Devices: "host", Run: runHost}) }

var (
	// benchEmpty is the empty kernel of host.empty_region, and of
	// cuda.empty_launch on a GPU (cuda.ptx's entry empty).
	benchEmpty = offload.MustKernel("bench.empty", func(offload.Ctx) {}).PTX(benchPTX, "empty").OpenCL([]byte(benchEmptyCL), "empty")
	// benchTouch increments the first byte of its buffer: the kernel of the
	// mapping regions, cheap, and enough to check afterwards that the data
	// really went to the device and back the expected number of times.
	benchTouch = offload.MustKernel1("bench.touch", func(_ offload.Ctx, x offload.InOut[byte]) { x[0]++ }).Named("buf")
	// benchSpin spins on the device for ns nanoseconds by its own clock
	// (time.Now in the process that runs it), then writes how long it ran
	// by that clock into took[0] (at least ns: longer where its thread was
	// descheduled at the end): the kernel of the launch_beyond_kernel_*
	// rows, whose took stays present on the device (no copy per launch).
	benchSpin = offload.MustKernel2("bench.spin", func(_ offload.Ctx, ns int64, took offload.Out[int64]) {
		t0 := time.Now()
		for time.Since(t0) < time.Duration(ns) {
		}
		took[0] = int64(time.Since(t0))
	}).Named("", "took")
)

// beyondKernelLengths are the kernel lengths of the launch_beyond_kernel_*
// rows.
var beyondKernelLengths = []time.Duration{10 * time.Microsecond, 100 * time.Microsecond, time.Millisecond, 5 * time.Millisecond}

// beyondName names a kernel length in a launch_beyond_kernel_* metric:
// 10us, 100us, 1ms, 5ms.
func beyondName(d time.Duration) string {
	if d%time.Millisecond == 0 {
		return fmt.Sprintf("%dms", d/time.Millisecond)
	}
	return fmt.Sprintf("%dus", d/time.Microsecond)
}

// launchBeyondKernel reports prefix+"launch_beyond_kernel_LEN" for each
// length of beyondKernelLengths: what a synchronous launch of benchSpin on
// dev takes beyond its kernel (the launch's wall time on the caller less
// the kernel's own run time), the median over every launch of its rounds
// (not a mean per round: a late wake-up is per launch), against the
// median wall time of a synchronous launch of the empty kernel on the same
// device, launched in rounds alternating with the spin's. Goal: ≤ 5 µs at
// every length.
func launchBeyondKernel(env *Env, dev offload.Device, prefix string) error {
	rounds := max(env.Rounds, 1)
	target := env.Budget / time.Duration(rounds)
	took := make([]int64, 1)
	if err := dev.EnterData(offload.Alloc(took).Named("took")); err != nil {
		return err
	}
	defer dev.ExitData(offload.Delete(took).Named("took"))
	// ran is how long the last launch's kernel ran, by its own clock.
	ran := func() (time.Duration, error) {
		err := dev.Update(offload.From(took).Named("took"))
		return time.Duration(took[0]), err
	}
	for i := range 200 { // warm up (and the device's first kernels)
		if err := dev.Run(benchEmpty); err != nil {
			return err
		}
		if i < 20 {
			if err := benchSpin.Run(dev, int64(10*time.Microsecond), took); err != nil {
				return err
			}
		}
	}
	for _, d := range beyondKernelLengths {
		// Launches per round: a round lasts about target, at least 5.
		n := int(min(max(target/(d+20*time.Microsecond), 5), 20000))
		beyond := make([]float64, 0, rounds*n)
		empty := make([]float64, 0, rounds*n)
		for range rounds {
			runtime.GC()
			for range n {
				t0 := time.Now()
				if err := benchSpin.Run(dev, int64(d), took); err != nil {
					return err
				}
				wall := time.Since(t0)
				k, err := ran()
				if err != nil {
					return err
				}
				if k < d {
					return fmt.Errorf("%slaunch_beyond_kernel_%s: the kernel says it ran %v, less than its %v", prefix, beyondName(d), k, d)
				}
				beyond = append(beyond, float64((wall - k).Nanoseconds()))
			}
			runtime.GC()
			for range n {
				t0 := time.Now()
				if err := dev.Run(benchEmpty); err != nil {
					return err
				}
				empty = append(empty, float64(time.Since(t0).Nanoseconds()))
			}
		}
		slices.Sort(beyond)
		slices.Sort(empty)
		env.Report(Result{Metric: prefix + "launch_beyond_kernel_" + beyondName(d), Goffload: max(median(beyond), 1), Baseline: median(empty),
			Note: fmt.Sprintf("synchronous launch of a %v spin kernel, wall time less the kernel's own (p90 %.1f µs, %d launches) vs an empty kernel's launch (goal ≤ 5 µs)",
				d, beyond[len(beyond)*9/10]/1e3, len(beyond))})
	}
	return nil
}

const (
	size64MiB     = 64 << 20
	lookupEntries = 100_000
	sectionBytes  = 16
)

func runHost(env *Env) error {
	dev := offload.On(0)
	info, err := dev.Info()
	if err != nil {
		return err
	}
	if info.Kind != "host" {
		return fmt.Errorf("device 0 is a %q device, want a host device", info.Kind)
	}
	env.Comment("device 0: %s (%s), %d cores", info.Kind, info.Name, info.Cores)

	for _, m := range []func(*Env, offload.Device) error{hostEmptyRegion, hostMapToFrom, hostPresentRegion, hostLookup, hostStencil} {
		if err := m(env, dev); err != nil {
			return err
		}
	}
	return nil
}

// hostEmptyRegion: a synchronous target region with an empty kernel and no
// arguments.
func hostEmptyRegion(env *Env, dev offload.Device) error {
	t, err := env.Measure(func(n int) error {
		for range n {
			if err := dev.Run(benchEmpty); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	env.Report(Result{Metric: "host.empty_region", Goffload: t, Baseline: math.NaN()})
	return launchBeyondKernel(env, dev, "host.")
}

// hostMapToFrom: a target region mapping 64 MiB tofrom: allocate (from the
// host device's pool after the first time), copy in, run, copy out, free.
// The baseline is the same two copies with Go's copy into and out of a
// preallocated buffer.
func hostMapToFrom(env *Env, dev offload.Device) error {
	buf := fill(make([]byte, size64MiB))
	other := make([]byte, size64MiB)
	copy(other, buf) // fault the baseline's pages in before timing
	start := buf[0]
	runs := 0
	region := func(n int) error {
		for range n {
			if err := benchTouch.Run(dev, buf); err != nil {
				return err
			}
		}
		runs += n
		return nil
	}
	baseline := func(n int) error {
		for range n {
			copy(other, buf)
			copy(buf, other)
		}
		return nil
	}
	t, b, err := env.Compare(region, baseline)
	if err != nil {
		return err
	}
	if want := start + byte(runs); buf[0] != want {
		return fmt.Errorf("host.map_tofrom_64MiB: after %d regions buf[0] = %d, want %d: the data did not make the round trip", runs, buf[0], want)
	}
	const moved = 2 * size64MiB
	env.Report(Result{Metric: "host.map_tofrom_64MiB", Goffload: t, Baseline: b,
		Note: fmt.Sprintf("2×64 MiB copied: %s vs %s", gbps(moved, t), gbps(moved, b))})
	return nil
}

// hostPresentRegion: the region of hostMapToFrom while the buffer is
// mapped already (target enter data before), so the region only looks the
// buffer up and moves its reference count.
func hostPresentRegion(env *Env, dev offload.Device) error {
	buf := fill(make([]byte, size64MiB))
	buf[0] = 7
	if err := dev.EnterData(offload.To(buf).Named("buf")); err != nil {
		return err
	}
	runs := 0
	t, err := env.Measure(func(n int) error {
		for range n {
			if err := benchTouch.Run(dev, buf); err != nil {
				return err
			}
		}
		runs += n
		return nil
	})
	if buf[0] != 7 && err == nil {
		err = fmt.Errorf("host.present_region_64MiB: buf[0] changed on the host to %d while the buffer was present: the regions copied back", buf[0])
	}
	if xerr := dev.ExitData(offload.From(buf).Named("buf")); err == nil {
		err = xerr
	}
	if err != nil {
		return err
	}
	if want := 7 + byte(runs); buf[0] != want {
		return fmt.Errorf("host.present_region_64MiB: after %d regions and exit data buf[0] = %d, want %d", runs, buf[0], want)
	}
	if dev.IsPresent(buf) {
		return fmt.Errorf("host.present_region_64MiB: buffer still present after target exit data")
	}
	env.Report(Result{Metric: "host.present_region_64MiB", Goffload: t, Baseline: math.NaN()})
	return nil
}

// hostLookup: omp_target_is_present of a random section while the present
// table holds 10^5 entries, each a separately mapped 16-byte section of one
// host array.
func hostLookup(env *Env, dev offload.Device) error {
	host := make([]byte, lookupEntries*sectionBytes)
	secs := make([]any, lookupEntries) // as interfaces, so the loop does not convert
	maps := make([]offload.Map, 0, 1000)
	flush := func(exit bool) error {
		if len(maps) == 0 {
			return nil
		}
		var err error
		if exit {
			err = dev.ExitData(maps...)
		} else {
			err = dev.EnterData(maps...)
		}
		maps = maps[:0]
		return err
	}
	for i := range lookupEntries {
		s := host[i*sectionBytes : (i+1)*sectionBytes : (i+1)*sectionBytes]
		secs[i] = s
		maps = append(maps, offload.Alloc(s))
		if len(maps) == cap(maps) {
			if err := flush(false); err != nil {
				return err
			}
		}
	}
	if err := flush(false); err != nil {
		return err
	}
	teardown := func() error {
		for _, s := range secs {
			maps = append(maps, offload.Delete(s))
			if len(maps) == cap(maps) {
				if err := flush(true); err != nil {
					return err
				}
			}
		}
		return flush(true)
	}

	rng := rand.New(rand.NewPCG(1, 2))
	idx := make([]int32, 1<<16)
	for i := range idx {
		idx[i] = int32(rng.IntN(lookupEntries))
	}
	next := 0
	t, err := env.Measure(func(n int) error {
		for range n {
			if !dev.IsPresent(secs[idx[next&(len(idx)-1)]]) {
				return fmt.Errorf("host.lookup_1e5: section %d is not present", idx[next&(len(idx)-1)])
			}
			next++
		}
		return nil
	})
	if terr := teardown(); err == nil {
		err = terr
	}
	if err != nil {
		return err
	}
	for _, i := range []int{0, lookupEntries / 2, lookupEntries - 1} {
		if dev.IsPresent(secs[i]) {
			return fmt.Errorf("host.lookup_1e5: section %d still present after target exit data", i)
		}
	}
	env.Report(Result{Metric: "host.lookup_1e5", Goffload: t, Baseline: math.NaN(),
		Note: fmt.Sprintf("omp_target_is_present, %d entries", lookupEntries)})
	return nil
}

// hostStencilIters is host.stencil_512_vs_goroutines' iterations:
// stencilIters, but the tests lower it (under the race detector the 100
// iterations take seconds).
var hostStencilIters = stencilIters

// hostStencil: peer.stencil_512's Jacobi iteration on device 0 against
// plain goroutines.
func hostStencil(env *Env, dev offload.Device) error {
	iters := hostStencilIters
	var want []float64
	if iters == stencilIters {
		want = stencilWant()
	} else {
		want, _ = jacobi.Reference(stencilN, iters)
	}
	t, err := env.CompareSelfTimed(func() (time.Duration, error) {
		grid, t, err := jacobi.Solve([]offload.Device{dev}, stencilN, iters)
		if err == nil {
			err = jacobi.Check(grid, want, stencilN)
		}
		return t, err
	}, func() (time.Duration, error) {
		grid, t := jacobi.Reference(stencilN, iters)
		return t, jacobi.Check(grid, want, stencilN)
	})
	if err != nil {
		return fmt.Errorf("host.stencil_512_vs_goroutines: %w", err)
	}
	env.Report(Result{Metric: "host.stencil_512_vs_goroutines", Goffload: t[0], Baseline: t[1],
		Note: fmt.Sprintf("Jacobi %d² × %d: host device vs %d plain goroutines (goal ≤ 1.05)", stencilN, iters, max(1, min(runtime.GOMAXPROCS(0), stencilN-2)))})
	return nil
}

// fill writes a byte pattern over b (faulting its pages in) and returns it.
// It doubles a copied prefix rather than storing byte by byte, which is slow
// under the race detector.
func fill(b []byte) []byte {
	for i := 0; i < min(len(b), 251); i++ {
		b[i] = byte(i)
	}
	for n := 251; n < len(b); n *= 2 {
		copy(b[n:], b[:n])
	}
	return b
}
