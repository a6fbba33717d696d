package main

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"time"

	"github.com/goffload/offload"
)

// Suite async: tasks (target nowait with depend clauses) on two local
// device processes.
//
//   - async.chain_per_op: a chain of chainLen empty kernels on device 0,
//     each depending (inout) on the one before, enqueued up front and then
//     waited for with Taskwait; time per task. The device holds each task
//     back behind its predecessor (here: queue order), so the host only
//     enqueues and learns of completions. Baseline: one 8-byte blocking
//     ping-pong round trip with a raw peer process over an inherited
//     socketpair (peer.go's echo peer), what a synchronous launch cannot
//     beat.
//   - async.cross_device_per_op: the same chain alternating between devices
//     0 and 1, each task waiting for the other device's; the waiting device
//     hears of the other's event over their peer link. Same baseline.
//   - async.two_devices: a compute-bound kernel split in halves over devices
//     0 and 1 (launched nowait, then waited for as a group) against the
//     whole on device 0 alone, synchronously; both devices have the cores
//     local:2 gives them (NumCPU/2 each). async.two_devices_vs_2cores is the
//     same two-device figure against the whole on one device process that
//     has every core (a local:1 device), so that splitting over processes
//     is compared with splitting over the cores of one.
//
// For the compute figures the suite restarts the runtime with
// "local:2,local:1" (devices 0 and 1 as local:2 makes them, device 2 with
// all cores), so that all three are measured in interleaved rounds; it
// starts the suite's own devices again at the end.

func init() { register("async", Suite{Devices: asyncDevices, Run: runAsync}) }

const (
	asyncDevices = "local:2"
	// computeDevices adds a device process with every core to the suite's
	// two (an item local:N gives its processes NumCPU/N cores each).
	computeDevices = "local:2,local:1"
	chainLen       = 1000
	// The compute kernel's size: about 3·10^7 iterations of a short
	// dependent floating-point recurrence, some 100 ms on one core.
	computeElems = 1 << 14
	computeIters = 2048
)

// benchCompute sets y[i] = computeElem(x[i], iters), split over the
// device's cores.
var benchCompute = offload.MustKernel3("bench.compute", func(ctx offload.Ctx, iters int32, x offload.In[float64], y offload.Out[float64]) {
	ctx.For(len(y), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			y[i] = computeElem(x[i], int(iters))
		}
	})
})

// The rotation computeElem applies: by a small angle, so that the point
// stays near its circle however many iterations run.
var rotCos, rotSin = math.Cos(1e-3), math.Sin(1e-3)

// computeElem rotates the point (x, 1) iters times (four multiplications
// and two additions each, the next depending on the last) and returns the
// sum of its coordinates. It is not inlined so that the kernel and the
// host's check run the same machine code and agree bit for bit (a compiler
// may fuse multiply-adds differently in two inlined copies).
//
//go:noinline
func computeElem(x float64, iters int) float64 {
	a, b := x, 1.0
	for range iters {
		a, b = rotCos*a-rotSin*b, rotSin*a+rotCos*b
	}
	return a + b
}

func runAsync(env *Env) error {
	if err := describeDevices(env, 2, "local", "a local device process"); err != nil {
		return err
	}
	env.Comment("async.*_per_op: a chain of %d empty-kernel tasks, each depend(inout) on the one before, enqueued then Taskwait; time per task. Baseline: one raw 8-byte ping-pong round trip with blocking reads (%s=echo peer, inherited AF_UNIX socketpair)", chainLen, envPeerRole)
	err := withPeer("echo", spin{}, func(p *peer) error {
		if err := p.pingPong(100); err != nil { // warm up
			return err
		}
		if err := asyncChain(env, p.pingPong, "async.chain_per_op", func(int) int { return 0 }, "device 0 only"); err != nil {
			return err
		}
		return asyncChain(env, p.pingPong, "async.cross_device_per_op", func(i int) int { return i % 2 }, "devices 0,1 alternating")
	})
	if err != nil {
		return err
	}
	return asyncCompute(env)
}

// asyncChain measures chains of chainLen dependent empty kernels, task i on
// device dev(i), against a round trip, base.
func asyncChain(env *Env, base func(n int) error, metric string, dev func(i int) int, what string) error {
	x := new(int64) // the object every task of the chain reads and writes
	ctx := context.Background()
	var enqueue time.Duration // time spent in Run, all chains
	var tasks int
	chains := func(n int) error {
		for range n {
			t0 := time.Now()
			last := uint64(0)
			for i := range chainLen {
				t := benchEmpty.Nowait(offload.On(dev(i)).Nowait(offload.DependInOut(x)))
				if t.ID() <= last { // created, in order
					if err := t.Wait(); err != nil {
						return err
					}
					return fmt.Errorf("%s: task %d of the chain has ID %d after %d", metric, i, t.ID(), last)
				}
				last = t.ID()
			}
			enqueue += time.Since(t0)
			tasks += chainLen
			if err := offload.Taskwait(ctx); err != nil {
				return err
			}
		}
		return nil
	}
	if err := chains(1); err != nil { // warm up: queues, peer links
		return err
	}
	enqueue, tasks = 0, 0
	t, b, err := env.Compare(chains, base)
	if err != nil {
		return err
	}
	t /= chainLen
	env.Report(Result{Metric: metric, Goffload: t, Baseline: b,
		Note: fmt.Sprintf("%s; host enqueue %s/task", what, human(float64(enqueue.Nanoseconds())/float64(max(tasks, 1))))})
	return nil
}

// restart stops the runtime and starts it again with devices, as runSuite
// does.
func restart(devices string) error {
	if err := offload.Stop(); err != nil {
		return err
	}
	return offload.Start(offload.WithDevices(devices), offload.WithOffload("MANDATORY"))
}

// asyncCompute measures the compute kernel split over two devices against
// the whole on one, on a runtime restarted with computeDevices, and starts
// the suite's devices again afterwards.
func asyncCompute(env *Env) (err error) {
	defer func() { // also after a failed restart
		if rerr := restart(asyncDevices); err == nil {
			err = rerr
		}
	}()
	if err := restart(computeDevices); err != nil {
		return err
	}
	var cores [3]int
	for d := range cores {
		info, err := offload.On(d).Info()
		if err != nil {
			return err
		}
		if info.Kind != "local" {
			return fmt.Errorf("device %d of %q is a %q device, want a local device process", d, computeDevices, info.Kind)
		}
		cores[d] = info.Cores
	}
	env.Comment("async.two_devices*: runtime restarted with devices %q: devices 0 and 1 with %d and %d cores (as %q gives them), device 2 with %d cores; %d CPUs, GOMAXPROCS %d in every process",
		computeDevices, cores[0], cores[1], asyncDevices, cores[2], runtime.NumCPU(), runtime.GOMAXPROCS(0))
	env.Comment("async.two_devices: halves on devices 0 and 1 (%d+%d cores), nowait, waited as a group, vs the whole on device 0 alone (%d cores), synchronous; ratio = two-device time / one-device time, 0.5 is perfect", cores[0], cores[1], cores[0])
	env.Comment("async.two_devices_vs_2cores: the same two-device time vs the whole on device 2 (%d cores, one process), synchronous; 1 means splitting over processes is as good as over one process's cores", cores[2])

	x := make([]float64, computeElems)
	for i := range x {
		x[i] = float64(i%1000)*1e-3 - 0.5
	}
	want := make([]float64, computeElems)
	t0 := time.Now()
	for i := range x {
		want[i] = computeElem(x[i], computeIters)
	}
	hostTime := time.Since(t0)
	env.Comment("compute kernel: %d elements × %d iterations (%.2g rotations); on the host, one goroutine, no runtime: %s",
		computeElems, computeIters, float64(computeElems)*computeIters, human(float64(hostTime.Nanoseconds())))

	ctx := context.Background()
	y := make([]float64, computeElems)
	two := func(n int) error {
		for range n {
			var g offload.Group
			for d := range 2 {
				lo, hi := d*computeElems/2, (d+1)*computeElems/2
				benchCompute.Nowait(offload.On(d).Nowait(offload.DependOut(y[lo:hi])).In(&g), int32(computeIters), x[lo:hi], y[lo:hi])
			}
			if err := g.Wait(ctx); err != nil {
				return err
			}
		}
		return nil
	}
	one := func(d int) func(n int) error {
		return func(n int) error {
			for range n {
				if err := benchCompute.Run(offload.On(d), int32(computeIters), x, y); err != nil {
					return err
				}
			}
			return nil
		}
	}
	// Check each way once (which also warms them up): the devices' results
	// must be the host's, bit for bit.
	for _, c := range []struct {
		name string
		f    func(int) error
	}{{"two devices", two}, {"device 0", one(0)}, {"device 2", one(2)}} {
		clear(y)
		if err := c.f(1); err != nil {
			return err
		}
		for i := range y {
			if y[i] != want[i] {
				return fmt.Errorf("compute kernel on %s: y[%d] = %v, want %v (computed on the host)", c.name, i, y[i], want[i])
			}
		}
	}

	t, err := env.measure(two, one(0), one(2))
	if err != nil {
		return err
	}
	env.Report(Result{Metric: "async.two_devices", Goffload: t[0], Baseline: t[1],
		Note: fmt.Sprintf("%d+%d cores vs %d core(s); speedup %.2f×", cores[0], cores[1], cores[0], t[1]/t[0])})
	env.Report(Result{Metric: "async.two_devices_vs_2cores", Goffload: t[0], Baseline: t[2],
		Note: fmt.Sprintf("%d+%d cores vs one device with %d", cores[0], cores[1], cores[2])})
	return nil
}
