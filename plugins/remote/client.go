package remote

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goffload/offload/internal/hostmem"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/opqueue"
	"github.com/goffload/offload/plugins/remote/proto"
)

// device is the host side of a remote device: it turns plugin calls into
// frames and frames back into results. One goroutine reads the link; the
// link's writer writes what the others queue.
//
// Everything that waits for the device — a call's reply, a sync mark, an
// event, a transfer — is registered in d's maps under d.mu, the lock that
// loss takes too: a registration checks d.lost first, and loss takes the
// maps whole and fails everything in them, so after a loss nothing new
// registers and nothing registered is forgotten. Frames whose order matters
// (a wait and the forgetting of its event, a notify and the same) are
// queued on the link under d.mu as well, after the check of the state they
// depend on.
type device struct {
	l     *link
	label atomic.Pointer[string] // "local device 1 (pid 1234)"
	num   int                    // device number, from Load
	info  plugin.Info
	// kind is the device kind as GOFFLOAD_DEVICES names it ("local",
	// "tcp", "mpi"): Info().Kind, and the start of the name.
	kind string
	// addr is where a TCP device serves ("tcp://HOST:PORT"); empty for others.
	addr string
	// count is how many kernels the device process has (a prefix of ours).
	count int
	// onLost, if set, explains a broken link (the process's exit status).
	onLost func(error) error
	// closeFn releases what the transport holds (the process, the socket).
	closeFn func(lost bool) error
	// setNum, if set, tells the transport the device's number.
	setNum func(int)
	// side is the channel the host introduces device processes to each
	// other on (nil for devices that are not processes of this machine).
	side *net.UnixConn
	// rank is the device's MPI rank, or -1: MPI devices reach each other.
	rank int
	// img is the image Load loaded (set before the link's reader starts).
	img *plugin.Image
	// tracer is where timed operations go (Trace), clock how their device
	// times become host times.
	tracer atomic.Pointer[func(plugin.OpTime)]
	clock  clock

	mu     sync.Mutex
	next   uint64
	nq     uint32
	calls  map[uint64]*call     // requests and sync marks waiting for their answer
	events map[uint64]*event    // events the device will fire, or that queues may still wait on
	pushes map[uint64][]byte    // pulled submits: data the device will pull
	pulls  map[uint64]*incoming // retrieves: where arriving data goes
	forget []uint64             // closed, fired events for the device to forget, sent in batches
	vnext  plugin.Ptr           // the address of the next allocation (the host numbers them)
	sizes  map[plugin.Ptr]int64 // live allocations' sizes
	inUse  int64                // their sum
	unseen int                  // allocations the device may not have read yet
	lost   error
	closed bool

	reading    bool
	readerDone chan struct{}
}

// call is a request or sync mark waiting for its answer; xfers are the
// transfers that are over (done or skipped) once it is answered.
type call struct {
	ch    chan proto.Reply
	xfers []uint64
}

func newDevice(l *link, kind, name string) *device {
	d := &device{
		l:          l,
		kind:       kind,
		calls:      map[uint64]*call{},
		events:     map[uint64]*event{},
		pushes:     map[uint64][]byte{},
		pulls:      map[uint64]*incoming{},
		sizes:      map[plugin.Ptr]int64{},
		rank:       -1,
		vnext:      1 << 52, // any start: these addresses are the device's names for its blocks
		readerDone: make(chan struct{}),
	}
	d.setName(name)
	return d
}

func (d *device) name() string     { return *d.label.Load() }
func (d *device) setName(s string) { d.label.Store(&s) }

// hello greets the device process and checks that it runs our code.
func (d *device) hello(img *plugin.Image, num int) error {
	if err := d.l.send(&proto.Hello{Num: uint32(max(num, 0)), Status: proto.Status{Text: helloText(img)}}); err != nil {
		return err
	}
	m, err := d.l.r.ReadMsg()
	if err != nil {
		return fmt.Errorf("reading the device's hello: %w", err)
	}
	if m.Type != proto.THello {
		return fmt.Errorf("%w: want hello, got %s", proto.ErrFrame, m.Type)
	}
	f, err := proto.As[proto.Hello](m)
	if err != nil {
		return err
	}
	if err := statusErr(f.Status); err != nil {
		return fmt.Errorf("the device refused the host: %w", err)
	}
	h, err := parseHello(f.Text)
	if err != nil {
		return err
	}
	if err := checkImage(h, img, "host"); err != nil {
		d.l.send(&proto.Exit{})
		return err
	}
	d.count = h.count
	d.mu.Lock()
	d.reading = true
	d.mu.Unlock()
	d.l.live(timing())
	go d.read()
	return nil
}

// read dispatches the device's frames until the link ends.
func (d *device) read() {
	defer close(d.readerDone)
	for {
		m, err := d.l.r.ReadMsg()
		if err == nil {
			err = d.dispatch(m)
		}
		if err != nil {
			if lerr := d.l.failed(); lerr != nil && !isClosedErr(lerr) {
				err = lerr // the link failed first (silence, a write error): that is why
			}
			d.lose(err)
			return
		}
	}
}

func (d *device) dispatch(m *proto.Msg) error {
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
		err := statusErr(f.Status)
		d.mu.Lock()
		ev := d.events[f.Event]
		var implies []*event
		if ev != nil && !ev.heard {
			ev.heard, ev.err = true, err
			implies, ev.implies = ev.implies, nil
			d.dropXfers(ev.xfers)
			ev.xfers = nil
			if ev.closed {
				d.forgetLocked(ev)
			}
		}
		d.mu.Unlock()
		if ev == nil {
			return fmt.Errorf("%w: unknown event %d fired", proto.ErrFrame, f.Event)
		}
		if err == nil {
			pastWaits(implies)
		}
		ev.ev.Fire(err)
	case *proto.Times:
		return d.times(f)
	case *proto.Pull:
		data, ok := take(&d.mu, d.pushes, f.Xfer)
		if !ok {
			return fmt.Errorf("%w: pull of unknown transfer %d", proto.ErrFrame, f.Xfer)
		}
		if len(data) > 0 && len(data) <= proto.MaxInline && d.l.canTryWrite() {
			// Small: in one frame, written here (it never blocks), not
			// by the writer after a hand-off.
			_, err := d.l.sendDataSoon(f.Xfer, data)
			return err
		}
		d.l.stream(f.Xfer, data, false, func(uint64, error) {}) // a failure is the link's, seen by the reader
	case *proto.Data:
		in, err := receive(&d.mu, d.pulls, d.l, m)
		if in == nil {
			return err
		}
		// Tell the device the data is in host memory: it holds back telling
		// other devices about events after this copy until then. These
		// acknowledgements go out in the order the data came.
		return d.l.sendSoon(&proto.XferDone{Xfer: f.Xfer}) // the reader may: it never blocks
	default:
		return fmt.Errorf("%w: unexpected %s frame from the device", proto.ErrFrame, m.Type)
	}
	return nil
}

// answer completes the call req with r.
func (d *device) answer(req uint64, r proto.Reply, t proto.Type) error {
	d.mu.Lock()
	c := d.calls[req]
	delete(d.calls, req)
	if c != nil {
		d.dropXfers(c.xfers)
	}
	d.mu.Unlock()
	if c == nil {
		return fmt.Errorf("%w: %s for unknown request %d", proto.ErrFrame, t, req)
	}
	c.ch <- r
	return nil
}

// dropXfers forgets transfers that are over: done, or skipped by the device
// after an earlier failure (their buffers are the caller's again). Under d.mu.
func (d *device) dropXfers(ids []uint64) {
	for _, id := range ids {
		delete(d.pushes, id)
		delete(d.pulls, id)
	}
}

// lose fails the device: every pending and later operation returns an
// error naming the device and the cause.
func (d *device) lose(cause error) {
	d.mu.Lock()
	lost, closed := d.lost != nil, d.closed
	d.mu.Unlock()
	if lost {
		return
	}
	if closed {
		cause = errors.New("device closed")
	} else if d.onLost != nil {
		cause = d.onLost(cause) // may wait a moment for the process's exit status
	}
	err := fmt.Errorf("%s: %w: %w", d.name(), plugin.ErrDeviceLost, cause)
	d.mu.Lock()
	if d.lost != nil {
		d.mu.Unlock()
		return
	}
	d.lost = err
	calls, events := d.calls, d.events
	d.calls, d.events, d.pushes, d.pulls, d.forget = nil, nil, nil, nil, nil
	d.mu.Unlock()
	d.l.fail(err)
	// The maps are ours now: nothing registers after a loss.
	for _, c := range calls {
		c.ch <- proto.Reply{Status: statusOf(err)}
	}
	for _, ev := range events {
		ev.ev.Fire(err)
	}
}

// linkLost is the error of an operation that the link refused with err,
// called without d.mu: the device's loss once the reader has reported it
// (it soon does, the link having failed), so that the error says why the
// device went (a process's exit status, a signal) and not only how the
// link noticed (a broken pipe).
func (d *device) linkLost(err error) error {
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

// Lost reports why the device stopped working, or nil while it works.
func (d *device) Lost() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.lost
}

// aliveLocked returns why d cannot take work, under d.mu.
func (d *device) aliveLocked() error {
	if d.lost != nil {
		return d.lost
	}
	if d.closed {
		return fmt.Errorf("%s: %w: device is closed", d.name(), plugin.ErrBadHandle)
	}
	return nil
}

func (d *device) alive() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.aliveLocked()
}

// request registers a call for the answer to the frame that frame(id)
// makes and queues the frame, under the lock loss takes, then writes it
// (flushNow: the caller is not a reader); xfers are transfers the answer
// ends.
func (d *device) request(frame func(id uint64) proto.Frame, xfers []uint64) (chan proto.Reply, error) {
	c := &call{ch: make(chan proto.Reply, 1), xfers: xfers}
	d.mu.Lock()
	if err := d.aliveLocked(); err != nil {
		d.mu.Unlock()
		return nil, err
	}
	d.next++
	id := d.next
	if err := d.l.put(frame(id)); err != nil {
		d.mu.Unlock()
		return nil, d.linkLost(err)
	}
	d.calls[id] = c
	d.mu.Unlock()
	d.l.flushNow()
	return c.ch, nil
}

// request numbers: what a request's id goes in.
func infoReq(id uint64) proto.Frame  { return &proto.Info{Req: id} }
func clockReq(id uint64) proto.Frame { return &proto.Clock{Req: id} }

// call sends a request (infoReq, clockReq) and waits for its reply, or
// for the device's loss.
func (d *device) call(frame func(id uint64) proto.Frame) (proto.Reply, error) {
	ch, err := d.request(frame, nil)
	if err != nil {
		return proto.Reply{}, err
	}
	r := <-ch
	if err := statusErr(r.Status); err != nil {
		if errors.Is(err, plugin.ErrDeviceLost) {
			return proto.Reply{}, err
		}
		return proto.Reply{}, fmt.Errorf("%s: %w", d.name(), err)
	}
	return r, nil
}

func (d *device) Info() plugin.Info { return d.info }

func (d *device) fetchInfo() error {
	r, err := d.call(infoReq)
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(r.Text), &d.info); err != nil {
		return fmt.Errorf("%s: %w: info: %v", d.name(), proto.ErrFrame, err)
	}
	d.info.Kind = d.kind
	return nil
}

// Load greets the device process, which checks that both run the same code,
// and asks it to describe itself.
func (d *device) Load(img *plugin.Image, num int) error {
	d.num, d.img = num, img
	if d.setNum != nil {
		d.setNum(num)
	}
	if err := d.hello(img, num); err != nil {
		err = fmt.Errorf("%s: %w", d.name(), err)
		d.lose(err)
		return err
	}
	if err := d.fetchInfo(); err != nil {
		return err
	}
	switch {
	case d.rank >= 0:
		d.setName(fmt.Sprintf("mpi device %d (rank %d, pid %d on %s)", num, d.rank, d.info.PID, d.info.Host))
	case d.addr != "":
		d.setName(fmt.Sprintf("%s device %d (%s, pid %d on %s)", d.kind, num, d.addr, d.info.PID, d.info.Host))
	default:
		d.setName(fmt.Sprintf("%s device %d (pid %d)", d.kind, num, d.info.PID))
	}
	return nil
}

// Alloc numbers the allocation itself and tells the device in order with
// everything else, without waiting for an answer: mapping a buffer never
// waits for the device. Sizes that cannot fit in the device's memory (less
// what this host holds there) are refused here; a failure on the device
// (its memory is shared with other hosts and the pool) is reported by the
// first operation that uses the allocation.
func (d *device) Alloc(size int64) (plugin.Ptr, error) {
	if size < 0 {
		return 0, fmt.Errorf("%s: %w: negative size %d", d.name(), plugin.ErrBadPointer, size)
	}
	limit := d.info.Memory
	if limit <= 0 {
		limit = hostmem.Limit()
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.aliveLocked(); err != nil {
		return 0, err
	}
	if size > limit-d.inUse {
		return 0, fmt.Errorf("%s: %w: %d bytes with %d bytes in use is more than the device's memory (%d bytes)", d.name(), plugin.ErrOutOfMemory, size, d.inUse, limit)
	}
	p := d.vnext
	d.vnext += plugin.Ptr((max(size, 1) + 4095) &^ 4095)
	if err := d.l.put(&proto.Alloc{Ptr: uint64(p), Size: uint64(size)}); err != nil {
		return 0, fmt.Errorf("%s: %w: %w", d.name(), plugin.ErrDeviceLost, err)
	}
	d.sizes[p] = size
	d.inUse += size
	d.unseen++
	return p, nil
}

// seeAllocs makes sure the device has read the allocations queued for it,
// with one round trip if it may not have: a peer's exchange into them
// travels another link, which nothing orders with this one.
func (d *device) seeAllocs() error {
	d.mu.Lock()
	n := d.unseen
	d.mu.Unlock()
	if n == 0 {
		return nil
	}
	if _, err := d.call(infoReq); err != nil {
		return err
	}
	d.mu.Lock()
	d.unseen -= n
	d.mu.Unlock()
	return nil
}

// Free gives an allocation back without waiting for the device: the host
// knows its allocations (Alloc chose their addresses), so it checks p
// itself, and the frame goes out with the next ones, before any later
// allocation's. The core frees memory once the work that used it is done,
// so no operation of the device's queues uses it any more when the frame
// comes. (A synchronous free cost a round trip on the goroutine that
// completes nowait tasks, one task after the other.)
func (d *device) Free(p plugin.Ptr) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.aliveLocked(); err != nil {
		return err
	}
	size, ok := d.sizes[p]
	if !ok {
		return fmt.Errorf("%s: %w: free of %#x, which is not the start of a live allocation", d.name(), plugin.ErrBadPointer, uint64(p))
	}
	if err := d.l.put(&proto.Free{Ptr: uint64(p)}); err != nil {
		return fmt.Errorf("%s: %w: %w", d.name(), plugin.ErrDeviceLost, err)
	}
	d.inUse -= size
	delete(d.sizes, p)
	return nil
}

func (d *device) NewQueue() (plugin.Queue, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.aliveLocked(); err != nil {
		return nil, err
	}
	d.nq++
	return &queue{d: d, id: d.nq}, nil
}

// forgetLocked tells the device, in batches, that ev is closed and fired:
// no queue will wait on it again. Under d.mu, so that the batch goes out
// after every wait and notify queued for the event.
func (d *device) forgetLocked(ev *event) {
	delete(d.events, ev.id)
	d.forget = append(d.forget, ev.id)
	if len(d.forget) < 512 {
		return
	}
	d.l.send(&proto.Forget{Events: d.forget}) // encoded now; a failure is the link's, seen by the reader
	d.forget = d.forget[:0]
}

// CanWait reports whether d's queues can wait on ev themselves: events of d,
// and of other device processes on this machine, which tell d directly when
// they fire.
func (d *device) CanWait(ev plugin.Event) bool {
	e, ok := ev.(*event)
	return ok && (e.d == d || (e.d.side != nil && d.side != nil) || (e.d.rank >= 0 && d.rank >= 0))
}

func (d *device) NewEvent() (plugin.Event, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.aliveLocked(); err != nil {
		return nil, err
	}
	d.next++
	ev := &event{d: d, id: d.next, ev: opqueue.NewEvent()}
	d.events[ev.id] = ev
	return ev, nil
}

// Close tells the device process to exit and releases the transport.
func (d *device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	reading, lost := d.reading, d.lost != nil
	d.mu.Unlock()
	d.l.send(&proto.Exit{})
	d.l.close(closeTimeout)
	forgetIntroductions(d)
	if d.side != nil {
		d.side.Close()
	}
	var err error
	if d.closeFn != nil {
		err = d.closeFn(lost)
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

var _ plugin.LostReporter = (*device)(nil)
