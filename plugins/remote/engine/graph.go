package engine

import (
	"fmt"
	"sync"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/opqueue"
	"github.com/goffload/offload/plugins/remote/proto"
)

// This is the host side of recorded graphs (plugin.GraphDefiner). A device's
// part goes to its process once, in GraphDef frames. Each run is one GraphRun
// frame, answered by one Event. The frame carries the launches' arguments
// that changed since the last run.

// DefineGraph sends part to the device process (plugin.GraphDefiner). Some
// parts are refused with an error wrapping ErrUnsupported before anything is
// sent. A proxied device's part is. So is a part with an exchange, wait or
// signal that involves a device the process has no link to.
func (d *Device) DefineGraph(part plugin.GraphPart) (plugin.GraphRunner, error) {
	if d.info.Serves != "" {
		return nil, fmt.Errorf("%s: %w: graphs on a device that serves %s", d.name(), plugin.ErrUnsupported, d.info.Serves)
	}
	if part.Lanes < 1 || part.Lanes > proto.MaxGraphLanes {
		return nil, fmt.Errorf("%s: %w: a graph part of %d lanes", d.name(), plugin.ErrUnsupported, part.Lanes)
	}
	g := &graphPart{d: d, key: part.Key, queues: part.Lanes == 1}
	var defs []*proto.GraphDef
	def := &proto.GraphDef{Graph: part.Key, Lanes: uint32(part.Lanes)}
	for i := range part.Ops {
		o := &part.Ops[i]
		w := proto.GraphOp{Op: uint8(o.Op), Lane: uint16(o.Lane), Signal: uint32(o.Signal)}
		var err error
		switch o.Op {
		case plugin.GraphLaunch:
			err = d.graphLaunch(&w, o)
			if err == nil {
				g.launches = append(g.launches, glaunch{op: uint32(i), at: o.ArgAt, k: o.Kernel, last: append([]plugin.Arg(nil), o.Args...)})
			}
		case plugin.GraphExchange:
			g.queues = false
			var other *Device
			if other, err = d.linked(o.Dst); err == nil && other != d {
				err = other.seeAllocs()
			}
			if err == nil {
				w.Peer, w.Dst, w.Src, w.Size = uint32(other.num), uint64(o.DstPtr), uint64(o.Src), uint64(o.Size)
			}
		case plugin.GraphSignal:
			g.queues = g.queues && len(o.To) == 0
			for _, t := range o.To {
				var other *Device
				if other, err = d.linked(t); err != nil {
					break
				}
				w.To = append(w.To, uint32(other.num))
			}
			if len(w.To) > proto.MaxGraphTo {
				err = fmt.Errorf("%w: a signal for %d devices", plugin.ErrUnsupported, len(w.To))
			}
		case plugin.GraphWait:
			g.queues = false // in a part of one lane, a wait is for another device's signal
			var other *Device
			if other, err = d.linked(o.From); err == nil {
				w.Peer = uint32(other.num)
			}
		default:
			err = fmt.Errorf("%w: graph operation %d of kind %d", plugin.ErrUnsupported, i, o.Op)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: graph operation %d: %w", d.name(), i, err)
		}
		b := proto.AppendGraphOp(nil, &w)
		if len(def.Ops)+len(b) > proto.MaxInline && len(def.Ops) > 0 {
			defs = append(defs, def)
			def = &proto.GraphDef{Graph: part.Key, Lanes: uint32(part.Lanes)}
		}
		def.Ops = append(def.Ops, b...)
	}
	defs = append(defs, def)
	d.mu.Lock()
	err := d.st.Alive()
	if err == nil {
		err = d.putClosing()
	}
	for _, f := range defs {
		if err == nil {
			err = d.l.put(f)
		}
	}
	d.mu.Unlock()
	if err != nil {
		return nil, d.linkLost(err)
	}
	d.l.flush()
	return g, nil
}

// graphLaunch fills w, the launch o, as LaunchStop checks and encodes it.
func (d *Device) graphLaunch(w *proto.GraphOp, o *plugin.GraphOp) error {
	k := o.Kernel
	if k == nil || k.Index() < 0 || k.Index() >= d.count {
		return fmt.Errorf("%w: not a kernel the device process has", plugin.ErrBadKernel)
	}
	b, err := proto.AppendArgs(nil, k, o.Args)
	if err != nil {
		return err
	}
	if len(b) > proto.MaxInline-8 {
		return fmt.Errorf("%w: kernel %q arguments take %d bytes", plugin.ErrUnsupported, k.Name(), len(b))
	}
	w.Kernel, w.Args = uint32(k.Index()), b
	return nil
}

// linked returns o as a device of this kind that d's process links to,
// introducing them. Else it returns an error wrapping ErrUnsupported.
func (d *Device) linked(o plugin.Device) (*Device, error) {
	other, ok := o.(*Device)
	if !ok {
		return nil, fmt.Errorf("%w: a graph edge to a %s device", plugin.ErrUnsupported, o.Info().Kind)
	}
	if other == d {
		return d, nil
	}
	if err := introduce(d, other); err != nil {
		return nil, err
	}
	return other, nil
}

// graphPart is a part defined on d (plugin.GraphRunner, plugin.GraphQueuer).
// queues says its runs can be queued behind each other: one lane, and no
// exchange, wait, or signal for another device (whose runs would not be
// ordered with this one's).
type graphPart struct {
	d        *Device
	key      uint64
	launches []glaunch
	queues   bool
	free     sync.Once
}

// glaunch is a launch of a part. It holds its operation's index, where a
// run's arguments for it are, and those the device has.
type glaunch struct {
	op   uint32
	at   int
	k    plugin.Kernel
	last []plugin.Arg
}

// Run sends one GraphRun (plugin.GraphRunner). The arguments that differ from
// the device's go with it. Where they are more than one frame holds, they go
// in GraphSet frames before it.
func (g *graphPart) Run(gen uint64, args []plugin.Arg) (plugin.Event, error) {
	return g.run(gen, args, false)
}

// Queues reports whether a run with args can go before the last one ended
// (plugin.GraphQueuer): the part's runs are ordered on its one lane, and
// the arguments are the device's (a change waits for no run in flight:
// state.Graphs).
func (g *graphPart) Queues(args []plugin.Arg) bool {
	if !g.queues {
		return false
	}
	for i := range g.launches {
		l := &g.launches[i]
		if l.at < 0 || l.at+len(l.last) > len(args) || !sameArgs(args[l.at:l.at+len(l.last)], l.last) {
			return false
		}
	}
	return true
}

// RunQueued sends a GraphRun that the device runs after the last one
// (plugin.GraphQueuer); chained, only if that one did not fail.
func (g *graphPart) RunQueued(gen uint64, args []plugin.Arg, chained bool) (plugin.Event, error) {
	return g.run(gen, args, chained)
}

func (g *graphPart) run(gen uint64, args []plugin.Arg, after bool) (plugin.Event, error) {
	d := g.d
	var sets []*proto.GraphSet
	var upd []byte
	var changed []int
	for i := range g.launches {
		l := &g.launches[i]
		if l.at < 0 || l.at+len(l.last) > len(args) {
			return nil, fmt.Errorf("%s: %w: a run's %d arguments, the part's launch %d takes [%d, %d)", d.name(), plugin.ErrBadKernel, len(args), l.op, l.at, l.at+len(l.last))
		}
		a := args[l.at : l.at+len(l.last)]
		if sameArgs(a, l.last) {
			continue
		}
		b, err := proto.AppendArgs(nil, l.k, a)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", d.name(), err)
		}
		e := proto.AppendGraphArgs(nil, proto.GraphArgs{Op: l.op, Args: b})
		if len(upd)+len(e) > proto.MaxInline {
			sets = append(sets, &proto.GraphSet{Graph: g.key, Args: upd})
			upd = nil
		}
		upd = append(upd, e...)
		changed = append(changed, i)
	}
	ev := &event{d: d, ev: opqueue.NewEvent()}
	d.mu.Lock()
	id, err := d.st.NewEvent(ev)
	if err == nil {
		err = d.putClosing()
	}
	if err != nil {
		d.mu.Unlock()
		return nil, err
	}
	ev.id = id
	ev.ev.Arm()
	d.st.Record(id, nil, nil)
	for _, f := range sets {
		if err == nil {
			err = d.l.put(f)
		}
	}
	if err == nil {
		err = d.l.put(&proto.GraphRun{Graph: g.key, Gen: gen, Event: id, Args: upd, After: after})
	}
	d.mu.Unlock()
	if err != nil {
		err = d.linkLost(err)
		ev.ev.Fire(err) // recorded, and will never fire otherwise
		return ev, nil
	}
	d.l.flush()
	for _, i := range changed {
		l := &g.launches[i]
		copy(l.last, args[l.at:l.at+len(l.last)])
	}
	return ev, nil
}

// Free forgets the part on the device once its runs are done
// (plugin.GraphRunner). A lost device has nothing to forget.
func (g *graphPart) Free() error {
	g.free.Do(func() {
		d := g.d
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.st.Alive() == nil {
			d.l.send(&proto.GraphFree{Graph: g.key}) // a failure is the link's, seen by the reader
		}
	})
	return nil
}

// sameArgs reports whether a run's arguments a are those the device has.
func sameArgs(a, last []plugin.Arg) bool {
	for i := range a {
		if a[i].Ptr != last[i].Ptr || a[i].Len != last[i].Len || a[i].Scalar != last[i].Scalar {
			return false
		}
	}
	return true
}

var (
	_ plugin.GraphDefiner = (*Device)(nil)
	_ plugin.GraphQueuer  = (*graphPart)(nil)
)

// FramesSent is how many control frames of each type the host has queued for
// the device so far, by type name. It is for tests: a replay is one frame per
// device.
func (d *Device) FramesSent() map[string]uint64 {
	m := map[string]uint64{}
	for t := range d.l.queued {
		if n := d.l.queued[t].Load(); n > 0 {
			m[proto.Type(t).String()] = n
		}
	}
	return m
}

// Graph signals between device processes: a run's lane that reaches a signal
// tells the devices whose lanes wait for it. It tells them with a PeerSignal
// on their peer link. Their waits stand in for it, by device, graph, run and
// signal. Each stand-in is touched twice, by the wait and by the signal, in
// either order. It is forgotten at the second touch, as the stand-ins of
// events are.

// gsigKey names a stand-in: signal sig of run gen of graph graph, from
// device num.
type gsigKey struct {
	num        int
	graph, gen uint64
	sig        uint32
}

// gevent returns the stand-in for signal sig of run gen of graph graph of
// device num, recorded. It fires when that device says so.
func (ps *peers) gevent(num int, graph, gen uint64, sig uint32) *opqueue.Event {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.gsigs == nil {
		ps.gsigs = map[gsigKey]*standIn{}
	}
	k := gsigKey{num, graph, gen, sig}
	si := ps.gsigs[k]
	if si == nil {
		si = &standIn{ev: opqueue.NewEvent()}
		si.ev.Arm()
		ps.gsigs[k] = si
		if err := ps.dead[num]; err != nil {
			si.ev.Fire(err)
		} else if ps.done {
			si.ev.Fire(ErrSessionOver)
		}
	}
	if si.touched++; si.touched == 2 {
		delete(ps.gsigs, k)
	}
	return si.ev
}

// signal tells device num that signal sig of run gen of graph graph fired,
// with err. It never blocks. If the link to num is still on its way, a
// goroutine waits for it.
func (ps *peers) signal(num int, graph, gen uint64, sig uint32, err error) {
	f := &proto.PeerSignal{Graph: graph, Gen: gen, Signal: sig, Status: proto.StatusOf(err)}
	ps.mu.Lock()
	p := ps.by[num]
	ps.mu.Unlock()
	if p != nil {
		if err2 := p.l.sendSoon(f); err2 != nil {
			ps.cannotTell(num, uint64(sig), err2)
		}
		return
	}
	go func() {
		p, err2 := ps.get(num)
		if err2 == nil {
			err2 = p.l.sendSoon(f)
		}
		if err2 != nil {
			ps.cannotTell(num, uint64(sig), err2)
		}
	}()
}

// signalOrphans takes the stand-ins for device num's signals, under ps.mu.
// Its link broke, and they will never be told.
func (ps *peers) signalOrphans(num int) []*opqueue.Event {
	var out []*opqueue.Event
	for k, si := range ps.gsigs {
		if k.num == num {
			out = append(out, si.ev)
			delete(ps.gsigs, k)
		}
	}
	return out
}

// endSignals takes every stand-in for signals, under ps.mu. The session is
// over.
func (ps *peers) endSignals() []*opqueue.Event {
	var out []*opqueue.Event
	for _, si := range ps.gsigs {
		out = append(out, si.ev)
	}
	ps.gsigs = nil
	return out
}

// Signals is how many stand-ins for other devices' graph signals the session
// holds. It is for tests: the table shrinks with the runs.
func (s *Session) Signals() int {
	s.peers.mu.Lock()
	defer s.peers.mu.Unlock()
	return len(s.peers.gsigs)
}
