package engine

import (
	"github.com/goffload/offload/plugin/opqueue"
	"github.com/goffload/offload/plugins/remote/proto"
)

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
