package core

import (
	"fmt"
	"slices"

	"github.com/goffload/offload/internal/mapping"
	"github.com/goffload/offload/internal/placement"
)

// Any-tasks in recorded graphs. At the record an Any-task is placed as
// any other: the model picks its device, and the table plans its copies
// and allocations. The graph keeps the plan as nodes: each copy, then the
// launch on the chosen device. A replay enqueues the same nodes without
// asking the model. The plan is right only for the table's state it was
// made in, so a replay checks that the touched regions are as they were
// at the record's start. It then commits the recorded accesses again, so
// the table ends where the record left it.

// graphAny is what a graph holds of its Any-tasks.
type graphAny struct {
	s *anySched
	// all is every region's digest when the first Any-task was placed;
	// start and end are the touched regions' at the record's start and
	// end, once sealed.
	all        map[placement.Buf]uint64
	regions    []placement.Buf
	start, end uint64
	commits    []anyCommit
	writes     []placement.Buf
}

// anyCommit is a recorded Any-task's placement: its device and accesses.
type anyCommit struct {
	dev int
	acc []placement.Access
}

// AnyTargetIn is AnyTarget inside a graph's record: the task is placed
// and made as AnyTarget makes it, and its copies and launch are added to
// g as nodes. An error means no task was made (or the plan was not
// recorded: the record fails then).
func (r *Runtime) AnyTargetIn(g *Graph, l AnyLaunch) (*Task, error) {
	fail := func(err error) error {
		return Errorf("goffload: Any(): taskgraph: target %s%s: %w", l.Kernel.Name(), l.Kernel.Describe(), err)
	}
	acc, bufs, argOf, size, err := anyArgs(l.Args)
	if err != nil {
		return nil, fail(fmt.Errorf("%w: %v", ErrBadArgument, err))
	}
	t, err := r.placer().place(&anyTask{AnyLaunch: l, acc: acc, bufs: bufs, argOf: argOf, size: size, rec: g})
	if err != nil {
		return nil, fail(err)
	}
	return t, nil
}

// recordStart notes the table's state before the graph's first Any-task;
// s.mu is held.
func (g *Graph) recordStart(s *anySched) {
	if g.any != nil {
		return
	}
	g.any = &graphAny{s: s, all: s.table.Digests()}
}

// recordCopy adds copy c, made on the queue of on, as a node: an update
// to d from the host, or a copy between devices.
func (g *Graph) recordCopy(d *Device, c placement.Copy, buf mapping.Buf, dst, src Loc, deps []Dep) error {
	if c.From == placement.Host {
		return g.AddUpdate(d, []MapItem{{Buf: buf, Type: mapping.MapTo}}, deps)
	}
	return g.AddCopy(dst, src, int64(c.Buf.Size), deps)
}

// recordLaunch adds t's launch on device d, with its present arguments
// and full depend clauses, and notes its accesses for replays.
func (g *Graph) recordLaunch(t *anyTask, d int, args []KernelArg, deps []Dep) error {
	if err := g.AddLaunch(g.rt.Devices[d], t.Kernel, args, t.Geo, deps); err != nil {
		return err
	}
	g.any.commits = append(g.any.commits, anyCommit{dev: d, acc: slices.Clone(t.acc)})
	for _, a := range t.acc {
		if a.Write {
			g.any.writes = append(g.any.writes, a.Buf)
		}
	}
	return nil
}

// HasAny reports whether g holds Any-tasks.
func (g *Graph) HasAny() bool { return g.any != nil }

// sealAny notes the touched regions' states at the record's start and end.
func (g *Graph) sealAny() {
	a := g.any
	if a == nil {
		return
	}
	s := a.s
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[placement.Buf]bool{}
	for _, c := range a.commits {
		for _, ac := range c.acc {
			r := s.table.Region(ac.Buf)
			if !seen[r] {
				seen[r] = true
				a.regions = append(a.regions, r)
			}
		}
	}
	slices.SortFunc(a.regions, func(x, y placement.Buf) int { return int(int64(x.Addr - y.Addr)) })
	a.start = placement.Combine(a.regions, func(r placement.Buf) uint64 { return a.all[r] })
	a.end = s.table.Digest(a.regions)
	a.all = nil
}

// AnyStale reports whether the table's state of g's regions differs from
// the one g's Any-tasks were placed in: a replay would fail then.
func (g *Graph) AnyStale() bool {
	a := g.any
	if a == nil {
		return false
	}
	a.s.mu.Lock()
	defer a.s.mu.Unlock()
	return g.anyStale()
}

// anyStale is AnyStale with the placer's lock held: the table's state of
// g's regions is not the record's start, or the memory the record's
// placements allocated is gone.
func (g *Graph) anyStale() bool {
	return g.any.s.table.Digest(g.any.regions) != g.any.start || !g.usesMapped()
}

// usesMapped reports whether each mapping g's nodes use is still the
// recorded one. The table's digest cannot say it: a record that starts on
// buffers no device holds allocates them as it places its tasks, so after
// Taskwait gave them back the digest is the start's again, but the memory
// is gone. Checked with the placer's lock held, which the hand-back takes
// too, before the replay commits its accesses to the table.
func (g *Graph) usesMapped() bool {
	for _, u := range g.uses {
		if e, _ := u.dev.table.Lookup(u.addr, u.size); e != u.e {
			return false
		}
	}
	return true
}

// errAnyStale is the error of a replay whose Any-tasks' plan is stale.
func (a *graphAny) stale() error {
	return Errorf("goffload: Any(): taskgraph: %w: the valid copies of the graph's buffers are not where the record found them (a construct outside the graph moved, wrote or freed one, or the graph's end differs from its start): Run records the graph again", ErrGraphChanged)
}

// replayAny checks g's Any-tasks' plan against the table and commits it
// again, with fresh numbers (a replayed task is not kept for re-runs);
// make makes the replay's task, with s.mu held, so that its place among
// the tasks on the buffers is the table's.
func (g *Graph) replayAny(make func() *Task) (*Task, error) {
	a := g.any
	s := a.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noteLost()
	if g.anyStale() {
		return nil, a.stale()
	}
	t := make()
	for _, c := range a.commits {
		s.rr.next++
		s.table.Commit(c.dev, c.acc, s.rr.next)
	}
	s.tracked.Store(int64(s.table.Len()))
	s.wrote(t, a.writes)
	return t, nil
}

// AnyJoined makes the record's task t make the host's copies of what g's
// Any-tasks wrote valid at its Wait, as their own Waits would.
func (g *Graph) AnyJoined(t *Task) {
	if g.any != nil && t != nil {
		g.any.s.wrote(t, g.any.writes)
	}
}

// wrote records that task t's Wait makes bufs' host copies valid.
func (s *anySched) wrote(t *Task, bufs []placement.Buf) {
	if len(bufs) == 0 {
		return
	}
	s.wmu.Lock()
	s.writes[t.ID] = bufs
	s.wmu.Unlock()
}
