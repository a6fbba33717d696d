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
	st, err := tbSetUp(g, devs)
	if err != nil {
		return 0, err
	}
	defer func() {
		if xerr := st.unmap(); err == nil {
			err = xerr
		}
	}()
	t0 := time.Now()
	if err := st.tasks(offload.Device.Nowait); err != nil {
		return 0, err
	}
	if err := offload.Taskwait(ctx); err != nil {
		return 0, err
	}
	d = time.Since(t0)
	return d, st.check()
}

// tbState is a run's buffers on the devices: the outputs by parity and
// point, the tokens of their copies on other devices by parity, point and
// device, the points' scratch, and the devices other than its own that
// read each point's output.
type tbState struct {
	g         tbGraph
	devs      []offload.Device
	out       [2][][]int64
	tok       [2][][]*int64
	scratch   [][]int64
	readersOn [][]int
	mapped    []tbMapped
}

// tbMapped is a buffer mapped on a device for a run.
type tbMapped struct {
	dev offload.Device
	x   []int64
}

func (st *tbState) owner(p int) int { return p % len(st.devs) }

// tbSetUp makes g's buffers and maps them: outputs on their devices and
// readers' devices, scratch on the point's device. On error, what it
// mapped is unmapped.
func tbSetUp(g tbGraph, devs []offload.Device) (*tbState, error) {
	if err := g.check(); err != nil {
		return nil, err
	}
	st := &tbState{g: g, devs: devs}
	nd := len(devs)
	st.readersOn = make([][]int, g.Width)
	var buf []int
	for p := range g.Width {
		set := map[int]bool{}
		for d := range g.Pattern.dsets() {
			for _, r := range g.Pattern.rdeps(buf[:0], g.Width, d, p) {
				if st.owner(r) != st.owner(p) {
					set[st.owner(r)] = true
				}
			}
		}
		for e := range set {
			st.readersOn[p] = append(st.readersOn[p], e)
		}
		slices.Sort(st.readersOn[p])
	}
	st.scratch = make([][]int64, g.Width)
	for par := range 2 {
		st.out[par] = make([][]int64, g.Width)
		st.tok[par] = make([][]*int64, g.Width)
		for p := range g.Width {
			st.out[par][p] = make([]int64, 2)
			st.tok[par][p] = make([]*int64, nd)
			for e := range nd {
				st.tok[par][p][e] = new(int64)
			}
		}
	}
	enter := func(dev offload.Device, m offload.Map, x []int64) error {
		if err := dev.EnterData(m); err != nil {
			return err
		}
		st.mapped = append(st.mapped, tbMapped{dev, x})
		return nil
	}
	for p := range g.Width {
		st.scratch[p] = g.scratch()
		if err := enter(devs[st.owner(p)], offload.To(st.scratch[p]).Named("scratch"), st.scratch[p]); err != nil {
			return nil, errors.Join(err, st.unmap())
		}
		for par := range 2 {
			for _, e := range append([]int{st.owner(p)}, st.readersOn[p]...) {
				if err := enter(devs[e], offload.Alloc(st.out[par][p]).Named("output"), st.out[par][p]); err != nil {
					return nil, errors.Join(err, st.unmap())
				}
			}
		}
	}
	return st, nil
}

// unmap unmaps what tbSetUp mapped.
func (st *tbState) unmap() error {
	var err error
	for _, m := range st.mapped {
		if xerr := m.dev.ExitData(offload.Delete(m.x)); err == nil && xerr != nil {
			err = xerr
		}
	}
	st.mapped = nil
	return err
}

// tasks makes the run's tasks with nowait: Device.Nowait, or a
// Taskgraph Recorder's.
func (st *tbState) tasks(nowait func(d offload.Device, deps ...offload.Dep) offload.Async) error {
	g, devs, out, tok, scratch := st.g, st.devs, st.out, st.tok, st.scratch
	var deps, cdeps []offload.Dep // reused: nowait is a func value, so what it is passed escapes
	var in [][]int64
	var points, readers []int
	for t := range g.Steps {
		cur, last := t%2, (t+1)%2
		for p := range g.Width {
			dev := st.owner(p)
			deps, in = deps[:0], in[:0]
			points = g.Pattern.inputs(points[:0], g.Width, t, p)
			if len(points) > tbMaxInputs {
				return fmt.Errorf("taskbench: %s at width %d: task (t=%d, p=%d) has %d inputs, the device kinds' kernels take at most %d", g.Pattern.Name(), g.Width, t, p, len(points), tbMaxInputs)
			}
			for _, q := range points {
				in = append(in, out[last][q])
				if st.owner(q) == dev {
					deps = append(deps, offload.DependIn(out[last][q]))
				} else {
					deps = append(deps, offload.DependIn(tok[last][q][dev]))
				}
			}
			deps = append(deps, offload.DependOut(out[cur][p]))
			if g.Kernel == tbMemoryBound {
				deps = append(deps, offload.DependInOut(scratch[p]))
			}
			tbLaunch(nowait(devs[dev], deps...), g.args(t, p), out[cur][p], scratch[p], in)
			if t+1 == g.Steps || len(st.readersOn[p]) == 0 {
				continue
			}
			// The copies to the devices that read (t, p) at t+1.
			readers = g.Pattern.rdeps(readers[:0], g.Width, g.Pattern.dset(t+1), p)
			for _, e := range st.readersOn[p] {
				if !slices.ContainsFunc(readers, func(r int) bool { return st.owner(r) == e }) {
					continue
				}
				cdeps = append(cdeps[:0], offload.DependIn(out[cur][p]), offload.DependOut(tok[cur][p][e]))
				offload.CopyNowait(nowait(devs[e], cdeps...), devs[e], out[cur][p], devs[dev], out[cur][p])
			}
		}
	}
	return nil
}

// check brings the last timestep's outputs back and checks them.
func (st *tbState) check() error {
	g := st.g
	final := (g.Steps - 1) % 2
	for p := range g.Width {
		dev := st.devs[st.owner(p)]
		if err := dev.Update(offload.From(st.out[final][p])); err != nil {
			return err
		}
		if got := st.out[final][p]; got[0] != int64(g.Steps-1) || got[1] != int64(p) {
			return fmt.Errorf("taskbench: after the run, the output of point %d on %s holds (t=%d, p=%d), want (t=%d, p=%d)", p, dev, got[0], got[1], g.Steps-1, p)
		}
	}
	return nil
}
