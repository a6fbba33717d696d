package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/devstate"
	"github.com/goffload/offload/plugin/hostmem"
	"github.com/goffload/offload/plugin/opqueue"
	"github.com/goffload/offload/plugin/optrace"
	"github.com/goffload/offload/plugins/remote/proto"
	"github.com/goffload/offload/plugins/remote/state"
	"github.com/goffload/offload/plugins/remote/transport"
)

// Device is the host side of a remote device (a plugin.Device). It turns
// plugin calls into frames and frames back into results. One goroutine reads
// the link. The link's writer writes what the others queue.
//
// Everything that waits for the device is registered in d.st: a call's reply,
// a sync mark, an event, a transfer. d.st is a state.Host, the rules as plain
// state. Registration is under d.mu, the lock that loss takes too. A
// registration checks for a loss first. Loss (d.st.Lose, which marks d.life
// lost) takes everything registered and fails it. So after a loss nothing new
// registers, and nothing registered is forgotten.
//
// Frames whose order matters are queued on the link under d.mu as well, in
// the order d.st returns them. Examples are a wait and the forgetting of its
// event, or a notify and the same.
type Device struct {
	l *link
	// life is the device's label ("local device 1 (pid 1234)"), its closing
	// once and its loss, as every kind keeps them. d.st reads them there, and
	// loses it (under mu).
	life devstate.State
	num  int // device number, from Load
	info plugin.Info
	// Kind is the device kind as GOFFLOAD_DEVICES names it ("local", "tcp",
	// "mpi"). It is Info().Kind, and the start of the name.
	Kind string
	// Addr is where a TCP device serves ("tcp://HOST:PORT"); empty for others.
	Addr string
	// count is how many kernels the device process has (a prefix of ours).
	count int
	// The kind that opens the device sets what follows before Load.

	// OnLost, if set, explains a broken link (the process's exit status).
	OnLost func(error) error
	// Killer, if set, kills the device's process (Kill). A device without one
	// (a process of another machine) has its link cut instead.
	Killer func()
	// CloseFn releases what the transport holds (the process, the socket).
	CloseFn func(lost bool) error
	// Startup is the least time the device's hello may take, where its
	// process was just started, if more than the device timeout. (A process's
	// start-up on a loaded machine is slow.)
	Startup time.Duration
	// SetNum, if set, tells the transport the device's number.
	SetNum func(int)
	// Intro, if set, links the device to the others it introduces (device
	// processes of this machine, an MPI job's ranks). Their queues wait on
	// each other's events and exchange data directly.
	Intro Introducer
	// Rank is the device's MPI rank, or -1 (it names the device).
	Rank int
	// refused are the kernels a proxied device cannot launch, by index, with
	// why (from its Info).
	refused map[int]string
	// noStop says a proxied device's queues cannot stop one launch.
	noStop bool
	// token and process are the session's and its process's numbers, from
	// Serve. They are 0 for a process that serves its CPUs.
	token, process uint64
	// img is the image Load loaded (set before the link's reader starts).
	img *plugin.Image
	// tr is where timed operations go (Trace). clock is how their device
	// times become host times.
	tr    optrace.Tracer
	clock clock

	mu sync.Mutex
	// st holds the calls, events, transfers and allocations, under mu. The
	// calls' answers go to a channel.
	st *state.Host[chan proto.Reply, *event, *incoming]
	nq uint32
	// closing are queues closed since the device's last operation. Their
	// CloseQueue frames go out before its next one (putClosing). A Stop
	// closes every queue the core pooled, thousands after many tasks at once.
	// Then it closes the device, whose process ends them all with the
	// session. Nothing goes out for them then.
	closing []uint32

	reading    bool
	readerDone chan struct{}

	// sc is the link's shared memory (nil on other links). A caller waiting
	// for an answer polls it and reads (await). readMu is held by whoever
	// reads and dispatches frames: the reader, or such a caller. polling says
	// a caller polls.
	sc      transport.Poller
	readMu  sync.Mutex
	polling atomic.Bool
}

// NewDevice is the host side of the device process at the other end of t.
// kind names its kind ("local", "tcp", "mpi"). name names the device until
// Load names it by its number. The link starts at once.
func NewDevice(t transport.Transport, kind, name string) *Device {
	return newDevice(startLink(t), kind, name)
}

// Num is the device's number, as Load gave it.
func (d *Device) Num() int { return d.num }

// Transport is what carries the device's link.
func (d *Device) Transport() transport.Transport { return d.l.t }

// Name is the device's name, as its errors say it.
func (d *Device) Name() string { return d.name() }

func newDevice(l *link, kind, name string) *Device {
	d := &Device{
		l:          l,
		sc:         pollerOf(l),
		Kind:       kind,
		Rank:       -1,
		readerDone: make(chan struct{}),
	}
	d.st = state.NewHost[chan proto.Reply, *event, *incoming](&d.life)
	d.setName(name)
	return d
}

func (d *Device) name() string     { return d.life.Label() }
func (d *Device) setName(s string) { d.life.SetLabel(s) }

// read dispatches the device's frames until the link ends.
func (d *Device) read() {
	defer close(d.readerDone)
	for {
		d.awaitFrame()
		m, err := d.l.r.ReadMsg()
		if err == nil {
			err = d.dispatch(m)
		}
		d.readMu.Unlock()
		if err != nil {
			d.readFailed(err)
			return
		}
	}
}

func (d *Device) dispatch(m *proto.Msg) error {
	fr, err := proto.Parse(m)
	if err != nil {
		return err
	}
	switch f := fr.(type) {
	case *proto.Reply:
		return d.answer(f.Req, *f, m.Type)
	case *proto.SyncDone:
		return d.answer(f.Seq, proto.Reply{Req: f.Seq, Status: f.Status}, m.Type)
	case *proto.Event:
		err := f.Status.Err()
		d.mu.Lock()
		ev, implies, forget, ferr := d.st.Heard(f.Event, err)
		if forget != nil {
			d.l.send(forget) // under d.mu: after every wait queued for these events; a failure is the link's, seen by the reader
		}
		d.mu.Unlock()
		if ferr != nil {
			return ferr
		}
		if err == nil {
			pastWaits(implies)
		}
		ev.ev.Fire(err)
	case *proto.Times:
		return d.times(f)
	case *proto.Pull:
		d.mu.Lock()
		data, err := d.st.Pulled(f.Xfer)
		d.mu.Unlock()
		if err != nil {
			return err
		}
		if len(data) > 0 && len(data) <= proto.MaxInline && d.l.canTryWrite() {
			// Small: in one frame, written here (it never blocks), not
			// by the writer after a hand-off.
			_, err := d.l.sendDataSoon(f.Xfer, data)
			return err
		}
		d.l.stream(f.Xfer, data, false, func(uint64, error) {}) // a failure is the link's, seen by the reader
	case *proto.Data:
		d.mu.Lock()
		in, err := d.st.Arriving(f.Xfer)
		d.mu.Unlock()
		if err != nil {
			return err
		}
		if complete, err := in.take(d.l, m); !complete || err != nil {
			return err
		}
		d.mu.Lock()
		d.st.Arrived(f.Xfer)
		d.mu.Unlock()
		// Tell the device the data is in host memory. Until then it holds
		// back telling other devices about events after this copy. These
		// acknowledgements go out in the order the data came.
		return d.l.sendSoon(&proto.XferDone{Xfer: f.Xfer}) // the reader may: it never blocks
	default:
		return fmt.Errorf("%w: unexpected %s frame from the device", proto.ErrFrame, m.Type)
	}
	return nil
}

// answer completes the call req with r.
func (d *Device) answer(req uint64, r proto.Reply, t proto.Type) error {
	d.mu.Lock()
	ch, err := d.st.Answer(req)
	d.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%w (%s)", err, t)
	}
	ch <- r
	return nil
}

// lose fails the device. Every pending and later operation returns an error
// naming the device and the cause.
func (d *Device) lose(cause error) {
	if d.life.Lost() != nil {
		return
	}
	if d.life.Closed() {
		cause = errors.New("device closed")
	} else if d.OnLost != nil {
		cause = d.OnLost(cause) // may wait a moment for the process's exit status
	}
	err := fmt.Errorf("%s: %w: %w", d.name(), plugin.ErrDeviceLost, cause)
	d.mu.Lock()
	calls, events, first := d.st.Lose(err)
	d.mu.Unlock()
	if !first {
		return
	}
	d.l.fail(err)
	// What was registered is ours now: nothing registers after a loss.
	for _, ch := range calls {
		ch <- proto.Reply{Status: proto.StatusOf(err)}
	}
	for _, ev := range events {
		ev.ev.Fire(err)
	}
}

// linkLost is the error of an operation that the link refused with err,
// called without d.mu. Once the reader has reported the device's loss, it is
// that loss. The reader soon does, the link having failed. So the error says
// why the device went (a process's exit status, a signal). It does not only
// say how the link noticed (a broken pipe).
func (d *Device) linkLost(err error) error {
	d.mu.Lock()
	reading := d.reading
	d.mu.Unlock()
	if reading {
		select {
		case <-d.readerDone:
		case <-time.After(2 * time.Second):
		}
	}
	if lost := d.Lost(); lost != nil {
		return lost
	}
	return fmt.Errorf("%s: %w: %w", d.name(), plugin.ErrDeviceLost, err)
}

// CancelKernels asks the device's kernels to stop (plugin.Canceler). Their
// Ctx's Done channel closes in the device process. It does not wait.
func (d *Device) CancelKernels() {
	if d.Lost() == nil {
		d.l.send(&proto.Cancel{}) // a failure is the link's, seen by the reader
	}
}

// Kill ends the device by force (plugin.Killer). Its process is killed; for
// one of another machine, its link is cut. Everything pending on it fails
// with an error that says why.
func (d *Device) Kill(why error) {
	if d.Killer != nil {
		d.Killer()
	}
	d.l.fail(why)
}

// Lost reports why the device stopped working, or nil while it works.
func (d *Device) Lost() error { return d.life.Lost() }

// request registers a call for the answer to the frame that frame(id) makes,
// and queues the frame. It does both under the lock loss takes. Then it
// writes it (flushNow: the caller is not a reader). xfers are transfers the
// answer ends.
func (d *Device) request(frame func(id uint64) proto.Frame, xfers []uint64) (chan proto.Reply, error) {
	ch := make(chan proto.Reply, 1)
	d.mu.Lock()
	id := d.st.ID()
	if err := d.st.Call(id, ch, xfers); err != nil {
		d.mu.Unlock()
		return nil, err
	}
	if err := d.l.put(frame(id)); err != nil {
		d.mu.Unlock()
		return nil, d.linkLost(err)
	}
	d.mu.Unlock()
	d.l.flushNow()
	return ch, nil
}

// DeviceAddr asks the device process for the address, in its memory, of the
// byte at p (plugin.AddrResolver). The host names device memory with numbers
// of its own.
func (d *Device) DeviceAddr(p plugin.Ptr) (uintptr, error) {
	r, err := d.call(func(id uint64) proto.Frame { return &proto.Addr{Req: id, Ptr: uint64(p)} })
	if err != nil {
		return 0, err
	}
	return uintptr(r.Value), nil
}

// request numbers: what a request's id goes in.
func infoReq(id uint64) proto.Frame  { return &proto.Info{Req: id} }
func clockReq(id uint64) proto.Frame { return &proto.Clock{Req: id} }

// call sends a request (infoReq, clockReq) and waits for its reply, or for
// the device's loss.
func (d *Device) call(frame func(id uint64) proto.Frame) (proto.Reply, error) {
	ch, err := d.request(frame, nil)
	if err != nil {
		return proto.Reply{}, err
	}
	r := d.await(ch)
	if err := r.Status.Err(); err != nil {
		if errors.Is(err, plugin.ErrDeviceLost) {
			return proto.Reply{}, err
		}
		return proto.Reply{}, fmt.Errorf("%s: %w", d.name(), err)
	}
	return r, nil
}

// Info describes the device, as its process said at Load.
func (d *Device) Info() plugin.Info { return d.info }

func (d *Device) fetchInfo() error {
	r, err := d.call(infoReq)
	if err != nil {
		return err
	}
	var extra struct {
		Refused map[int]string
		NoStop  bool
	}
	if err := json.Unmarshal([]byte(r.Text), &d.info); err != nil {
		return fmt.Errorf("%s: %w: info: %v", d.name(), proto.ErrFrame, err)
	}
	if err := json.Unmarshal([]byte(r.Text), &extra); err != nil {
		return fmt.Errorf("%s: %w: info: %v", d.name(), proto.ErrFrame, err)
	}
	d.refused, d.noStop = extra.Refused, extra.NoStop
	d.info.Kind = d.Kind
	return nil
}

// Load greets the device process, which checks that both run the same code.
// It asks it to describe itself.
func (d *Device) Load(img *plugin.Image, num int) error {
	d.num, d.img = num, img
	if d.SetNum != nil {
		d.SetNum(num)
	}
	if err := d.hello(img, num); err != nil {
		err = fmt.Errorf("%s: %w", d.name(), err)
		d.lose(err)
		return err
	}
	if err := d.fetchInfo(); err != nil {
		return err
	}
	serves := ""
	if d.info.Serves != "" {
		serves = ", " + d.info.Serves
	}
	switch {
	case d.Rank >= 0:
		d.setName(fmt.Sprintf("mpi device %d (rank %d, pid %d on %s%s)", num, d.Rank, d.info.PID, d.info.Host, serves))
	case d.Addr != "":
		d.setName(fmt.Sprintf("%s device %d (%s, pid %d on %s%s)", d.Kind, num, d.Addr, d.info.PID, d.info.Host, serves))
	default:
		d.setName(fmt.Sprintf("%s device %d (pid %d%s)", d.Kind, num, d.info.PID, serves))
	}
	return nil
}

// CanLaunch reports whether the device can launch k (plugin.KernelChecker). A
// proxied device names the kernels its kind cannot run when it describes
// itself. (An OpenCL device names those without OpenCL C.)
func (d *Device) CanLaunch(k plugin.Kernel) error {
	if why, ok := d.refused[k.Index()]; ok {
		return fmt.Errorf("%s: %w: kernel %q: %s", d.name(), plugin.ErrBadKernel, k.Name(), why)
	}
	return nil
}

// Alloc numbers the allocation itself. It tells the device in order with
// everything else, without waiting for an answer. So mapping a buffer never
// waits for the device. Sizes that cannot fit in the device's memory, less
// what this host holds there, are refused here. The device's memory is shared
// with other hosts and the pool. A failure there is reported by the first
// operation that uses the allocation.
func (d *Device) Alloc(size int64) (plugin.Ptr, error) {
	limit := d.info.Memory
	if limit <= 0 {
		limit = hostmem.Limit()
	}
	d.mu.Lock()
	p, f, err := d.st.Alloc(size, limit)
	if err == nil {
		err = d.l.put(f)
		if err != nil {
			d.mu.Unlock()
			return 0, d.linkLost(err)
		}
	}
	d.mu.Unlock()
	return p, err
}

// seeAllocs makes sure the device has read the allocations queued for it. If
// it may not have, that costs one round trip. A peer's exchange into them
// travels another link, which nothing orders with this one.
func (d *Device) seeAllocs() error {
	d.mu.Lock()
	n, mark := d.st.Unseen(), d.st.Allocs()
	d.mu.Unlock()
	if n == 0 {
		return nil
	}
	if _, err := d.call(infoReq); err != nil {
		return err
	}
	d.mu.Lock()
	d.st.SeenUpTo(mark) // not "n more": another caller may report the same ones
	d.mu.Unlock()
	return nil
}

// Free gives an allocation back without waiting for the device. The host
// knows its allocations (Alloc chose their addresses), so it checks p itself.
// The frame goes out with the next ones, before any later allocation's. The
// core frees memory once the work that used it is done. So no operation of
// the device's queues uses it any more when the frame comes. (A synchronous
// free cost a round trip on the goroutine that completes nowait tasks, one
// task after the other.)
func (d *Device) Free(p plugin.Ptr) error {
	d.mu.Lock()
	f, err := d.st.Free(p)
	if err == nil {
		err = d.l.put(f)
		if err != nil {
			d.mu.Unlock()
			return d.linkLost(err)
		}
	}
	d.mu.Unlock()
	return err
}

// putClosing queues the CloseQueue frames of the queues closed since the last
// operation. It does so under d.mu, before the operation that comes now.
func (d *Device) putClosing() error {
	for _, id := range d.closing {
		if err := d.l.put(&proto.CloseQueue{Queue: id}); err != nil {
			return err
		}
	}
	d.closing = d.closing[:0]
	return nil
}

// NewQueue makes a queue of the device; its operations go out in order.
func (d *Device) NewQueue() (plugin.Queue, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.st.Alive(); err != nil {
		return nil, err
	}
	d.nq++
	q := &queue{d: d, id: d.nq}
	if d.noStop {
		return unstoppable{q}, nil
	}
	return q, nil
}

// CanWait reports whether d's queues can wait on ev themselves. They can for
// events of d, and of other device processes on this machine. Those tell d
// directly when they fire.
func (d *Device) CanWait(ev plugin.Event) bool {
	e, ok := ev.(*event)
	return ok && (e.d == d || (d.Intro != nil && e.d.Intro == d.Intro))
}

// NewEvent makes an event of the device, to record in its queues.
func (d *Device) NewEvent() (plugin.Event, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ev := &event{d: d, ev: opqueue.NewEvent()}
	id, err := d.st.NewEvent(ev)
	if err != nil {
		return nil, err
	}
	ev.id = id
	return ev, nil
}

// Close tells the device process to exit and releases the transport.
func (d *Device) Close() error {
	if !d.life.Close() {
		return nil
	}
	// Nothing registers once d.life is closed: a registration under way
	// ends before d.mu is ours.
	d.mu.Lock()
	reading, lost := d.reading, d.life.Lost() != nil
	d.mu.Unlock()
	d.l.send(&proto.Exit{})
	d.l.close(closeTimeout)
	if d.Intro != nil {
		d.Intro.Forget(d)
	}
	var err error
	if d.CloseFn != nil {
		err = d.CloseFn(lost)
	}
	if lost {
		err = nil // the loss was reported by the operations it failed
	}
	if reading {
		<-d.readerDone
	}
	d.lose(errLinkClosed)
	return err
}

var _ plugin.LostReporter = (*Device)(nil)
