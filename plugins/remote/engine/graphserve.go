package engine

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goffload/offload/internal/waitpoll"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/opqueue"
	"github.com/goffload/offload/plugins/remote/proto"
	"github.com/goffload/offload/plugins/remote/state"
	"github.com/goffload/offload/plugins/remote/transport"
)

// This is the device side of recorded graphs. It holds the parts the host
// defined (GraphDef), each with lanes of its own, and their runs (GraphRun).
// One frame enqueues every operation of the part on its lanes. The lanes wait
// on each other's signals by local events. They wait on other devices'
// signals by their PeerSignal frames. The host hears of the run once, as an
// Event.

// sgraphs is a session's graph parts (state.Graphs: the rules), under mu.
type sgraphs struct {
	mu sync.Mutex
	t  *state.Graphs[*gpart]
}

// gpart is a defined part: its lanes and operations.
type gpart struct {
	id    uint64
	lanes []*opqueue.Queue
	ops   []*gsop
	sigs  map[uint32]int // signals its own lanes wait for: their index in a run's events
	// remote are the other devices' signals its lanes wait for. Each is there
	// once a run, however many lanes wait for it. The value is its index in a
	// run's stand-ins.
	remote map[[2]uint32]int
	// planned says which exchanges go on without a confirmation (plan). It
	// is done at the first run.
	planned bool
	// failed says the last run that ended had an error: a run after it
	// (GraphRun.After) then fails.
	failed atomic.Bool
}

// graphRuns counts the runs of graph parts in flight in this process.
var graphRuns atomic.Int32

// Replaying reports whether a run of a graph part is in flight in this
// process: its kernels follow each other without a word from the host.
func Replaying() bool { return graphRuns.Load() > 0 }

// errLastRunFailed is the error of a run after a failed one (GraphRun.After):
// it ran nothing, and the host reports the failed run's error.
var errLastRunFailed = errors.New("the run before it failed: nothing of it ran")

// gsop is an operation of a part.
type gsop struct {
	op   uint8
	lane int
	k    plugin.Kernel
	args []plugin.Arg // a launch's, changed between runs (GraphSet)
	run  func() error // an exchange's work
	// exitErr is the error of a launch whose kernel ended the lane's
	// goroutine (runtime.Goexit); exited, made once at the definition,
	// sets it.
	exitErr error
	exited  func(error)
	// async is an exchange to another device that is not confirmed (plan).
	// It is nil for others.
	async func() error
	peer  int // an exchange's destination, a wait's signalling device
	sig   uint32
	to    []int // a signal's other devices
	ev    int   // a signal's or a wait's local event, or -1
	rev   int   // a wait's stand-in for another device's signal, or -1
}

func (s *Session) graphTable() *sgraphs {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.graphs == nil {
		s.graphs = &sgraphs{t: state.NewGraphs[*gpart]()}
	}
	return s.graphs
}

// graphFrame serves a GraphDef, GraphSet, GraphRun or GraphFree frame.
func (s *Session) graphFrame(f proto.Frame) error {
	gs := s.graphTable()
	switch f := f.(type) {
	case *proto.GraphDef:
		if s.srv != nil {
			return fmt.Errorf("%w: graph %d on a device that serves %s: a proxied device replays operation by operation", proto.ErrFrame, f.Graph, s.srv.label)
		}
		ops, err := proto.DecodeGraphOps(f.Ops, int(f.Lanes))
		if err != nil {
			return err
		}
		gs.mu.Lock()
		p, err := gs.t.Define(f.Graph, func() *gpart { return &gpart{id: f.Graph, sigs: map[uint32]int{}, remote: map[[2]uint32]int{}} })
		gs.mu.Unlock()
		if err != nil {
			return err
		}
		return s.defineOps(p, int(f.Lanes), ops)
	case *proto.GraphSet:
		gs.mu.Lock()
		p, err := gs.t.Set(f.Graph)
		gs.mu.Unlock()
		if err != nil {
			return err
		}
		return s.setArgs(p, f.Args)
	case *proto.GraphRun:
		gs.mu.Lock()
		p, err := gs.t.Run(f.Graph, f.Gen, len(f.Args) > 0)
		gs.mu.Unlock()
		if err != nil {
			return err
		}
		if err := s.setArgs(p, f.Args); err != nil {
			return err
		}
		return s.runGraph(p, f.Gen, f.Event, f.After)
	case *proto.GraphFree:
		gs.mu.Lock()
		p, drop, err := gs.t.Free(f.Graph)
		gs.mu.Unlock()
		if err != nil {
			return err
		}
		if drop {
			go p.close()
		}
	}
	return nil
}

// defineOps adds ops to p, on lanes lanes.
func (s *Session) defineOps(p *gpart, lanes int, ops []proto.GraphOp) error {
	for len(p.lanes) < lanes {
		p.lanes = append(p.lanes, opqueue.New())
	}
	for _, o := range ops {
		if int(o.Lane) >= len(p.lanes) {
			return fmt.Errorf("%w: graph %d: operation on lane %d of %d", proto.ErrFrame, p.id, o.Lane, len(p.lanes))
		}
		g := &gsop{op: o.Op, lane: int(o.Lane), peer: int(o.Peer), sig: o.Signal, ev: -1, rev: -1}
		switch o.Op {
		case proto.GraphLaunch:
			if int(o.Kernel) >= len(s.img.Kernels) {
				return fmt.Errorf("%w: graph %d: kernel index %d, the device has %d kernels", proto.ErrFrame, p.id, o.Kernel, len(s.img.Kernels))
			}
			g.k = s.img.Kernels[o.Kernel]
			args, err := proto.DecodeArgs(o.Args, g.k)
			if err != nil {
				return fmt.Errorf("%w: graph %d: %w", proto.ErrFrame, p.id, err)
			}
			g.args = args
		case proto.GraphExchange:
			g.run = s.graphExchange(int(o.Peer), plugin.Ptr(o.Dst), plugin.Ptr(o.Src), int64(o.Size))
			if int(o.Peer) != s.num {
				g.async = s.graphExchangeAsync(int(o.Peer), plugin.Ptr(o.Dst), plugin.Ptr(o.Src), int64(o.Size))
			}
		case proto.GraphSignal:
			for _, t := range o.To {
				if int(t) == s.num {
					g.ev = len(p.sigs)
					p.sigs[o.Signal] = g.ev
				} else {
					g.to = append(g.to, int(t))
				}
			}
		case proto.GraphWait:
			if g.peer == s.num {
				ev, ok := p.sigs[o.Signal]
				if !ok {
					return fmt.Errorf("%w: graph %d: a wait for signal %d, which no lane of the device gives before it", proto.ErrFrame, p.id, o.Signal)
				}
				g.ev = ev
				break
			}
			k := [2]uint32{o.Peer, o.Signal}
			i, ok := p.remote[k]
			if !ok {
				i = len(p.remote)
				p.remote[k] = i
			}
			g.rev = i
		}
		if o.Op == proto.GraphLaunch {
			g.exited = func(err error) { g.exitErr = fmt.Errorf("%s: %w", s.name(), err) }
		}
		p.ops = append(p.ops, g)
	}
	return nil
}

// setArgs changes the arguments of p's launches as b (EncodeGraphArgs) says.
// No run of p is in flight.
func (s *Session) setArgs(p *gpart, b []byte) error {
	if len(b) == 0 {
		return nil
	}
	sets, err := proto.DecodeGraphArgs(b)
	if err != nil {
		return err
	}
	for _, a := range sets {
		if int(a.Op) >= len(p.ops) || p.ops[a.Op].op != proto.GraphLaunch {
			return fmt.Errorf("%w: graph %d: arguments for operation %d, which is no launch", proto.ErrFrame, p.id, a.Op)
		}
		op := p.ops[a.Op]
		args, err := proto.DecodeArgs(a.Args, op.k)
		if err != nil {
			return fmt.Errorf("%w: graph %d: %w", proto.ErrFrame, p.id, err)
		}
		op.args = args
	}
	return nil
}

// graphLaunch runs a launch of a part (c holds its session and operation)
// on its lane's own goroutine (opqueue's DoCallExit), which calls the
// kernel itself: no runner, no hand-off a launch. The kernel is counted
// among those computing. One that ends the goroutine (runtime.Goexit)
// fails the lane with the operation's exitErr; the lane goes on on a new
// goroutine.
//
// Its end does not kick the host's link reader, as a queued launch's does:
// the host sends nothing until the replay's end (laneDone kicks it then).
// Kicked after each kernel, that reader took the process's one spinner's
// role (transport.TakeSpinner) for a whole budget. Then the reader of the
// peer link a lane waits on could not poll: each of the lane's kicks woke
// it to a system call and a park, and the peer's signal was heard late.
func graphLaunch(c opqueue.Call) error {
	s, op := c.X.(*Session), c.Y.(*gsop)
	ctx := s.kctx
	if ctx == nil { // a session driven without hello (tests)
		ctx = plugin.NewKernelCtx(s.num, s.pool).WithStop(s.stop)
	}
	op.exitErr = nil
	transport.KernelStarted()
	defer transport.KernelEnded() // also when the kernel ends the goroutine
	if err := op.k.LaunchHere(ctx, op.args, s.mem.Bytes, op.exited); err != nil {
		return fmt.Errorf("%s: %w", s.name(), err)
	}
	return nil
}

// graphExchange is an exchange's work: within the device, or to device peer
// over their link.
func (s *Session) graphExchange(peer int, dst, src plugin.Ptr, size int64) func() error {
	return func() error {
		from, err := s.mem.Bytes(src, size)
		if err != nil {
			return err
		}
		if peer != s.num {
			if err := s.peers.exchange(peer, dst, from); err != nil {
				return fmt.Errorf("%s: exchange to device %d: %w", s.name(), peer, err)
			}
			return nil
		}
		to, err := s.mem.Bytes(dst, size)
		if err != nil {
			return err
		}
		copy(to, from)
		return nil
	}
}

// graphExchangeAsync is an exchange's work to device peer that is not
// confirmed (a quiet put: see plan).
func (s *Session) graphExchangeAsync(peer int, dst, src plugin.Ptr, size int64) func() error {
	return func() error {
		from, err := s.mem.Bytes(src, size)
		if err != nil {
			return err
		}
		if err := s.peers.exchangeQuiet(peer, dst, from); err != nil {
			return fmt.Errorf("%s: exchange to device %d: %w", s.name(), peer, err)
		}
		return nil
	}
}

// grun is a run of a part in flight.
type grun struct {
	s    *Session
	p    *gpart
	gen  uint64
	id   uint64 // the host's event for the run's end
	ev   *opqueue.Event
	mu   sync.Mutex
	left int
	err  error
}

// runGraph enqueues run gen of p on its lanes. event is the host's event that
// its end fires.
func (s *Session) runGraph(p *gpart, gen, event uint64, after bool) error {
	if after && len(p.lanes) != 1 {
		return fmt.Errorf("%w: graph %d: a run after the last one on a part of %d lanes, want 1", proto.ErrFrame, p.id, len(p.lanes))
	}
	if !p.planned {
		s.plan(p)
	}
	r := &grun{s: s, p: p, gen: gen, id: event, ev: opqueue.NewEvent(), left: len(p.lanes)}
	s.emu.Lock()
	err := s.evs.Record(event, r.ev)
	s.emu.Unlock()
	if err != nil {
		return fmt.Errorf("%w: graph %d: %w", proto.ErrFrame, p.id, err)
	}
	r.ev.Arm()
	if after {
		// In the lane's order: the last run's end has set failed.
		if err := p.lanes[0].Do(func() error {
			if p.failed.Load() {
				return fmt.Errorf("graph %d: run %d: %w", p.id, gen, errLastRunFailed)
			}
			return nil
		}); err != nil {
			return fmt.Errorf("graph %d: %w", p.id, err)
		}
	}
	evs := make([]*opqueue.Event, len(p.sigs))
	rem := make([]*opqueue.Event, len(p.remote))
	for _, op := range p.ops {
		q := p.lanes[op.lane]
		var err error
		switch op.op {
		case proto.GraphLaunch:
			err = q.DoCallExit(graphLaunch, opqueue.Call{X: s, Y: op}, &op.exitErr, nil)
		case proto.GraphExchange:
			err = q.Do(op.run)
		case proto.GraphSignal:
			if op.ev >= 0 {
				evs[op.ev] = opqueue.NewEvent()
				err = q.Record(evs[op.ev])
			}
			if len(op.to) > 0 && err == nil {
				to, sig := op.to, op.sig
				err = q.Mark(false, func(failed error) error {
					for _, t := range to {
						s.peers.signal(t, p.id, gen, sig, failed)
					}
					return nil
				})
			}
		case proto.GraphWait:
			var ev *opqueue.Event
			if op.ev >= 0 {
				ev = evs[op.ev]
			} else {
				if rem[op.rev] == nil { // one stand-in a run: it is touched by one wait
					rem[op.rev] = s.peers.gevent(op.peer, p.id, gen, op.sig)
				}
				ev = rem[op.rev]
			}
			var from *link // a signal of another device comes by its link
			if op.rev >= 0 {
				from = s.peers.link(op.peer)
			}
			err = q.Do(func() error { return spinWait(ev, from) })
		}
		if err != nil { // a lane closed under the run: the session is ending
			return fmt.Errorf("graph %d: %w", p.id, err)
		}
	}
	graphRuns.Add(1)
	for l, q := range p.lanes {
		if err := q.Mark(true, func(failed error) error { return r.laneDone(l, failed) }); err != nil {
			// The lanes from l on never end the run: end it for them, so
			// that the count of runs in flight drops with it.
			err = fmt.Errorf("graph %d: %w", p.id, err)
			for k := l; k < len(p.lanes); k++ {
				_ = r.laneDone(k, err)
			}
			return err
		}
	}
	return nil
}

// laneDone is a lane's end of the run, with the lane's first error. The last
// one tells the host.
func (r *grun) laneDone(lane int, failed error) error {
	r.mu.Lock()
	if r.err == nil {
		r.err = failed
	}
	r.left--
	last, err := r.left == 0, r.err
	r.mu.Unlock()
	if !last {
		return nil
	}
	r.p.failed.Store(err != nil) // for a run after it (GraphRun.After)
	graphRuns.Add(-1)
	s := r.s
	gs := s.graphTable()
	gs.mu.Lock()
	_, drop := gs.t.Done(r.p.id)
	gs.mu.Unlock()
	if drop {
		go r.p.close() // not on a lane's own goroutine: Close waits for it
	}
	s.emu.Lock()
	now := s.evs.Fire(r.id, err)
	s.emu.Unlock()
	r.ev.Fire(err)
	s.tell(now)
	s.l.sendSoon(&proto.Event{Event: r.id, Status: proto.StatusOf(err)}) // a failure is the link's, seen by the reader
	// The host's next frame (its next replay) comes soon: a parked reader
	// polls for it.
	s.l.kick()
	return nil
}

// close ends p's lanes.
func (p *gpart) close() {
	for _, q := range p.lanes {
		q.Close()
	}
}

// endGraphs forgets the session's parts: it is over.
func (s *Session) endGraphs() {
	s.mu.Lock()
	gs := s.graphs
	s.mu.Unlock()
	if gs == nil {
		return
	}
	gs.mu.Lock()
	all := gs.t.End()
	gs.mu.Unlock()
	for _, p := range all {
		go p.close()
	}
}

// GraphParts is how many graph parts the session holds. It is for tests: the
// table shrinks with the frees.
func (s *Session) GraphParts() int {
	gs := s.graphTable()
	gs.mu.Lock()
	defer gs.mu.Unlock()
	return gs.t.Len()
}

// plan finds the exchanges to another device that are followed on their lane
// by a signal for that device alone. The signal travels their link behind the
// data. The device puts the data in place before it reads the signal, and
// what waits there for the signal waits for the data too. So the exchange
// goes as a quiet put, which the device does not confirm: the lane goes on
// at once, and neither link carries a confirmation nor the lane a wait for
// one. A quiet put the device cannot place ends their link: the waits for
// the signal fail, and with them the run.
func (s *Session) plan(p *gpart) {
	p.planned = true
	last := make([]*gsop, len(p.lanes)) // each lane's operation before
	for _, op := range p.ops {
		l := op.lane
		prev := last[l]
		last[l] = op
		if op.op == proto.GraphSignal && op.ev < 0 && len(op.to) == 1 && prev != nil && prev.op == proto.GraphExchange && prev.peer == op.to[0] && prev.async != nil {
			prev.run = prev.async
		}
	}
}

// spinWait waits for ev on a lane's goroutine. It polls while no kernel
// computes in the process, then parks. So a signal that comes soon (the
// other device's next step) is taken without the wake-up of a parked
// goroutine. from is the link ev's signal comes by, or nil (spin says how
// long it polls).
func spinWait(ev *opqueue.Event, from *link) error {
	var err error
	if spin(from, func() bool {
		var fired bool
		fired, err = ev.Query()
		return fired
	}) {
		return err
	}
	return ev.Synchronize()
}

// spin polls done while no kernel computes in the process, and reports
// whether done said so. It polls for the spin budget; a wait for another
// device over a link whose reader can be kicked (shared memory) polls for
// waitpoll's budget, as a synchronous caller does, and kicks that reader as
// it goes. A crowded device process runs on as many Go processors as its
// cores, one on 2 cores with local:2 (see package remote's deviceProcs): a
// goroutine that polls on the only one keeps the network
// poller from running, and the reader parked on its doorbell would hear of
// the signal only when the lane parks or the runtime's monitor polls. Kicked,
// it reads on the lane's processor between the lane's polls.
func spin(from *link, done func() bool) bool {
	budget := transport.SpinBudget()
	if budget <= 0 {
		return done()
	}
	if from != nil && from.kr != nil {
		budget = max(budget, waitpoll.Budget)
	} else {
		from = nil
	}
	var start time.Time
	for i := 0; ; i++ {
		if done() {
			return true
		}
		if transport.Computing() {
			return false
		}
		if i%8 == 0 {
			if from != nil {
				from.kick()
			}
			if start.IsZero() {
				start = time.Now()
			} else if time.Since(start) > budget {
				return false
			}
		}
		waitpoll.Pause(i)
	}
}
