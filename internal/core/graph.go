package core

// Recorded task graphs (OpenMP 6.0's taskgraph): a function's tasks,
// recorded once with what they were lowered to, and replayed on the same
// buffers as one task, with no dependence analysis, present-table plan or
// lowering per task. graph.go holds the graph and its record; replay.go
// runs it.

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/internal/mapping"
	"github.com/goffload/offload/plugin"
)

// ErrGraphChanged is wrapped by the error of a replay whose tasks differ
// from the recorded ones (kernel, device, buffers, depend clauses, their
// number), or whose buffers were unmapped or mapped again since the
// record. It wraps ErrBadArgument. Nothing of such a replay runs.
var ErrGraphChanged = fmt.Errorf("%w: the task graph differs from the one recorded", ErrBadArgument)

// ErrUnwaitableEdge is wrapped (with plugin.ErrUnsupported) by a record's
// error where two of its nodes are on devices whose queues cannot wait on
// each other's events: an edge between them would wait on the host.
var ErrUnwaitableEdge = errors.New("a recorded edge between them would wait on the host")

// maxLanes is how many queues a graph uses on one device at most:
// independent nodes beyond that share them (in the graph's order).
const maxLanes = 4

// Graph is a recorded task graph: its nodes in the order they were made
// (a topological order), each on a lane (a queue of its device), with the
// nodes of other lanes it waits for. It is built by Add and Seal, then
// only read: Replay runs it.
type Graph struct {
	rt    *Runtime
	nodes []gnode
	lanes []glane
	uses  []guse // the mappings the nodes' buffers lie in, checked at each replay
	deps  []Dep  // the nodes' clauses: the replay's own
	nargs int    // the nodes' arguments, all together
	seal  bool
	// any is what the graph holds of its Any-tasks (package anyrun), nil
	// without; anyErr is the first of them that could not be recorded.
	any    GraphAny
	anyErr error
	// parts are the graph's parts on devices that keep them
	// (replay.go), defined at the first replay; noParts says they
	// could not be. Set by replays, one at a time.
	parts   *gparts
	noParts bool
	queued  atomic.Uint64 // replays queued behind the last (Queued)
	// Guarded by the runtime's tasks.mu: the last replay, which the next
	// one comes after; the last replay whose parts' run was sent (a next
	// one may be queued behind it on the device: GraphQueuer); a replay
	// waiting for its predecessor's send to be queued; and whether the
	// graph was let go (Release).
	last     *Task
	sent     *Task
	waiting  map[*Task]*queuedRun // by the replay each comes after, until that one is sent or ends
	released bool
}

// gnode is one recorded task, lowered: a launch of k with args (device
// addresses fixed; scalars the replay's own), or copies (a copy's one, an
// update's one per item).
type gnode struct {
	dev    *Device
	name   string
	k      *entries.Kernel
	geo    plugin.Geometry
	off    int // its arguments in the graph's: [off, off+len(args))
	args   []plugin.Arg
	copies []gcopy // a copy's, or an update's (nil k)
	deps   []Dep

	lane   int
	waits  []int // nodes on other lanes it comes after
	signal bool  // a node on another lane waits for it: an event follows it
}

// gcopy is a recorded copy (omp_target_memcpy): its ends and size.
type gcopy struct {
	dst, src Loc
	n        int64
}

// glane is a queue of one device that a replay takes from the pool.
type glane struct {
	dev  *Device
	last int // the node enqueued on it last while sealing
}

// guse is a mapping a recorded node's buffer lies in.
type guse struct {
	dev  *Device
	e    *mapping.Entry
	addr uintptr
	size int64
	name string
}

// NewGraph returns an empty graph to record into.
func (r *Runtime) NewGraph() *Graph { return &Graph{rt: r} }

// Len is the number of recorded nodes.
func (g *Graph) Len() int { return len(g.nodes) }

// Args returns a copy of the recorded nodes' arguments, for a replay to
// set its scalars in: node i's are ArgsOf(i) of it.
func (g *Graph) Args() []plugin.Arg {
	a := make([]plugin.Arg, 0, g.nargs)
	for i := range g.nodes {
		a = append(a, g.nodes[i].args...)
	}
	return a
}

// ArgsOf is where node i's arguments lie in Args' slice.
func (g *Graph) ArgsOf(i int) (from, to int) {
	n := &g.nodes[i]
	return n.off, n.off + len(n.args)
}

// NoteAny notes err, an Any-task's node that could not be recorded: the
// task runs, and Seal fails with the first such error.
func (g *Graph) NoteAny(err error) {
	if err != nil && g.anyErr == nil {
		g.anyErr = err
	}
}

// recordable reports why a task on d cannot be recorded, or nil.
func recordable(d *Device, what string) error {
	if d == nil || d.IsInitial() {
		return Errorf("goffload: taskgraph: %s on the initial device: %w: a recorded task runs on a device (its queues are replayed)", what, ErrBadArgument)
	}
	return nil
}

// AddLaunch records the launch of k on d with args and geometry geo, under
// the depend clauses deps. A buffer argument must be present on d (mapped
// by an enclosing data region or enter data), mapped without always: its
// device address is recorded, and no map of it is replayed.
func (g *Graph) AddLaunch(d *Device, k *entries.Kernel, args []KernelArg, geo plugin.Geometry, deps []Dep) error {
	if err := g.adding(d, k.Name()); err != nil {
		return err
	}
	target := "target " + k.Name()
	pargs := make([]plugin.Arg, len(args))
	err := lowerArgs(k, args, pargs, func(i int, m MapItem) (plugin.Ptr, error) {
		if m.Type&mapping.MapAlways != 0 {
			return 0, Errorf("goffload: %s: taskgraph: target %s: argument %d (%s): %w: map(always, %s) is not recorded: update the buffer with a task outside the graph",
				d.Label(), k.Name(), i, nameOf(m.Buf.Name), ErrBadArgument, m.Kind())
		}
		return g.present(d, target, m)
	})
	if err != nil {
		return err
	}
	g.nodes = append(g.nodes, gnode{dev: d, name: k.OpName(), k: k, geo: geo, off: g.nargs, args: pargs, deps: deps})
	g.nargs += len(pargs)
	return nil
}

// AddCopy records a copy of n bytes from src to dst on the queue of the
// device that Memcpy's lowering picks (the source's, unless it is host
// memory), under deps. Both ends are fixed: host memory by its address,
// device memory by its pointer.
func (g *Graph) AddCopy(dst, src Loc, n int64, deps []Dep) error {
	d := src.Dev
	if !src.onDevice() {
		d = dst.Dev
	}
	if !dst.onDevice() && !src.onDevice() {
		d = nil
	}
	if err := g.adding(d, "omp_target_memcpy"); err != nil {
		return err
	}
	g.nodes = append(g.nodes, gnode{dev: d, name: "omp_target_memcpy", copies: []gcopy{{dst: dst, src: src, n: n}}, deps: deps})
	return nil
}

// AddUpdate records target update of items on d under deps: each item's
// buffer must be present on d, and is copied to (to) or from (from) its
// recorded device address at each replay.
func (g *Graph) AddUpdate(d *Device, items []MapItem, deps []Dep) error {
	const op = "target update"
	if err := g.adding(d, op); err != nil {
		return err
	}
	n := gnode{dev: d, name: op, deps: deps}
	for _, m := range items {
		if m.Unmappable != "" || m.Type&(mapping.MapTo|mapping.MapFrom) == 0 {
			return Errorf("goffload: %s: taskgraph: %s: %w: map(%s) of %s: an update copies to or from the device", d.Label(), op, ErrBadMap, m.Kind(), nameOf(m.Buf.Name))
		}
		if m.Buf.Size == 0 {
			continue
		}
		tgt, err := g.present(d, op, m)
		if err != nil {
			return err
		}
		host := Loc{Host: m.Buf.Bytes()}
		dev := Loc{Dev: d, Ptr: tgt}
		if m.Type&mapping.MapTo != 0 {
			n.copies = append(n.copies, gcopy{dst: dev, src: host, n: m.Buf.Size})
		} else {
			n.copies = append(n.copies, gcopy{dst: host, src: dev, n: m.Buf.Size})
		}
	}
	g.nodes = append(g.nodes, n)
	return nil
}

func (g *Graph) adding(d *Device, what string) error {
	if g.seal {
		return Errorf("goffload: taskgraph: %s: %w: the graph is sealed", what, ErrBadArgument)
	}
	return recordable(d, what)
}

// present finds the mapping of m's buffer on d, which a recorded node
// (construct op) uses, and returns the buffer's device address.
func (g *Graph) present(d *Device, op string, m MapItem) (plugin.Ptr, error) {
	addr, size := m.Buf.Addr(), m.Buf.Size
	e, tgt := d.table.Lookup(addr, size)
	if size == 0 {
		return tgt, nil
	}
	if e == nil {
		return 0, d.mapErr("taskgraph: "+op, m, ErrNotPresent,
			"a recorded task's buffers are mapped before the graph (Data, EnterData): it replays no map")
	}
	for _, u := range g.uses {
		if u.dev == d && u.e == e && u.addr <= addr && addr+uintptr(size) <= u.addr+uintptr(u.size) {
			return tgt, nil
		}
	}
	g.uses = append(g.uses, guse{dev: d, e: e, addr: addr, size: size, name: m.Buf.Name})
	return tgt, nil
}

// Seal ends the record. It finds the nodes' edges from their own depend
// clauses (OpenMP's rules, as Spawn's). It puts each node on a lane of its
// device. It checks that each edge between devices can be waited for on the
// device. The graph's clauses are the union of the nodes'.
func (g *Graph) Seal() error {
	if g.seal {
		return nil
	}
	if g.anyErr != nil {
		return g.anyErr
	}
	g.seal = true
	if g.any != nil {
		g.any.Seal()
	}
	var dg depGraph
	var kn known
	ts := make([]*Task, len(g.nodes))
	index := make(map[*Task]int, len(g.nodes))
	seen := map[Dep]bool{}
	for i := range g.nodes {
		n := &g.nodes[i]
		t := &Task{}
		ts[i], index[t] = t, i
		preds := dg.add(t, n.deps)
		g.place(i, preds, index, &kn)
		for _, d := range n.deps {
			key := Dep{Kind: d.Kind, Addr: d.Addr, Size: d.Size}
			if !seen[key] {
				seen[key] = true
				g.deps = append(g.deps, d)
			}
		}
	}
	for i := range g.nodes {
		for _, p := range g.nodes[i].waits {
			if err := canWaitOn(g.nodes[i].dev, g.nodes[p].dev); err != nil {
				return Errorf("goffload: taskgraph: node %d (%s) after node %d (%s): %w", i, g.nodes[i].name, p, g.nodes[p].name, err)
			}
		}
	}
	return nil
}

// place puts node i, whose predecessors are preds, on a lane. It prefers the
// device's lane that holds most predecessors already: queue order is the wait.
// Else it takes a new lane, while the device has fewer than maxLanes. Else it
// takes the device's lane whose last node is oldest. The predecessors on other
// lanes are waited for by event. Those the lane knows are done already (kn)
// are not.
func (g *Graph) place(i int, preds []*Task, index map[*Task]int, kn *known) {
	n := &g.nodes[i]
	count := map[int]int{}
	for _, p := range preds {
		if l := g.nodes[index[p]].lane; g.lanes[l].dev == n.dev {
			count[l]++
		}
	}
	lane, best := -1, 0
	for l, c := range count {
		if c > best || (c == best && l < lane) {
			lane, best = l, c
		}
	}
	if lane < 0 {
		own, oldest := 0, -1
		for l := range g.lanes {
			if g.lanes[l].dev != n.dev {
				continue
			}
			own++
			if oldest < 0 || g.lanes[l].last < g.lanes[oldest].last {
				oldest = l
			}
		}
		if own < maxLanes {
			g.lanes = append(g.lanes, glane{dev: n.dev})
			lane = len(g.lanes) - 1
		} else {
			lane = oldest
		}
	}
	n.lane = lane
	g.lanes[lane].last = i
	ps := make([]int, 0, len(preds))
	for _, p := range preds {
		ps = append(ps, index[p])
	}
	slices.Sort(ps) // the latest first, below: waiting for it may imply the others
	for k := len(ps) - 1; k >= 0; k-- {
		pi := ps[k]
		if m := g.nodes[pi].lane; m != lane && !kn.done(lane, m, pi) {
			n.waits = append(n.waits, pi)
			g.nodes[pi].signal = true
			kn.wait(lane, pi)
		}
	}
	kn.at(lane, i)
}

// known holds, for each lane, the last node of each lane it knows is done when
// its next node runs. Queue order tells it its own. Waiting for a node of
// another lane tells it what that lane knew there (vector clocks). A
// predecessor known done needs no wait. On local devices, a wait and its event
// are messages.
type known struct {
	now  [][]int // by lane, by lane: a node index, -1 for none
	seen [][]int // by node: its lane's now once it ran
}

func (kn *known) lane(l int) []int {
	for len(kn.now) <= l {
		kn.now = append(kn.now, nil)
	}
	return kn.now[l]
}

// done reports whether lane l knows node p of lane m is done.
func (kn *known) done(l, m, p int) bool {
	v := kn.lane(l)
	return m < len(v) && v[m] >= p
}

// wait records that lane l waits for node p: what p's lane knew then is
// known to l too.
func (kn *known) wait(l, p int) {
	v := kn.lane(l)
	for m, q := range kn.seen[p] {
		for len(v) <= m {
			v = append(v, -1)
		}
		v[m] = max(v[m], q)
	}
	kn.now[l] = v
}

// at records node i running on lane l.
func (kn *known) at(l, i int) {
	v := kn.lane(l)
	for len(v) <= l {
		v = append(v, -1)
	}
	v[l] = i
	kn.now[l] = v
	for len(kn.seen) <= i {
		kn.seen = append(kn.seen, nil)
	}
	kn.seen[i] = slices.Clone(v)
}

// canWaitOn reports why d's queues cannot wait on p's events, or nil.
func canWaitOn(d, p *Device) error {
	if d == p {
		return nil
	}
	fw, ok := d.Dev.(plugin.ForeignEventWaiter)
	if ok {
		ev, err := p.Dev.NewEvent()
		if err != nil {
			return Errorf("goffload: %s: cannot make an event: %w", p.Label(), err)
		}
		ok = fw.CanWait(ev)
		_ = ev.Close()
	}
	if !ok {
		return Errorf("goffload: %s cannot wait on the events of %s: %w: %w", d.Label(), p.Label(), plugin.ErrUnsupported, ErrUnwaitableEdge)
	}
	return nil
}

// errNotSealed is the error of a replay of a graph not sealed.
var errNotSealed = errors.New("goffload: taskgraph: the graph is not sealed")

// GraphAny is what a recorded graph keeps of its Any-tasks: their plan,
// which package anyrun makes at the record and checks at each replay.
type GraphAny interface {
	// Seal notes the touched regions' states at the record's end.
	Seal()
	// Replay checks the plan against the placement's state and commits it
	// again; make makes the replay's task, inside the placement's lock.
	Replay(make func() *Task) (*Task, error)
}

// Any is what g keeps of its Any-tasks, or nil.
func (g *Graph) Any() GraphAny { return g.any }

// SetAny sets what g keeps of its Any-tasks (at its first Any-task).
func (g *Graph) SetAny(a GraphAny) { g.any = a }

// HasAny reports whether g holds Any-tasks.
func (g *Graph) HasAny() bool { return g.any != nil }

// Runtime is the runtime g records on.
func (g *Graph) Runtime() *Runtime { return g.rt }

// UsesMapped reports whether each mapping g's nodes use is still the
// recorded one. The placement's digest cannot say it: a record that
// starts on buffers no device holds allocates them as it places its
// tasks. After Taskwait gave them back the digest is the start's again,
// but the memory is gone.
func (g *Graph) UsesMapped() bool {
	for _, u := range g.uses {
		if e, _ := u.dev.table.Lookup(u.addr, u.size); e != u.e {
			return false
		}
	}
	return true
}
