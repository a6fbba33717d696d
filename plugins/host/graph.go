package host

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goffload/offload/internal/waitpoll"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/hostmem"
)

// Recorded graphs on host devices (plugin.GraphDefiner). A part's lanes are
// slices of operations; a run starts one goroutine a lane, which runs its
// operations one after another: kernels on the lane's own goroutine
// (LaunchHere), copies by memmove. No operation is queued or handed on. The
// lanes of every host device's part of one graph wait for each other's
// signals in memory the parts share (hgraph): a signal holds the run that
// last fired it. A waiting lane polls for a while, then parks until the
// signal fires.

// hgraphs holds the signals of the graphs defined on this process's host
// devices, by key. An entry goes with the last part of its graph.
var hgraphs struct {
	sync.Mutex
	m map[uint64]*hgraph
}

// hgraph is what a graph's parts on host devices share.
type hgraph struct {
	parts int // defined and not freed
	sigs  map[int]*hsignal
}

// hsignal is a signal of a graph: the run that fired it last, and the error
// state of the lane that fired it then.
type hsignal struct {
	gen     atomic.Uint64
	mu      sync.Mutex
	err     error
	waiters []*hlane // parked until it fires
}

// fire fires s for run gen with err.
func (s *hsignal) fire(gen uint64, err error) {
	s.mu.Lock()
	s.err = err
	s.gen.Store(gen)
	for i, w := range s.waiters {
		w.wake <- struct{}{} // never blocks: one wake a parked wait
		s.waiters[i] = nil
	}
	s.waiters = s.waiters[:0]
	s.mu.Unlock()
}

// signalPoll is how long a lane polls for a signal before it parks: about a
// short task's time on the other lane, so that a stencil's next step is taken
// without a wake-up.
const signalPoll = 50 * time.Microsecond

// wait waits until s fired for run gen and returns its error.
func (s *hsignal) wait(gen uint64, l *hlane) error {
	if s.gen.Load() < gen {
		waitpoll.Until(signalPoll, 0, 64, func() bool { return s.gen.Load() >= gen })
	}
	s.mu.Lock()
	for s.gen.Load() < gen {
		s.waiters = append(s.waiters, l)
		s.mu.Unlock()
		<-l.wake
		s.mu.Lock()
	}
	err := s.err
	s.mu.Unlock()
	return err
}

// part is a host device's part of a recorded graph.
type part struct {
	d     *device
	key   uint64
	g     *hgraph
	lanes []*hlane
	freed atomic.Bool
}

// hlane is a lane of a part: its operations, and what its runs need.
type hlane struct {
	p    *part
	num  int
	ops  []hop
	wake chan struct{} // a parked wait's (hsignal.wait)
	// exitErr is the error of a kernel that ended the lane's goroutine
	// (runtime.Goexit); exited sets it, as a method value made once.
	exitErr error
	exited  func(error)
}

func (l *hlane) setExited(err error) { l.exitErr = err }

// hop is an operation of a lane.
type hop struct {
	op    plugin.GraphOpKind
	k     plugin.Kernel
	at, n int // a launch's arguments: a run's args[at:at+n]
	// An exchange: size bytes from src on the part's device to dstPtr on
	// dst.
	dst         *device
	dstPtr, src plugin.Ptr
	size        int64
	sig         *hsignal // a signal's or a wait's
}

// DefineGraph defines the device's part of a recorded graph
// (plugin.GraphDefiner). A part whose signals come from or go to a device
// of another kind, or whose copies go to one, is refused with an error
// wrapping plugin.ErrUnsupported: host devices signal each other in memory.
func (d *device) DefineGraph(gp plugin.GraphPart) (plugin.GraphRunner, error) {
	if err := d.st.Alive(); err != nil {
		return nil, err
	}
	if gp.Lanes < 1 {
		return nil, fmt.Errorf("%s: graph part of %d lanes: %w", d.st.Label(), gp.Lanes, plugin.ErrBadHandle)
	}
	p := &part{d: d, key: gp.Key, lanes: make([]*hlane, gp.Lanes)}
	for i := range p.lanes {
		l := &hlane{p: p, num: i, wake: make(chan struct{}, 1)}
		l.exited = l.setExited
		p.lanes[i] = l
	}
	hgraphs.Lock()
	defer hgraphs.Unlock()
	g := hgraphs.m[gp.Key]
	if g == nil {
		g = &hgraph{sigs: map[int]*hsignal{}}
	}
	signal := func(n int) *hsignal {
		s := g.sigs[n]
		if s == nil {
			s = &hsignal{}
			g.sigs[n] = s
		}
		return s
	}
	for i, o := range gp.Ops {
		if o.Lane < 0 || o.Lane >= gp.Lanes {
			return nil, fmt.Errorf("%s: graph operation %d on lane %d of %d: %w", d.st.Label(), i, o.Lane, gp.Lanes, plugin.ErrBadHandle)
		}
		h := hop{op: o.Op}
		switch o.Op {
		case plugin.GraphLaunch:
			if err := d.loaded(o.Kernel); err != nil {
				return nil, err
			}
			if o.ArgAt < 0 {
				return nil, fmt.Errorf("%s: graph launch of %s: arguments at %d: %w", d.st.Label(), o.Kernel.Name(), o.ArgAt, plugin.ErrBadKernel)
			}
			h.k, h.at, h.n = o.Kernel, o.ArgAt, len(o.Args)
		case plugin.GraphExchange:
			dst, ok := hostDevice(o.Dst)
			if !ok {
				return nil, fmt.Errorf("%s: graph copy to a %s device: %w", d.st.Label(), kindOf(o.Dst), plugin.ErrUnsupported)
			}
			if _, err := d.mem.Bytes(o.Src, o.Size); err != nil {
				return nil, fmt.Errorf("%s: graph copy's source: %w", d.st.Label(), err)
			}
			if _, err := dst.mem.Bytes(o.DstPtr, o.Size); err != nil {
				return nil, fmt.Errorf("%s: graph copy's destination: %w", dst.st.Label(), err)
			}
			h.dst, h.dstPtr, h.src, h.size = dst, o.DstPtr, o.Src, o.Size
		case plugin.GraphSignal:
			for _, t := range o.To {
				if _, ok := hostDevice(t); !ok {
					return nil, fmt.Errorf("%s: graph signal to a %s device: %w", d.st.Label(), kindOf(t), plugin.ErrUnsupported)
				}
			}
			h.sig = signal(o.Signal)
		case plugin.GraphWait:
			if _, ok := hostDevice(o.From); !ok {
				return nil, fmt.Errorf("%s: graph wait for a %s device's signal: %w", d.st.Label(), kindOf(o.From), plugin.ErrUnsupported)
			}
			h.sig = signal(o.Signal)
		default:
			return nil, fmt.Errorf("%s: graph operation %d of kind %d: %w", d.st.Label(), i, o.Op, plugin.ErrUnsupported)
		}
		l := p.lanes[o.Lane]
		l.ops = append(l.ops, h)
	}
	if hgraphs.m == nil {
		hgraphs.m = map[uint64]*hgraph{}
	}
	hgraphs.m[gp.Key] = g
	g.parts++
	p.g = g
	return p, nil
}

func kindOf(d plugin.Device) string {
	if d == nil {
		return "missing"
	}
	return d.Info().Kind
}

// hrun is a run of a part in flight.
type hrun struct {
	p    *part
	gen  uint64
	args []plugin.Arg
	ctx  *plugin.KernelCtx
	ev   *event
	left atomic.Int32
	mu   sync.Mutex
	err  error
}

// Run runs the part as run gen with args (plugin.GraphRunner). Every lane
// runs, also on a device lost or a part freed: its work is skipped then, and
// its signals fire with the error, so that other devices' lanes waiting for
// them go on.
func (p *part) Run(gen uint64, args []plugin.Arg) (plugin.Event, error) {
	d := p.d
	d.mu.RLock()
	ctx := d.ctx
	d.mu.RUnlock()
	ev := &event{d: d}
	ev.ev = &ev.own
	if err := ev.own.Arm(); err != nil {
		return nil, err
	}
	r := &hrun{p: p, gen: gen, args: args, ctx: ctx, ev: ev}
	r.left.Store(int32(len(p.lanes)))
	failed := d.st.Alive()
	if failed == nil && p.freed.Load() {
		failed = fmt.Errorf("%s: graph part run after Free: %w", d.st.Label(), plugin.ErrBadHandle)
	}
	if failed == nil {
		failed = p.checkArgs(args)
	}
	for _, l := range p.lanes {
		go l.run(r, 0, failed)
	}
	return ev, nil
}

// checkArgs checks that args holds every launch's arguments.
func (p *part) checkArgs(args []plugin.Arg) error {
	for _, l := range p.lanes {
		for i := range l.ops {
			if o := &l.ops[i]; o.op == plugin.GraphLaunch && o.at+o.n > len(args) {
				return fmt.Errorf("%s: graph launch of %s: arguments %d to %d of a run's %d: %w", p.d.st.Label(), o.k.Name(), o.at, o.at+o.n, len(args), plugin.ErrBadKernel)
			}
		}
	}
	return nil
}

// run runs run r's operations of the lane from op from, in the error state
// failed. A kernel that ends the goroutine (runtime.Goexit) fails the lane,
// which goes on on another goroutine.
func (l *hlane) run(r *hrun, from int, failed error) {
	i := from
	over := false
	defer func() {
		if !over {
			err := l.exitErr
			if err == nil {
				err = fmt.Errorf("%w: a kernel ended its goroutine (runtime.Goexit)", plugin.ErrKernelFailed)
			}
			if failed == nil {
				failed = fmt.Errorf("%s: %w", l.p.d.st.Label(), err)
			}
			go l.run(r, i+1, failed)
		}
	}()
	d := l.p.d
	for ; i < len(l.ops); i++ {
		o := &l.ops[i]
		switch o.op {
		case plugin.GraphLaunch:
			if failed == nil {
				failed = d.st.Lost()
			}
			if failed == nil {
				l.exitErr = nil
				failed = d.launchHere(o.k, r.ctx, r.args[o.at:o.at+o.n], l.exited)
			}
		case plugin.GraphExchange:
			if failed == nil {
				failed = d.st.Lost()
			}
			if failed == nil {
				failed = d.exchange(o.dst, o.dstPtr, o.src, o.size)
			}
		case plugin.GraphSignal:
			o.sig.fire(r.gen, failed)
		case plugin.GraphWait:
			if err := o.sig.wait(r.gen, l); err != nil && failed == nil {
				failed = fmt.Errorf("%s: waited-for signal failed: %w", d.st.Label(), err)
			}
		}
	}
	over = true
	r.laneDone(failed)
}

// laneDone is a lane's end of r with its error state; the last fires r's
// event with the first error.
func (r *hrun) laneDone(failed error) {
	if failed != nil {
		r.mu.Lock()
		if r.err == nil {
			r.err = failed
		}
		r.mu.Unlock()
	}
	if r.left.Add(-1) > 0 {
		return
	}
	r.mu.Lock()
	err := r.err
	r.mu.Unlock()
	r.ev.own.Fire(err)
}

// launchHere runs k on the calling goroutine with the device's memory
// pinned (kernels touch it until they return; the pin is let go also when
// the kernel ends the goroutine).
func (d *device) launchHere(k plugin.Kernel, ctx *plugin.KernelCtx, args []plugin.Arg, exited func(error)) error {
	d.mem.Pin()
	defer d.mem.Unpin()
	if err := k.LaunchHere(ctx, args, d.bytes, exited); err != nil {
		return fmt.Errorf("%s: %w", d.st.Label(), err)
	}
	return nil
}

// exchange copies size bytes from src on d to dstPtr on other, with both
// memories pinned, resolving the addresses again (a block freed meanwhile is
// an error, never unmapped memory).
func (d *device) exchange(other *device, dstPtr, src plugin.Ptr, size int64) error {
	d.mem.Pin()
	defer d.mem.Unpin()
	other.mem.Pin()
	defer other.mem.Unpin()
	s, err := d.mem.Bytes(src, size)
	if err != nil {
		return fmt.Errorf("%s: exchange source: %w", d.st.Label(), err)
	}
	t, err := other.mem.Bytes(dstPtr, size)
	if err != nil {
		return fmt.Errorf("%s: exchange destination on %s: %w", d.st.Label(), other.st.Label(), err)
	}
	hostmem.Copy(t, s)
	return nil
}

// Free forgets the part (plugin.GraphRunner); its runs are done.
func (p *part) Free() error {
	if p.freed.Swap(true) {
		return fmt.Errorf("%s: graph part freed twice: %w", p.d.st.Label(), plugin.ErrBadHandle)
	}
	hgraphs.Lock()
	defer hgraphs.Unlock()
	if p.g.parts--; p.g.parts == 0 {
		delete(hgraphs.m, p.key)
	}
	return nil
}

// GraphsDefined is how many graphs have parts defined on host devices. It is
// for tests: the table shrinks with the frees.
func GraphsDefined() int {
	hgraphs.Lock()
	defer hgraphs.Unlock()
	return len(hgraphs.m)
}

var _ plugin.GraphDefiner = (*device)(nil)
