package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/goffload/offload"
)

// One run of a Task Bench graph: by goroutines (the baseline a Go
// programmer writes by hand) or as goffload target tasks on devices.

// tbGraph is one graph to run: the pattern, its width and height, and
// the kernel every task runs.
type tbGraph struct {
	Pattern tbPattern
	Width   int
	Steps   int
	Kernel  tbKernelKind
	Iters   int64
	Scratch int // memory_bound: int64s of scratch per point (Samples samples)
	Samples int
}

func (g tbGraph) check() error {
	if g.Steps < 1 {
		return fmt.Errorf("taskbench: %d timesteps, want at least 1", g.Steps)
	}
	if err := g.Pattern.check(g.Width); err != nil {
		return fmt.Errorf("taskbench: %w", err)
	}
	if g.Kernel == tbMemoryBound && (g.Samples < 1 || g.Scratch%(2*g.Samples) != 0 || g.Scratch == 0) {
		return fmt.Errorf("taskbench: memory_bound: %d int64s of scratch in %d samples: want samples of an even length", g.Scratch, g.Samples)
	}
	return nil
}

func (g tbGraph) args(t, p int) tbArgs {
	return tbArgs{T: int64(t), Point: int64(p), Width: int64(g.Width), Pattern: int64(g.Pattern.Kind),
		Radix: int64(g.Pattern.Radix), Period: int64(g.Pattern.Period), Kernel: int64(g.Kernel), Iters: g.Iters, Samples: int64(g.Samples)}
}

// scratch is a point's scratch buffer, filled with the magic word: the
// kernel's for memory_bound, one word (checked, never written) otherwise.
func (g tbGraph) scratch() []int64 {
	n := 2
	if g.Kernel == tbMemoryBound {
		n = g.Scratch
	}
	s := make([]int64, n)
	for i := range s {
		s[i] = tbMagic
	}
	return s
}

// edges are the pairs (q, p), p reading q's output, over every dependence
// set of g.
func (g tbGraph) edges() map[[2]int]bool {
	e := map[[2]int]bool{}
	var buf []int
	for d := range g.Pattern.dsets() {
		for p := range g.Width {
			for _, q := range g.Pattern.deps(buf[:0], g.Width, d, p) {
				e[[2]int{q, p}] = true
			}
		}
	}
	return e
}

// runTBGoroutines runs g with one goroutine per point (column) and a
// buffered channel per edge of the graph (per pair of points one reads the
// other's output in some dependence set): at each timestep a goroutine
// receives its inputs from the channels of its dependencies, runs the task
// and sends its output on the channels of the points that read it at the
// next timestep. It returns the time from the start of the goroutines to
// the end of the last.
func runTBGoroutines(g tbGraph) (time.Duration, error) {
	if err := g.check(); err != nil {
		return 0, err
	}
	ch := map[[2]int]chan [2]int64{}
	for e := range g.edges() {
		ch[e] = make(chan [2]int64, 2)
	}
	scratch := make([][]int64, g.Width)
	for p := range scratch {
		scratch[p] = g.scratch()
	}
	errs := make([]error, g.Width)
	var wg sync.WaitGroup
	var stop sync.Once
	quit := make(chan struct{}) // closed when a task fails: the others stop
	t0 := time.Now()
	for p := range g.Width {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var deps, readers []int
			var vals [][2]int64
			var in [][]int64
			var out [2]int64
			for t := range g.Steps {
				deps = g.Pattern.inputs(deps[:0], g.Width, t, p)
				vals, in = vals[:0], in[:0]
				for _, q := range deps {
					select {
					case v := <-ch[[2]int{q, p}]:
						vals = append(vals, v)
					case <-quit:
						return
					}
				}
				for i := range vals {
					in = append(in, vals[i][:])
				}
				if err := tbExecute(g.args(t, p), out[:], scratch[p], in); err != nil {
					errs[p] = err
					stop.Do(func() { close(quit) })
					return
				}
				if t+1 == g.Steps {
					break
				}
				readers = g.Pattern.rdeps(readers[:0], g.Width, g.Pattern.dset(t+1), p)
				for _, r := range readers {
					select {
					case ch[[2]int{p, r}] <- out:
					case <-quit:
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	d := time.Since(t0)
	return d, errors.Join(errs...)
}

// runTBDevices runs g as goffload target tasks, point p on devs[p mod
// len(devs)], and returns the time from the first task's creation to the
// end of Taskwait.
//
// Each task is a nowait launch with depend(in) on its inputs and
// depend(out) on its output. Outputs are 16 bytes, (timestep, point), in
// two host buffers per point used by timestep parity, as Task Bench's
// implementations double-buffer them. They move between devices without the
// host: before the run, each output buffer is made present (EnterData
// alloc) on its point's device and on every device that runs a point
// reading it; after task (t, p) the host enqueues, for each other device
// that runs a reader of it at t+1, an offload.CopyNowait of the output from
// p's device to that device's copy of the same buffer (omp_target_memcpy
// between the two devices' mappings; device to device straight on the
// remote kinds). Depend clauses name host addresses, and the copies of a
// buffer on several devices share its address, so each (buffer, reading
// device) pair has a token object of its own: the copy depends in on the
// output (after its producer, before its next producer) and out on the
// token; a reader on the other device depends in on the token (after the
// copy, before the next copy overwrites that device's copy). A reader on
// the producer's own device depends in on the output itself. Every task
// checks its inputs (tbExecute) and fails the run if one does not hold
// the pairs of its dependency at t-1; after the run the last timestep's
// outputs are brought back and checked as well.
func runTBDevices(ctx context.Context, g tbGraph, devs []offload.Device) (d time.Duration, err error) {
	if err := g.check(); err != nil {
		return 0, err
	}
	nd := len(devs)
	owner := func(p int) int { return p % nd }
	out := [2][][]int64{}
	tok := [2][][]*int64{} // [parity][point][device]
	readersOn := make([][]int, g.Width)
	var buf []int
	for p := range g.Width {
		set := map[int]bool{}
		for d := range g.Pattern.dsets() {
			for _, r := range g.Pattern.rdeps(buf[:0], g.Width, d, p) {
				if owner(r) != owner(p) {
					set[owner(r)] = true
				}
			}
		}
		for e := range set {
			readersOn[p] = append(readersOn[p], e)
		}
		slices.Sort(readersOn[p])
	}
	scratch := make([][]int64, g.Width)
	for par := range 2 {
		out[par] = make([][]int64, g.Width)
		tok[par] = make([][]*int64, g.Width)
		for p := range g.Width {
			out[par][p] = make([]int64, 2)
			tok[par][p] = make([]*int64, nd)
			for e := range nd {
				tok[par][p][e] = new(int64)
			}
		}
	}
	// Map: outputs on their devices and readers' devices, scratch on the
	// point's device; unmapped at the end whatever happened.
	type mapping struct {
		dev offload.Device
		x   []int64
	}
	var mapped []mapping
	defer func() {
		for _, m := range mapped {
			if xerr := m.dev.ExitData(offload.Delete(m.x)); err == nil && xerr != nil {
				err = xerr
			}
		}
	}()
	enter := func(dev offload.Device, m offload.Map, x []int64) error {
		if err := dev.EnterData(m); err != nil {
			return err
		}
		mapped = append(mapped, mapping{dev, x})
		return nil
	}
	for p := range g.Width {
		scratch[p] = g.scratch()
		if err := enter(devs[owner(p)], offload.To(scratch[p]).Named("scratch"), scratch[p]); err != nil {
			return 0, err
		}
		for par := range 2 {
			for _, e := range append([]int{owner(p)}, readersOn[p]...) {
				if err := enter(devs[e], offload.Alloc(out[par][p]).Named("output"), out[par][p]); err != nil {
					return 0, err
				}
			}
		}
	}

	var deps []offload.Dep
	var in [][]int64
	var points, readers []int
	t0 := time.Now()
	for t := range g.Steps {
		cur, last := t%2, (t+1)%2
		for p := range g.Width {
			dev := owner(p)
			deps, in = deps[:0], in[:0]
			points = g.Pattern.inputs(points[:0], g.Width, t, p)
			if len(points) > tbMaxInputs {
				return 0, fmt.Errorf("taskbench: %s at width %d: task (t=%d, p=%d) has %d inputs, the device kinds' kernels take at most %d", g.Pattern.Name(), g.Width, t, p, len(points), tbMaxInputs)
			}
			for _, q := range points {
				in = append(in, out[last][q])
				if owner(q) == dev {
					deps = append(deps, offload.DependIn(out[last][q]))
				} else {
					deps = append(deps, offload.DependIn(tok[last][q][dev]))
				}
			}
			deps = append(deps, offload.DependOut(out[cur][p]))
			if g.Kernel == tbMemoryBound {
				deps = append(deps, offload.DependInOut(scratch[p]))
			}
			tbLaunch(devs[dev].Nowait(deps...), g.args(t, p), out[cur][p], scratch[p], in)
			if t+1 == g.Steps || len(readersOn[p]) == 0 {
				continue
			}
			// The copies to the devices that read (t, p) at t+1.
			readers = g.Pattern.rdeps(readers[:0], g.Width, g.Pattern.dset(t+1), p)
			for _, e := range readersOn[p] {
				if !slices.ContainsFunc(readers, func(r int) bool { return owner(r) == e }) {
					continue
				}
				offload.CopyNowait(devs[e].Nowait(offload.DependIn(out[cur][p]), offload.DependOut(tok[cur][p][e])),
					devs[e], out[cur][p], devs[dev], out[cur][p])
			}
		}
	}
	if err := offload.Taskwait(ctx); err != nil {
		return 0, err
	}
	d = time.Since(t0)
	final := (g.Steps - 1) % 2
	for p := range g.Width {
		if err := devs[owner(p)].Update(offload.From(out[final][p])); err != nil {
			return 0, err
		}
		if got := out[final][p]; got[0] != int64(g.Steps-1) || got[1] != int64(p) {
			return 0, fmt.Errorf("taskbench: after the run, the output of point %d on %s holds (t=%d, p=%d), want (t=%d, p=%d)", p, devs[owner(p)], got[0], got[1], g.Steps-1, p)
		}
	}
	return d, nil
}
