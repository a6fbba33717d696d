package core

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goffload/offload/internal/mapping"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/tool"
)

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

// startParts runs the replay t on the graph's parts, defining them first
// if this is the first replay, and reports whether it did; else the
// caller replays operation by operation. held are the mappings the
// replay holds, released at its end.
func (g *Graph) startParts(t *Task, args []plugin.Arg, held []*mapping.Entry, pend []pendingCopy) bool {
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
		evs[i], errs[i] = run.Run(p.gen, args)
	}
	go func() {
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
		r.complete(t, first, nil)
	}()
	return true
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
