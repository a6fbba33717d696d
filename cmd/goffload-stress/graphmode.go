package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"

	"github.com/goffload/offload"
)

// Graph mode (-graph): each worker records a random task graph over buffers
// of its own and replays it many times, checking every element after each
// replay against a sequential model of the graph.
//
// An epoch picks a device that this run has not seen lost (or Any() with
// -any), 2 to 4 buffers, and 4 to 16 nodes: kernel launches adding their
// scalar to the buffers they write, with depend clauses, and updates to or
// from the device; the graph ends with an update from of every buffer.
// Named-device buffers are mapped (EnterData) before the record and
// unmapped (ExitData from, checked) at the epoch's end. Between replays the
// program's copies and the device's may be given new contents; each Run
// passes new scalars, a Replay the last Run's. About one replay in twenty
// breaks a rule (another buffer, a task more or less): it must fail with
// ErrGraphChanged and leave every buffer as it was.
//
// With faults, a replay that fails (ErrDeviceLost, or an error naming the
// device) ends its epoch: the device is not picked again, its buffers are
// dropped unchecked, and the next epoch records a new graph on a surviving
// device, or, where none survives, the worker makes ordinary tasks. A
// replay that returns nil with a wrong value is data loss (exit 1), one not
// done by the deadline a hang (exit 2).
//
// With -any the runtime keeps what the graphs' Any-tasks left until a
// Taskwait (host RSS grew 10 to 100 MiB over 300,000 tasks): use -taskwait
// on long runs. Another goroutine's Taskwait moves the buffers, and the
// next Run records again, which the counts show.

// graphStats counts what graph mode did.
type graphStats struct {
	records, runs, replays atomic.Int64 // epochs recorded, Runs that replayed, Replay calls
	broken, brokenWrong    atomic.Int64 // replays that broke a rule; those not refused with ErrGraphChanged
	rerecorded             atomic.Int64 // Any mode: broken Runs recorded afresh, as the buffers had moved
	failed                 atomic.Int64 // replays or records that failed (faults)
	lost                   atomic.Int64 // elements that differed from the model after a replay that returned nil
}

func (g *graphStats) summary() string {
	return fmt.Sprintf("graph: records=%d run_replays=%d replays=%d broken=%d broken_not_refused=%d broken_rerecorded=%d failed=%d lost=%d",
		g.records.Load(), g.runs.Load(), g.replays.Load(), g.broken.Load(), g.brokenWrong.Load(), g.rerecorded.Load(), g.failed.Load(), g.lost.Load())
}

// Graph kernels: add v to the buffers whose bit is set in mask.
var (
	G1 = offload.MustKernel("stress.g1", func(mask, v int64, a []int64) { gapply(mask, v, a) })
	G2 = offload.MustKernel("stress.g2", func(mask, v int64, a, b []int64) { gapply(mask, v, a, b) })
	G3 = offload.MustKernel("stress.g3", func(mask, v int64, a, b, c []int64) { gapply(mask, v, a, b, c) })
)

func gapply(mask, v int64, bufs ...[]int64) {
	for i, b := range bufs {
		if mask&(1<<i) != 0 {
			for j := range b {
				b[j] += v
			}
		}
	}
}

// gop is one node of a graph: a launch on bufs (writing those in mask), or
// an update of bufs[0] to (upTo) or from the device.
type gop struct {
	bufs     []int
	mask     int64
	reads    []bool // depend in rather than inout
	update   bool
	upTo     bool
	scalarOf int64 // the node's scalar is 1 + (it*7 + scalarOf) % 5
}

func (o gop) v(it int64) int64 { return 1 + (it*7+o.scalarOf)%5 }

// gmodel is the sequential model: the program's copy and the device's.
type gmodel struct{ host, dev []int64 }

func (m *gmodel) run(ops []gop, it int64, any bool) {
	for _, o := range ops {
		switch {
		case o.update && o.upTo:
			m.dev[o.bufs[0]] = m.host[o.bufs[0]]
		case o.update:
			m.host[o.bufs[0]] = m.dev[o.bufs[0]]
		default:
			for i, b := range o.bufs {
				if o.mask&(1<<i) != 0 {
					m.dev[b] += o.v(it)
				}
			}
		}
	}
	if any { // Wait makes the program's copies valid
		copy(m.host, m.dev)
	}
}

func randomGraph(rng *rand.Rand, nb int, any bool) []gop {
	n := 4 + rng.IntN(13)
	var ops []gop
	for i := 0; i < n; i++ {
		if !any && rng.IntN(5) == 0 {
			ops = append(ops, gop{bufs: []int{rng.IntN(nb)}, update: true, upTo: rng.IntN(2) == 0})
			continue
		}
		k := 1 + rng.IntN(min(3, nb))
		if firstLaunch(ops) < 0 {
			k = min(k, nb-1) // leaves a buffer for broken rule 1 (other)
		}
		o := gop{scalarOf: int64(i)}
		for len(o.bufs) < k {
			b := rng.IntN(nb)
			dup := false
			for _, x := range o.bufs {
				dup = dup || x == b
			}
			if !dup {
				o.bufs = append(o.bufs, b)
			}
		}
		for j := range o.bufs {
			r := rng.IntN(3) == 0
			o.reads = append(o.reads, r)
			if !r {
				o.mask |= 1 << j
			}
		}
		ops = append(ops, o)
	}
	if !any {
		for b := 0; b < nb; b++ {
			ops = append(ops, gop{bufs: []int{b}, update: true})
		}
	}
	return ops
}

// build makes the graph's tasks with r. broken 1 passes another buffer to
// the first launch, 2 makes a task more, 3 a task less.
func build(r *offload.Recorder, d offload.Device, ops []gop, bufs [][]int64, it int64, broken int) {
	if broken == 3 {
		ops = ops[:len(ops)-1]
	}
	for i, o := range ops {
		if o.update {
			b := bufs[o.bufs[0]]
			m := offload.From(b)
			if o.upTo {
				m = offload.To(b)
			}
			r.Nowait(d, offload.DependInOut(b)).Update(m)
			continue
		}
		args := []any{o.mask, o.v(it)}
		deps := make([]offload.Dep, len(o.bufs))
		for j, x := range o.bufs {
			b := bufs[x]
			if broken == 1 && i == firstLaunch(ops) && j == 0 {
				b = bufs[other(o, len(bufs))]
			}
			args = append(args, b)
			deps[j] = offload.DependInOut(b)
			if o.reads[j] {
				deps[j] = offload.DependIn(b)
			}
		}
		r.Nowait(d, deps...).Run([]*offload.Kernel{G1, G2, G3}[len(o.bufs)-1], args...)
	}
	if broken == 2 {
		r.Nowait(d, offload.DependInOut(bufs[0])).Run(G1, int64(0), int64(0), bufs[0])
	}
}

// brokenOps are the nodes build makes with broken, for the model.
func brokenOps(ops []gop, broken, nb int) []gop {
	switch broken {
	case 1:
		ops = append([]gop(nil), ops...)
		i := firstLaunch(ops)
		o := ops[i]
		o.bufs = append([]int(nil), o.bufs...)
		o.bufs[0] = other(o, nb)
		ops[i] = o
	case 3:
		ops = ops[:len(ops)-1]
	}
	return ops // broken 2 adds a launch of scalar 0
}

// other is a buffer that launch o does not use (a buffer used twice would
// be refused for its overlap, not for a changed graph). randomGraph leaves
// one free in the first launch.
func other(o gop, nb int) int {
	for b := 0; b < nb; b++ {
		used := false
		for _, x := range o.bufs {
			used = used || x == b
		}
		if !used {
			return b
		}
	}
	panic("goffload-stress: a graph's first launch uses every buffer")
}

func firstLaunch(ops []gop) int {
	for i, o := range ops {
		if !o.update {
			return i
		}
	}
	return -1
}

// graphDevice picks a device not seen lost; false if none is left.
func (w *worker) graphDevice() (int, bool) {
	n := offload.NumDevices()
	var live []int
	for d := 0; d < n; d++ {
		if !w.s.dead[d].Load() {
			live = append(live, d)
		}
	}
	if len(live) == 0 {
		return 0, false
	}
	return live[w.rng.IntN(len(live))], true
}

// graphFailed accounts for a record, replay or data construct that failed
// with err on device d; it reports whether the run goes on (a hang does
// not).
// n is the tasks it stood for.
func (w *worker) graphFailed(d int, err error, n int64) bool {
	s := w.s
	if s.ctxErr(err) {
		s.hang.Add(1)
		return false
	}
	s.failed.Add(n)
	s.graph.failed.Add(1)
	s.errs.add(err, s.cfg.Errs)
	if errors.Is(err, offload.ErrDeviceLost) && d >= 0 {
		s.dead[d].Store(true)
	}
	return true
}

// graphWorker runs graph epochs until the run's tasks are made.
func (s *state) graphWorker(id int, rng *rand.Rand) {
	w := &worker{s: s, id: id, rng: rng}
	w.newPrivate(s.init[0])
	for s.ctx.Err() == nil {
		dn, ok := w.graphDevice()
		if !ok && !s.cfg.Any {
			if !s.claim(1) {
				break
			}
			w.task()
			continue
		}
		if !w.graphEpoch(dn) {
			break
		}
	}
	for s.ctx.Err() == nil && s.claim(1) { // the tasks too few for a graph
		w.task()
	}
	for len(w.window) > 0 && w.waitOldest() {
	}
	for _, r := range w.window {
		s.hang.Add(1)
		w.account(r, errHung)
	}
	w.window = nil
}

// graphEpoch records one graph on device dn (Any() in Any mode) and
// replays it; false when the run is over.
func (w *worker) graphEpoch(dn int) bool {
	s, rng := w.s, w.rng
	any := s.cfg.Any
	d := offload.On(dn)
	if any {
		d, dn = offload.Any(), -1
	}
	nb := 2 + rng.IntN(3)
	bufs := make([][]int64, nb)
	m := &gmodel{host: make([]int64, nb), dev: make([]int64, nb)}
	for b := range bufs {
		m.host[b] = int64(rng.IntN(1 << 20))
		m.dev[b] = m.host[b]
		bufs[b] = filled(s.cfg.Len, m.host[b])
	}
	ops := randomGraph(rng, nb, any)
	n := int64(len(ops))
	if !s.claim(n) {
		return false
	}
	var maps []offload.Map
	for _, b := range bufs {
		maps = append(maps, offload.To(b))
	}
	if !any {
		if err := d.EnterData(maps...); err != nil {
			w.counted(n, false)
			return w.graphFailed(dn, err, n)
		}
	}
	var it int64
	var broken int
	g := offload.NewTaskgraph(func(r *offload.Recorder) error {
		build(r, d, ops, bufs, it, broken)
		return nil
	})
	s.graph.records.Add(1)
	if err := g.Run().WaitContext(s.ctx); err != nil {
		w.counted(n, false)
		return w.graphFailed(dn, err, n)
	}
	m.run(ops, it, any)
	w.counted(n, true)
	if !w.graphCheck(m, bufs, "record") {
		return true
	}
	last := it
	fresh := false // Reset: the next is a Run (a Replay would be refused)
	for rep := 10 + rng.IntN(90); rep > 0; rep-- {
		if !any && rng.IntN(3) == 0 { // new contents in the program's memory, and maybe on the device
			for b := range bufs {
				m.host[b] = int64(rng.IntN(1 << 20))
				for j := range bufs[b] {
					bufs[b][j] = m.host[b]
				}
			}
			if rng.IntN(2) == 0 {
				if err := d.Update(maps...); err != nil {
					return w.graphFailed(dn, err, 1)
				}
				copy(m.dev, m.host)
			}
		}
		if rng.IntN(20) == 0 { // a broken rule: refused, nothing runs
			it, broken = it+1, 1+rng.IntN(3)
			if broken == 1 && firstLaunch(ops) < 0 {
				broken = 3 // a graph of updates only: no launch to pass another buffer to
			}
			rule := broken
			s.graph.broken.Add(1)
			err := g.Run().WaitContext(s.ctx)
			broken = 0
			if any && err == nil {
				// Run records a graph of Any-tasks again when its
				// buffers are not where the record found them (another
				// worker's Taskwait): the broken function was recorded
				// and ran, which is right. Record the real one next.
				s.graph.rerecorded.Add(1)
				m.run(brokenOps(ops, rule, nb), it, any)
				g.Reset()
				fresh = true
				if !w.graphCheck(m, bufs, "re-recorded broken Run") {
					return true
				}
				continue
			}
			if !errors.Is(err, offload.ErrGraphChanged) {
				s.graph.brokenWrong.Add(1)
				fmt.Fprintf(s.cfg.Errs, "goffload-stress: graph: a replay that broke rule %d gave %v, want ErrGraphChanged (device %d, %d buffers, nodes %+v)\n", rule, err, dn, nb, ops)
			}
			if !w.graphCheck(m, bufs, "refused replay") {
				return true
			}
			if !errors.Is(err, offload.ErrGraphChanged) {
				return true
			}
			continue
		}
		if !s.claim(n) {
			break
		}
		var t *offload.Task
		// A Run of Any-tasks whose placement could not be recorded (an
		// edge between devices that cannot wait on each other) ran them
		// unrecorded: Replay has nothing to replay then.
		if !fresh && g.Recorded() && rng.IntN(4) == 0 {
			t = g.Replay()
			s.graph.replays.Add(1)
		} else {
			it++
			last, fresh = it, false
			t = g.Run()
			s.graph.runs.Add(1)
		}
		err := t.WaitContext(s.ctx)
		if any && errors.Is(err, offload.ErrGraphChanged) {
			// Replay refuses a graph of Any-tasks whose buffers moved
			// (another worker's Taskwait, a device lost): nothing ran.
			w.counted(n, true)
			continue
		}
		if err != nil {
			w.counted(n, false)
			return w.graphFailed(dn, err, n)
		}
		m.run(ops, last, any)
		w.counted(n, true)
		if !w.graphCheck(m, bufs, "replay") {
			return true
		}
	}
	if !any {
		var outs []offload.Map
		for _, b := range bufs {
			outs = append(outs, offload.From(b))
		}
		if err := d.ExitData(outs...); err != nil {
			return w.graphFailed(dn, err, 1)
		}
		copy(m.host, m.dev)
		w.graphCheck(m, bufs, "exit data")
	}
	return true
}

// counted accounts for n tasks of a record or replay.
func (w *worker) counted(n int64, ok bool) {
	for range n {
		w.s.completed()
	}
	if ok {
		w.s.ok.Add(n)
	}
}

// graphCheck compares bufs with the model's program copies; false (and
// data loss counted) if one differs.
func (w *worker) graphCheck(m *gmodel, bufs [][]int64, when string) bool {
	bad := int64(0)
	for b, buf := range bufs {
		for j, x := range buf {
			if x != m.host[b] {
				if bad < 3 {
					fmt.Fprintf(w.s.cfg.Errs, "goffload-stress: DATA LOSS: graph (goroutine %d) after a %s: buffer %d element %d = %d, want %d\n", w.id, when, b, j, x, m.host[b])
				}
				bad++
			}
		}
	}
	w.s.graph.lost.Add(bad)
	return bad == 0
}
