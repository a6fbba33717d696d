package core

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goffload/offload/internal/config"
	"github.com/goffload/offload/internal/mapping"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/tool"
)

// Replay runs g's nodes again as one task, with args. args is a slice from
// Args, with the replay's scalars set in it; the nodes' device addresses are
// as recorded. The task comes after the tasks that g's depend clauses name, as
// a task with all of them would. It also comes after g's last replay. Tasks
// made later that name them come after it. When its predecessors are done, it
// checks the mappings the nodes' buffers lie in. They must be the recorded
// ones; else it fails with ErrGraphChanged, and nothing runs. Then it enqueues
// every node on its lane, behind event waits for its predecessors on other
// lanes. It completes once every lane's work is done, with the first error any
// of them had. It makes no task per node. A node's failure is the replay's,
// and the nodes after it run on what it left.
//
// A graph of Any-tasks is replayed only while the valid copies of its buffers
// are where its record found them. Else Replay makes no task and returns an
// error wrapping ErrGraphChanged.
func (g *Graph) Replay(args []plugin.Arg) (*Task, error) {
	if g.any != nil && g.seal {
		return g.any.Replay(func() *Task { return g.replay(args) })
	}
	return g.replay(args), nil
}

// replay is Replay's task.
func (g *Graph) replay(args []plugin.Arg) *Task {
	r := g.rt
	t := &Task{Name: "taskgraph", dev: r.Initial}
	preds := r.register(t, g.deps)
	ts := &r.tasks
	ts.mu.Lock()
	last := g.last
	g.last = t
	mayQueue := last != nil && g.any == nil && !g.released
	ts.mu.Unlock()
	body := stepFunc(func() step {
		if !g.seal {
			return r.completeThen(t, errNotSealed, nil)
		}
		if f := failedPred(preds); f != nil { // they are all done
			return r.completeThen(t, depErr(t, f), f)
		}
		if len(args) != g.nargs {
			return r.completeThen(t, Errorf("goffload: taskgraph: %w: %d arguments, want %d", ErrBadArgument, len(args), g.nargs), nil)
		}
		g.start(t, args)
		return nil
	})
	if !mayQueue {
		wait := preds
		if last != nil {
			wait = append(preds[:len(preds):len(preds)], last)
		}
		runHere(r.afterHost(t, r.Initial, wait, body))
		return t
	}
	// The replay may be queued behind last on its device (GraphQueuer)
	// once last's run is sent, instead of waiting here for its end: it
	// waits here for its other predecessors, then for whichever comes
	// first, last's run sent (queue it) or last's end (start it as usual).
	var others []*Task
	for _, p := range preds {
		if p != last {
			others = append(others, p)
		}
	}
	q := &queuedRun{after: last, chained: len(others) < len(preds), t: t, args: args}
	afterLast := stepFunc(func() step {
		ts.mu.Lock()
		if g.waiting[last] == q { // last ended unsent
			delete(g.waiting, last)
		}
		ts.mu.Unlock()
		q.mu.Lock()
		taken := q.taken
		q.taken = true
		q.mu.Unlock()
		if taken { // queued on the device
			return nil
		}
		return body
	})
	first := stepFunc(func() step {
		if f := failedPred(others); f != nil || !g.seal || len(args) != g.nargs {
			return r.waitFor(t, []*Task{last}, false, body) // the usual error, after last
		}
		ts.mu.Lock()
		sent := g.sent == last && g.mayQueue(last)
		if !sent && !last.completed {
			if g.waiting == nil {
				g.waiting = map[*Task]*queuedRun{}
			}
			g.waiting[last] = q // last's send queues it (startParts)
		}
		ts.mu.Unlock()
		if sent && g.queue(q) {
			return nil
		}
		return r.waitFor(t, []*Task{last}, false, afterLast)
	})
	runHere(r.afterHost(t, r.Initial, others, first))
	return t
}

// Queued is how many of g's replays were queued behind the last one on
// their device (GraphQueuer) rather than started after its end here.
func (g *Graph) Queued() uint64 { return g.queued.Load() }

// mayQueue reports whether a replay after last can be queued behind it on
// its device rather than wait for it here: last's run was sent, to the
// graph's one part, whose runner queues runs. Under the runtime's tasks.mu.
func (g *Graph) mayQueue(last *Task) bool {
	p := g.parts
	if p == nil || len(p.runs) != 1 || g.sent != last || g.released || g.any != nil {
		return false
	}
	_, ok := p.runs[0].(plugin.GraphQueuer)
	return ok
}

// queue starts q's replay behind the last one on the device of the
// graph's one part, if it can be (mayQueue, a runner that queues its args,
// the mappings held with no copy into them in flight, and startParts'
// own conditions), and reports whether
// it did; once it did, or the last one ended, the other is a no-op. The
// replay completes after the last one; chained, with its failure if it
// failed.
func (g *Graph) queue(q *queuedRun) bool {
	r := g.rt
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.taken {
		return false
	}
	r.tasks.mu.Lock()
	ok := g.mayQueue(q.after)
	r.tasks.mu.Unlock()
	if !ok || !g.parts.runs[0].(plugin.GraphQueuer).Queues(q.args) {
		return false
	}
	held, pend, err := g.hold()
	if err == nil && len(pend) == 0 && g.startParts(q.t, q.args, held, pend, q) {
		q.taken = true
		g.queued.Add(1)
		return true
	}
	g.unhold(held)
	return false // after the last one: the usual start, which reports an error
}

// Join returns a task that completes once every task of ts has, failing
// with the first failure among them (a dependency error), else with err:
// the record's task. It comes after them and before g's first replay, and
// tasks made later that name g's clauses come after it.
func (g *Graph) Join(ts []*Task, err error) *Task {
	r := g.rt
	t := &Task{Name: "taskgraph", dev: r.Initial}
	preds := r.register(t, g.deps)
	r.tasks.mu.Lock()
	g.last = t
	r.tasks.mu.Unlock()
	all := append(preds[:len(preds):len(preds)], ts...)
	body := stepFunc(func() step {
		if f := failedPred(all); f != nil {
			return r.completeThen(t, depErr(t, f), f)
		}
		return r.completeThen(t, err, nil)
	})
	runHere(r.afterHost(t, r.Initial, all, body))
	return t
}

// start enqueues a replay's nodes and completes t when they are done.
func (g *Graph) start(t *Task, args []plugin.Arg) {
	r := g.rt
	held, pend, err := g.hold()
	if err != nil {
		g.unhold(held)
		r.complete(t, err, nil)
		return
	}
	if g.startParts(t, args, held, pend, nil) {
		return
	}
	qs := make([]*cqueue, len(g.lanes))
	failed := make([]bool, len(g.lanes))
	var first error
	note := func(l int, err error) {
		failed[l] = true
		g.lanes[l].dev.noteLost(err)
		if first == nil {
			first = err
		}
	}
	for l := range g.lanes {
		d := g.lanes[l].dev
		if qs[l], err = d.getQueue("taskgraph"); err != nil {
			first = err
			break
		}
		// The replay's span (on its first lane), opened before the tags go
		// out (as beginOn's): the devices' times of its operations lie
		// inside it.
		if l == 0 && d.tool != nil {
			d.tool.TargetBegin(tool.TargetEvent{Where: tool.Where{Time: time.Now(), Device: d.Num, Queue: qs[l].id, Task: t.ID}, Name: "taskgraph", Nowait: true})
		}
		if d.tagged.Load() { // its operations' times are the replay's, not the queue's last task's
			if tq, ok := qs[l].Queue.(plugin.TaggedQueue); ok {
				tq.Tag(t.ID)
			}
		}
		for _, p := range pend {
			if p.dev == d {
				if err := qs[l].Wait(p.ev); err != nil {
					note(l, Errorf("goffload: %s: taskgraph: waiting for the copy into a buffer: %w", d.Label(), err))
				}
			}
		}
	}
	evs := make([]plugin.Event, len(g.nodes))
	for i := range g.nodes {
		if first != nil {
			break
		}
		n := &g.nodes[i]
		q := qs[n.lane]
		for _, p := range n.waits {
			if err := q.Wait(evs[p]); err != nil {
				note(n.lane, Errorf("goffload: %s: taskgraph: node %d (%s): waiting for node %d: %w", n.dev.Label(), i, n.name, p, err))
			}
		}
		if n.k == nil {
			for j := range n.copies {
				if err = n.copies[j].enqueue(q.Queue); err != nil {
					break
				}
			}
		} else {
			err = launch(q.Queue, n.k, args[n.off:n.off+len(n.args)], n.geo, nil)
		}
		if err != nil {
			note(n.lane, Errorf("goffload: %s: taskgraph: node %d (%s): %w", n.dev.Label(), i, n.name, err))
			break
		}
		if n.signal {
			ev, err := recordOn(n.dev, q.Queue)
			if err != nil {
				note(n.lane, Errorf("goffload: %s: taskgraph: node %d (%s): %w", n.dev.Label(), i, n.name, err))
				break
			}
			evs[i] = ev
		}
	}
	ends := make([]plugin.Event, len(qs))
	for l, q := range qs {
		if q == nil {
			continue
		}
		ev, err := recordOn(g.lanes[l].dev, q.Queue)
		if err != nil {
			note(l, Errorf("goffload: %s: taskgraph: %w", g.lanes[l].dev.Label(), err))
			continue
		}
		ends[l] = ev
	}
	go func() {
		for l, ev := range ends {
			if ev == nil {
				if qs[l] != nil { // no event: the queue itself
					if err := qs[l].Synchronize(); err != nil {
						note(l, Errorf("goffload: %s: taskgraph: %w", g.lanes[l].dev.Label(), err))
					}
				}
				continue
			}
			if err := ev.Synchronize(); err != nil {
				note(l, Errorf("goffload: %s: taskgraph: %w", g.lanes[l].dev.Label(), err))
			}
			_ = ev.Close()
		}
		for _, ev := range evs {
			if ev != nil {
				_ = ev.Close()
			}
		}
		for l, q := range qs {
			if q == nil {
				continue
			}
			d := g.lanes[l].dev
			if l == 0 && d.tool != nil { // every lane's end was waited for above
				d.tool.TargetEnd(tool.TargetEvent{Where: tool.Where{Time: time.Now(), Device: d.Num, Queue: q.id, Task: t.ID}, Name: "taskgraph", Nowait: true, Err: first})
			}
			d.release(q, failed[l])
		}
		g.unhold(held)
		r.complete(t, first, nil)
	}()
}

// pendingCopy is a copy into a mapping that a replay's lanes on dev wait
// for: the mapping's last copy in had not fired when the replay began.
type pendingCopy struct {
	dev *Device
	ev  plugin.Event
}

// hold takes a use of each mapping g's nodes use, checking that it is the
// recorded one: its memory stays until unhold. It returns the uses taken
// (for unhold, also on error) and the copies into them still in flight.
func (g *Graph) hold() ([]*mapping.Entry, []pendingCopy, error) {
	held := make([]*mapping.Entry, 0, len(g.uses))
	var pend []pendingCopy
	for i := range g.uses {
		u := &g.uses[i]
		var p mapping.Plan
		u.dev.table.Use(&p, u.addr, u.size)
		if p.Entry != u.e {
			if p.Entry != nil {
				u.dev.done(p.Entry)
			}
			return held, nil, Errorf("goffload: %s: taskgraph: buffer %s (%d bytes at %#x): %w: its mapping is not the one recorded (it was unmapped, or mapped again): record the graph again",
				u.dev.Label(), nameOf(u.name), u.size, u.addr, ErrGraphChanged)
		}
		held = append(held, u.e)
		if p.Do&mapping.WaitCopy != 0 && p.Event != nil {
			if fired, _ := p.Event.Query(); !fired {
				pend = append(pend, pendingCopy{u.dev, p.Event})
			}
		}
	}
	return held, pend, nil
}

// unhold ends the uses hold took.
func (g *Graph) unhold(held []*mapping.Entry) {
	for i, e := range held {
		g.uses[i].dev.done(e)
	}
}

// done ends a use of e that no work holds, freeing it if that was the
// last use of an entry that left the table (as work.release does).
func (d *Device) done(e *mapping.Entry) {
	last, ev := d.table.Done(e)
	if !last {
		return
	}
	if e.Owned() {
		if err := d.Dev.Free(e.Tgt()); err != nil {
			d.log.Printf(config.InfoMappingChanged, d.Num, "Freeing TgtPtrBegin=%#x failed: %v", uint64(e.Tgt()), err)
		}
	}
	if ev != nil {
		_ = ev.Close()
	}
}

// recordOn records a new event of d on q.
func recordOn(d *Device, q plugin.Queue) (plugin.Event, error) {
	ev, err := d.Dev.NewEvent()
	if err != nil {
		return nil, err
	}
	if err := q.Record(ev); err != nil {
		_ = ev.Close()
		return nil, err
	}
	return ev, nil
}

// enqueue enqueues the copy on q, as MemcpyOp lowers it. A copy between
// devices that q cannot make itself is an error. A staged copy is host work,
// which a replay does not do.
func (c *gcopy) enqueue(q plugin.Queue) error {
	switch {
	case c.dst.onDevice() && !c.src.onDevice():
		return q.Submit(c.dst.Ptr, c.src.Host[:c.n])
	case !c.dst.onDevice() && c.src.onDevice():
		return q.Retrieve(c.dst.Host[:c.n], c.src.Ptr)
	}
	return exchange(q, c.dst.Dev.Dev, c.dst.Ptr, c.src.Ptr, c.n)
}

// Replays on devices that keep their part of a graph
// (plugin.GraphDefiner, device processes): each device's nodes, their
// waits on other lanes' nodes and the signals those wait for are defined
// on it once, at the first replay, and each replay is one Run per device,
// whose event fires when its part is done. A graph with a node no part
// takes (a copy to or from the host, a launch with a geometry, a device
// of another kind) replays operation by operation, as do replays whose
// lanes must wait for copies into their buffers, or whose devices are
// traced with their own times.

// gparts is a graph's parts: one runner per device, in devs' order.
type gparts struct {
	devs []*Device
	runs []plugin.GraphRunner
	gen  uint64
	once sync.Once
}

// free forgets the parts on their devices.
func (p *gparts) free() {
	p.once.Do(func() {
		for _, r := range p.runs {
			_ = r.Free()
		}
	})
}

// graphKeys numbers the graphs defined on devices.
var graphKeys atomic.Uint64

// startParts runs the replay t on the graph's parts and reports whether it
// did. It defines the parts first if this is the first replay. If it did not,
// the caller replays operation by operation. held are the mappings the replay
// holds, released at its end.
func (g *Graph) startParts(t *Task, args []plugin.Arg, held []*mapping.Entry, pend []pendingCopy, q *queuedRun) bool {
	if g.noParts || len(pend) > 0 {
		return false
	}
	r := g.rt
	r.tasks.mu.Lock()
	released := g.released
	r.tasks.mu.Unlock()
	if released {
		return false
	}
	for l := range g.lanes {
		if g.lanes[l].dev.tagged.Load() {
			return false
		}
	}
	p := g.parts
	if p == nil {
		if p = g.defineParts(); p == nil {
			g.noParts = true
			return false
		}
		r.tasks.mu.Lock()
		g.parts = p
		r.tasks.mu.Unlock()
	}
	p.gen++
	d0 := g.lanes[0].dev
	if d0.tool != nil {
		d0.tool.TargetBegin(tool.TargetEvent{Where: tool.Where{Time: time.Now(), Device: d0.Num, Task: t.ID}, Name: "taskgraph", Nowait: true})
	}
	evs := make([]plugin.Event, len(p.runs))
	errs := make([]error, len(p.runs))
	for i, run := range p.runs {
		if q != nil {
			evs[i], errs[i] = run.(plugin.GraphQueuer).RunQueued(p.gen, args, q.chained)
		} else {
			evs[i], errs[i] = run.Run(p.gen, args)
		}
	}
	r.tasks.mu.Lock()
	g.sent = t
	next := g.waiting[t]
	delete(g.waiting, t)
	r.tasks.mu.Unlock()
	if next != nil { // the next replay waited for this one's send
		go g.queue(next)
	}
	go func() {
		if q != nil { // queued behind it: it completes first
			<-q.after.Done()
		}
		var first error
		lost := false // first is a device's own loss, not another's word of it
		for i, ev := range evs {
			err := errs[i]
			if ev != nil {
				err = ev.Synchronize()
				_ = ev.Close()
			}
			if err != nil {
				d := p.devs[i]
				err = Errorf("goffload: %s: taskgraph: %w", d.Label(), err)
				d.noteLost(err)
				own := selfLost(d)
				if first == nil || (own && !lost) {
					first, lost = err, own
				}
			}
		}
		if d0.tool != nil {
			d0.tool.TargetEnd(tool.TargetEvent{Where: tool.Where{Time: time.Now(), Device: d0.Num, Task: t.ID}, Name: "taskgraph", Nowait: true, Err: first})
		}
		g.unhold(held)
		if q != nil && q.chained && q.after.err != nil { // the device ran nothing of t
			f := q.after.fail
			r.complete(t, depErr(t, f), f)
			return
		}
		r.complete(t, first, nil)
	}()
	return true
}

// queuedRun is a replay t, with args, that may be queued behind the last
// one, after, on its device (Graph.queue); chained says after's failure is
// t's (after is among t's predecessors). taken says t was queued or
// started after after's end: the other way does nothing.
type queuedRun struct {
	t       *Task
	args    []plugin.Arg
	after   *Task
	chained bool
	mu      sync.Mutex
	taken   bool
}

// defineParts defines each device's part of g on it, or returns nil
// where a device or a node cannot have one (after freeing what it
// defined).
func (g *Graph) defineParts() *gparts {
	p := &gparts{}
	index := map[*Device]int{}
	local := make([]int, len(g.lanes)) // a lane's number among its device's
	var lanes []int
	for l := range g.lanes {
		d := g.lanes[l].dev
		i, ok := index[d]
		if !ok {
			if _, ok := d.Dev.(plugin.GraphDefiner); !ok {
				return nil
			}
			i = len(p.devs)
			index[d] = i
			p.devs = append(p.devs, d)
			lanes = append(lanes, 0)
		}
		local[l] = lanes[i]
		lanes[i]++
	}
	// The devices whose lanes wait for each node.
	to := make([][]plugin.Device, len(g.nodes))
	for i := range g.nodes {
		for _, w := range g.nodes[i].waits {
			d := g.nodes[i].dev.Dev
			if !containsDev(to[w], d) {
				to[w] = append(to[w], d)
			}
		}
	}
	parts := make([]plugin.GraphPart, len(p.devs))
	key := graphKeys.Add(1)
	for i := range parts {
		parts[i] = plugin.GraphPart{Key: key, Lanes: lanes[i]}
	}
	for i := range g.nodes {
		n := &g.nodes[i]
		ops := &parts[index[n.dev]].Ops
		lane := local[n.lane]
		for _, w := range n.waits {
			*ops = append(*ops, plugin.GraphOp{Op: plugin.GraphWait, Lane: lane, Signal: w, From: g.nodes[w].dev.Dev})
		}
		if n.k != nil {
			if !n.geo.IsZero() {
				return nil
			}
			*ops = append(*ops, plugin.GraphOp{Op: plugin.GraphLaunch, Lane: lane, Kernel: n.k, Args: n.args, ArgAt: n.off})
		}
		for _, c := range n.copies {
			if !c.dst.onDevice() || !c.src.onDevice() || c.src.Dev != n.dev {
				return nil
			}
			*ops = append(*ops, plugin.GraphOp{Op: plugin.GraphExchange, Lane: lane, Dst: c.dst.Dev.Dev, DstPtr: c.dst.Ptr, Src: c.src.Ptr, Size: c.n})
		}
		if n.signal {
			*ops = append(*ops, plugin.GraphOp{Op: plugin.GraphSignal, Lane: lane, Signal: i, To: to[i]})
		}
	}
	for i, d := range p.devs {
		run, err := d.Dev.(plugin.GraphDefiner).DefineGraph(parts[i])
		if err != nil { // unsupported, or the device is lost: the operations' replay says so
			p.free()
			return nil
		}
		p.runs = append(p.runs, run)
	}
	runtime.AddCleanup(g, (*gparts).free, p)
	return p
}

func containsDev(ds []plugin.Device, d plugin.Device) bool {
	for _, x := range ds {
		if x == d {
			return true
		}
	}
	return false
}

// Release lets the graph's parts on devices go once its last replay is
// done: a graph recorded again (Reset) or dropped is never replayed
// again. Later replays (there should be none) replay operation by
// operation.
func (g *Graph) Release() {
	r := g.rt
	r.tasks.mu.Lock()
	last := g.last
	g.released = true
	r.tasks.mu.Unlock()
	if last == nil {
		g.freeParts()
		return
	}
	select {
	case <-last.Done():
		g.freeParts()
		return
	default:
	}
	go func() {
		<-last.Done()
		g.freeParts()
	}()
}

// freeParts frees g's parts; the replay that made them is done.
func (g *Graph) freeParts() {
	r := g.rt
	r.tasks.mu.Lock()
	p := g.parts
	r.tasks.mu.Unlock()
	if p != nil {
		p.free()
	}
}

// selfLost reports whether d itself is lost (its LostReporter says so).
func selfLost(d *Device) bool {
	lr, ok := d.Dev.(plugin.LostReporter)
	return ok && lr.Lost() != nil
}
