package main

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goffload/offload"
)

// Suites host2 and host_shared: what host:2's memory costs (issue 47, items
// 6 and 8).
//
//   - host2.enter_200MiB_two_vs_one (suite host2: host:2, with
//     GOFFLOAD_HOST_POOL_THRESHOLD=0, so every map allocates afresh, as a
//     program's first map does): a nowait target enter data of 200 MiB to
//     each of the two devices, both waited for, against the same to one
//     device alone; rounds alternate, and each round's buffers are deleted
//     untimed after it. The two copies run on the devices' own queues:
//     with two free cores they overlap. Goal: ≤ 1.2 (1.87–1.89 before
//     issue 47, when a copy held the garbage collector's stop of the world
//     and the two ran one after the other).
//   - host_shared.lookup_vs_goroutines (suite host_shared: host:2 with
//     GOFFLOAD_HOST_MEMORY=shared): XSBench-like lookups — a random energy,
//     a binary search in a sorted grid of hostLookupGrid points, five
//     cross sections interpolated from a table five times that size (192
//     MiB in all, read-only and mapped once) — split in halves over the two
//     devices, launched nowait and waited for, against the same lookups on
//     GOMAXPROCS plain goroutines that take blocks of 1024 lookups as
//     they go (XSBench's schedule(dynamic)); time per batch of hostLookupBatch
//     lookups, the results checked block by block against the goroutines'.
//     With shared memory both devices read the program's table itself.
//     Goal: ≤ 1.02 (≥ 0.98× the goroutines' throughput).

func init() {
	register("host2", Suite{Devices: "host:2", Env: map[string]string{"GOFFLOAD_HOST_POOL_THRESHOLD": "0"}, Run: runHost2})
	register("host_shared", Suite{Devices: "host:2", Env: map[string]string{"GOFFLOAD_HOST_MEMORY": "shared"}, Run: runHostShared})
}

// The sizes of the suites; the tests lower them.
var (
	hostEnterBytes  = 200 << 20
	hostLookupGrid  = 4 << 20 // grid points: 32 MiB of energies, 160 MiB of cross sections
	hostLookupBatch = 1 << 20 // lookups per timed operation
)

// lookupBlock is how many lookups one result element sums.
const lookupBlock = 1024

// benchLookup does lookups [first, first+lookupBlock*len(out)) of the
// batch seeded with seed, one block per element of out.
var benchLookup = offload.MustKernel5("bench.lookup", func(ctx offload.Ctx, seed uint64, first int, grid offload.In[float64], xs offload.In[float64], out offload.Out[float64]) {
	ctx.For(len(out), func(lo, hi int) { lookupBlocks(seed, first, grid, xs, out, lo, hi) })
}).Named("", "", "grid", "xs", "out")

// lookupBlocks computes out[lo:hi], the sums of blocks of lookups that start
// at lookup first.
func lookupBlocks(seed uint64, first int, grid, xs, out []float64, lo, hi int) {
	for b := lo; b < hi; b++ {
		sum := 0.0
		for i := first + b*lookupBlock; i < first+(b+1)*lookupBlock; i++ {
			sum += lookupOne(seed, i, grid, xs)
		}
		out[b] = sum
	}
}

// lookupOne is one lookup: energy i of the batch, its grid interval found
// by binary search, five cross sections interpolated in it.
func lookupOne(seed uint64, i int, grid, xs []float64) float64 {
	h := mix64(seed ^ uint64(i)*0x9e3779b97f4a7c15)
	e := float64(h>>11) / (1 << 53)
	lo, hi := 0, len(grid)-1 // grid[lo] <= e < grid[hi], or the ends
	for hi-lo > 1 {
		mid := int(uint(lo+hi) >> 1)
		if grid[mid] <= e {
			lo = mid
		} else {
			hi = mid
		}
	}
	f := 0.0
	if d := grid[hi] - grid[lo]; d > 0 {
		f = (e - grid[lo]) / d
	}
	a, b := xs[lo*5:lo*5+5], xs[hi*5:hi*5+5]
	s := 0.0
	for k := range 5 {
		s += a[k] + f*(b[k]-a[k])
	}
	return s
}

// mix64 is SplitMix64's finalizer.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func runHost2(env *Env) error {
	if err := describeDevicesOf(env, 2, "a host device", "host"); err != nil {
		return err
	}
	n := hostEnterBytes
	bufs := [2][]byte{fill(make([]byte, n)), fill(make([]byte, n))}
	bufs[1][0] = 77
	enter := func(devs int) (time.Duration, error) {
		t0 := time.Now()
		var g offload.Group
		for d := range devs {
			offload.On(d).Nowait().In(&g).EnterData(offload.To(bufs[d]).Named(fmt.Sprint("buf", d)))
		}
		err := g.Wait(context.Background())
		t := time.Since(t0)
		for d := range devs {
			if err == nil {
				err = checkEntered(d, bufs[d])
			}
			if xerr := offload.On(d).ExitData(offload.Delete(bufs[d])); err == nil {
				err = xerr
			}
		}
		return t, err
	}
	t, err := env.CompareSelfTimed(func() (time.Duration, error) { return enter(2) }, func() (time.Duration, error) { return enter(1) })
	if err != nil {
		return fmt.Errorf("host2.enter_200MiB_two_vs_one: %w", err)
	}
	env.Report(Result{Metric: "host2.enter_200MiB_two_vs_one", Goffload: t[0], Baseline: t[1], Bytes: int64(n),
		Note: fmt.Sprintf("nowait enter data of %d MiB to each of 2 host devices vs to 1 (goal ≤ 1.2)", n>>20)})
	return nil
}

// checkEntered checks that device d holds buf's first and last bytes.
func checkEntered(d int, buf []byte) error {
	p, err := offload.On(d).MappedPtr(buf)
	if err != nil {
		return err
	}
	got := make([]byte, 2)
	if err := offload.Memcpy(offload.HostPtr(got[:1]), p, 1); err != nil {
		return err
	}
	if err := offload.Memcpy(offload.HostPtr(got[1:]), p.Offset(int64(len(buf)-1)), 1); err != nil {
		return err
	}
	if got[0] != buf[0] || got[1] != buf[len(buf)-1] {
		return fmt.Errorf("device %d holds %v at the ends of the buffer, want %v", d, got, []byte{buf[0], buf[len(buf)-1]})
	}
	return nil
}

func runHostShared(env *Env) error {
	if err := describeDevicesOf(env, 2, "a host device", "host"); err != nil {
		return err
	}
	grid, xs := lookupTables(hostLookupGrid)
	for d := range 2 {
		if err := offload.On(d).EnterData(offload.To(grid).Named("grid"), offload.To(xs).Named("xs")); err != nil {
			return err
		}
		defer offload.On(d).ExitData(offload.Delete(grid).Named("grid"), offload.Delete(xs).Named("xs"))
	}
	blocks := hostLookupBatch / lookupBlock
	got, want := make([]float64, blocks), make([]float64, blocks)
	seed := uint64(1)
	devices := func(n int) error {
		for range n {
			seed++
			var g offload.Group
			for d := range 2 {
				lo, hi := d*blocks/2, (d+1)*blocks/2
				benchLookup.Nowait(offload.On(d).Nowait().In(&g), seed, lo*lookupBlock, grid, xs, got[lo:hi])
			}
			if err := g.Wait(context.Background()); err != nil {
				return err
			}
		}
		return nil
	}
	goroutines := func(n int) error {
		for range n {
			lookupGoroutines(seed, grid, xs, want)
		}
		return nil
	}
	t, b, err := env.Compare(devices, goroutines)
	if err != nil {
		return fmt.Errorf("host_shared.lookup_vs_goroutines: %w", err)
	}
	lookupGoroutines(seed, grid, xs, want) // the last batch the devices did
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("host_shared.lookup_vs_goroutines: block %d: the devices summed %v, the goroutines %v", i, got[i], want[i])
		}
	}
	env.Report(Result{Metric: "host_shared.lookup_vs_goroutines", Goffload: t, Baseline: b,
		Note: fmt.Sprintf("%d lookups over a %d MiB table: host:2, shared memory, vs %d goroutines (goal ≤ 1.02)", hostLookupBatch, (len(grid)+len(xs))*8>>20, runtime.GOMAXPROCS(0))})
	return nil
}

// lookupGoroutines does a batch's lookups on GOMAXPROCS goroutines, which
// take blocks as they go (XSBench's schedule(dynamic)).
func lookupGoroutines(seed uint64, grid, xs, out []float64) {
	w := min(runtime.GOMAXPROCS(0), len(out))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range w {
		wg.Go(func() {
			for b := int(next.Add(1) - 1); b < len(out); b = int(next.Add(1) - 1) {
				lookupBlocks(seed, 0, grid, xs, out, b, b+1)
			}
		})
	}
	wg.Wait()
}

// lookupTables makes a sorted grid of n energies in [0, 1) and five cross
// sections per point.
func lookupTables(n int) (grid, xs []float64) {
	grid = make([]float64, n)
	for i := range grid {
		grid[i] = (float64(i) + float64(mix64(uint64(i))>>11)/(1<<53)) / float64(n)
	}
	xs = make([]float64, 5*n)
	for i := range xs {
		xs[i] = math.Float64frombits(0x3ff<<52 | mix64(uint64(i)+7)>>12) // in [1, 2)
	}
	return grid, xs
}
