package anyrun

import (
	"fmt"
	"slices"

	"github.com/goffload/offload/internal/core"
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
	g *core.Graph
	s *anySched
	// all is every region's digest when the first Any-task was placed. start
	// and end are the touched regions' digests at the record's start and end,
	// once sealed.
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

// AnyTargetIn is AnyTarget inside a graph's record. The task is placed and
// made as AnyTarget makes it. Its copies and launch are added to g as nodes.
// An error means no task was made, or the plan was not recorded. The record
// fails then.
func AnyTargetIn(r *core.Runtime, g *core.Graph, l AnyLaunch) (*core.Task, error) {
	fail := func(err error) error {
		return core.Errorf("goffload: Any(): taskgraph: target %s%s: %w", l.Kernel.Name(), l.Kernel.Describe(), err)
	}
	acc, bufs, argOf, size, err := anyArgs(l.Args)
	if err != nil {
		return nil, fail(fmt.Errorf("%w: %v", core.ErrBadArgument, err))
	}
	t, err := placer(r).place(&anyTask{AnyLaunch: l, acc: acc, bufs: bufs, argOf: argOf, size: size, rec: g})
	if err != nil {
		return nil, fail(err)
	}
	return t, nil
}

// recordStart notes the table's state before the graph's first Any-task;
// s.mu is held.
func recordStart(g *core.Graph, s *anySched) {
	if g.Any() != nil {
		return
	}
	g.SetAny(&graphAny{g: g, s: s, all: s.table.Digests()})
}

// recordCopy adds copy c, made on the queue of on, as a node. The node is an
// update to d from the host, or a copy between devices.
func recordCopy(g *core.Graph, d *core.Device, c placement.Copy, buf mapping.Buf, dst, src core.Loc, deps []core.Dep) error {
	if c.From == placement.Host {
		return g.AddUpdate(d, []core.MapItem{{Buf: buf, Type: mapping.MapTo}}, deps)
	}
	return g.AddCopy(dst, src, int64(c.Buf.Size), deps)
}

// recordLaunch adds t's launch on device d, with its present arguments
// and full depend clauses, and notes its accesses for replays.
func recordLaunch(g *core.Graph, t *anyTask, d int, args []core.KernelArg, deps []core.Dep) error {
	if err := g.AddLaunch(g.Runtime().Devices[d], t.Kernel, args, t.Geo, deps); err != nil {
		return err
	}
	a := g.Any().(*graphAny)
	a.commits = append(a.commits, anyCommit{dev: d, acc: slices.Clone(t.acc)})
	for _, ac := range t.acc {
		if ac.Write {
			a.writes = append(a.writes, ac.Buf)
		}
	}
	return nil
}

// Seal notes the touched regions' states at the record's start and end.
func (a *graphAny) Seal() {
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

// AnyStale reports whether the table's state of g's regions has changed. It is
// compared with the state g's Any-tasks were placed in. A replay would fail
// then.
func AnyStale(g *core.Graph) bool {
	a, _ := g.Any().(*graphAny)
	if a == nil {
		return false
	}
	a.s.mu.Lock()
	defer a.s.mu.Unlock()
	return a.isStale()
}

// isStale is AnyStale with the placer's lock held. The graph is stale if the
// table's state of its regions is not the record's start. It is also stale if
// memory the record's placements allocated is gone (Graph.UsesMapped). That
// check runs with the placer's lock held, which the hand-back takes too. It
// comes before the replay commits its accesses to the table.
func (a *graphAny) isStale() bool {
	return a.s.table.Digest(a.regions) != a.start || !a.g.UsesMapped()
}

// errAnyStale is the error of a replay whose Any-tasks' plan is stale.
func (a *graphAny) stale() error {
	return core.Errorf("goffload: Any(): taskgraph: %w: the valid copies of the graph's buffers are not where the record found them (a construct outside the graph moved, wrote or freed one, or the graph's end differs from its start): Run records the graph again", core.ErrGraphChanged)
}

// Replay checks the graph's Any-tasks' plan against the table and commits it
// again, with fresh numbers. A replayed task is not kept for re-runs. make
// makes the replay's task, with s.mu held. So its place among the tasks on the
// buffers is the table's.
func (a *graphAny) Replay(make func() *core.Task) (*core.Task, error) {
	s := a.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noteLost()
	if a.isStale() {
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

// AnyJoined makes the record's task t validate the host's copies of what g's
// Any-tasks wrote. It does so at its Wait, as their own Waits would.
func AnyJoined(g *core.Graph, t *core.Task) {
	if a, _ := g.Any().(*graphAny); a != nil && t != nil {
		a.s.wrote(t, a.writes)
	}
}

// wrote records that task t's Wait makes bufs' host copies valid.
func (s *anySched) wrote(t *core.Task, bufs []placement.Buf) {
	if len(bufs) == 0 {
		return
	}
	s.wmu.Lock()
	s.writes[t.ID] = bufs
	s.wmu.Unlock()
}
