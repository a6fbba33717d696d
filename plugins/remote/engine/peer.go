package engine

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/opqueue"
	"github.com/goffload/offload/plugins/remote/proto"
	"github.com/goffload/offload/plugins/remote/state"
)

// Device-to-device transfers go straight between the two device processes.
// The host only introduces them. It makes a socket pair and hands one end to
// each device over a side channel, a Unix socket that carries descriptors.
// Each device then writes exchanges into the other's memory over the pair.
// The writer's queue operation completes when the receiver says the data is
// in place.

// peers is a device process's links to other devices, by device number.
type peers struct {
	s    *Session
	mu   sync.Mutex
	cond *sync.Cond
	by   map[int]*peer
	done bool
	// events stand in for other devices' events that our queues wait on. They
	// are by device and wait id, one per wait the host asked for. The other
	// device fires them over the peer link. Each is touched twice, by the
	// wait and by the firing, in either order. It is forgotten at the second
	// touch.
	events map[[2]uint64]*standIn
	// gsigs stand in for other devices' graph signals (graph.go).
	gsigs map[gsigKey]*standIn
	// dead holds why the link to a device broke: its events never fire.
	dead map[int]error
	// connect, if set, starts the link to device num itself. (MPI ranks reach
	// each other without the host's introduction.) It adds the link unless
	// the other side's first frame did.
	connect func(num int) error
}

type standIn struct {
	ev      *opqueue.Event
	touched int
}

type peer struct {
	num int
	l   *link

	mu      sync.Mutex
	next    uint64
	waiting map[uint64]chan error // our exchanges, until the peer confirms
	in      map[uint64]*incoming  // exchanges into our memory
	lost    error
}

func newPeers(s *Session) *peers {
	p := &peers{s: s, by: map[int]*peer{}, events: map[[2]uint64]*standIn{}, dead: map[int]error{}}
	p.cond = sync.NewCond(&p.mu)
	return p
}

func (ps *peers) add(num int, l *link) {
	p := &peer{num: num, l: l, waiting: map[uint64]chan error{}, in: map[uint64]*incoming{}}
	ps.mu.Lock()
	delete(ps.dead, num)
	if old := ps.by[num]; old != nil {
		old.l.fail(fmt.Errorf("replaced"))
	}
	ps.by[num] = p
	ps.cond.Broadcast()
	ps.mu.Unlock()
	l.live(timing())
	go ps.read(p)
}

// link returns the link to device num, or nil if there is none yet.
func (ps *peers) link(num int) *link {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if p := ps.by[num]; p != nil {
		return p.l
	}
	return nil
}

// get returns the link to device num. It waits a while for the host's
// introduction, which may still be on its way. If the link broke, it returns
// the error that broke it at once. That error wraps plugin.ErrDeviceLost.
func (ps *peers) get(num int) (*peer, error) {
	ps.mu.Lock()
	p, dead := ps.by[num], ps.dead[num]
	ps.mu.Unlock()
	if p != nil {
		return p, nil
	}
	if dead != nil { // it was linked, and the link broke: no introduction is coming
		return nil, dead
	}
	if ps.connect != nil {
		if err := ps.connect(num); err != nil {
			return nil, fmt.Errorf("%w: no link to device %d: %w", plugin.ErrUnsupported, num, err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	timer := time.AfterFunc(5*time.Second, func() { ps.mu.Lock(); ps.cond.Broadcast(); ps.mu.Unlock() })
	defer timer.Stop()
	ps.mu.Lock()
	defer ps.mu.Unlock()
	for ps.by[num] == nil && !ps.done && time.Now().Before(deadline) {
		ps.cond.Wait()
	}
	if p := ps.by[num]; p != nil {
		return p, nil
	}
	return nil, fmt.Errorf("%w: no link to device %d", plugin.ErrUnsupported, num)
}

// event returns the stand-in for wait id on device num's event, recorded. It
// fires when that device says so.
func (ps *peers) event(num int, wait uint64) *opqueue.Event {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	k := [2]uint64{uint64(num), wait}
	si := ps.events[k]
	if si == nil {
		si = &standIn{ev: opqueue.NewEvent()}
		si.ev.Arm()
		ps.events[k] = si
		if err := ps.dead[num]; err != nil {
			si.ev.Fire(err)
		} else if ps.done {
			si.ev.Fire(ErrSessionOver)
		}
	}
	if si.touched++; si.touched == 2 {
		delete(ps.events, k)
	}
	return si.ev
}

// fired fires the stand-in for wait id on device num's event.
func (ps *peers) fired(num int, wait uint64, err error) {
	ps.event(num, wait).Fire(err)
}

// tell lets device num know that our event id fired. It never blocks. If the
// host's introduction to num is still on its way, a goroutine waits for it.
func (ps *peers) tell(num int, id uint64, err error) {
	ps.mu.Lock()
	p := ps.by[num]
	ps.mu.Unlock()
	if p != nil {
		ps.send(p, num, id, err)
		return
	}
	go func() {
		p, err2 := ps.get(num)
		if err2 != nil {
			ps.cannotTell(num, id, err2)
			return
		}
		ps.send(p, num, id, err)
	}()
}

// send writes the firing on p's link. If the link can take it without
// blocking, it writes it at once; the waiting device then hears sooner than
// after a hand-off. Else the writer writes it.
func (ps *peers) send(p *peer, num int, id uint64, err error) {
	if err2 := p.l.sendSoon(&proto.PeerEvent{Wait: id, Status: proto.StatusOf(err)}); err2 != nil {
		ps.cannotTell(num, id, err2)
	}
}

// cannotTell says on stderr that device num could not be told that our event
// id fired. It says nothing if num is lost (err wraps ErrDeviceLost). Then
// nothing there waits for it any more, and the host reports the loss. (A lost
// peer made a line per event its queues had waited on.)
func (ps *peers) cannotTell(num int, id uint64, err error) {
	if errors.Is(err, plugin.ErrDeviceLost) {
		return
	}
	fmt.Fprintf(os.Stderr, "goffload device %d: cannot tell device %d that event %d fired: %v\n", ps.s.num, num, id, err)
}

func (ps *peers) close() {
	ps.mu.Lock()
	ps.done = true
	by := ps.by
	ps.by = map[int]*peer{}
	events := ps.events
	ps.events = map[[2]uint64]*standIn{}
	sigs := ps.endSignals()
	ps.cond.Broadcast()
	ps.mu.Unlock()
	for _, ev := range sigs {
		ev.Fire(ErrSessionOver)
	}
	for _, p := range by {
		p.l.fail(ErrSessionOver)
	}
	for _, si := range events { // no peer will tell: the queues must not wait forever
		si.ev.Fire(ErrSessionOver)
	}
}

// exchange copies src to dst in device num's memory and waits until the
// data is in place there.
func (ps *peers) exchange(num int, dst plugin.Ptr, src []byte) error {
	ch, err := ps.exchangeOut(num, dst, src, false)
	if err != nil {
		return err
	}
	return <-ch
}

// exchangeQuiet sends src to dst in device num's memory as a quiet put
// (proto.PeerPut.Quiet): the receiver does not confirm it. It returns once
// the data is written on their link; src may change then. What the caller
// sends that device next on the link comes after the data is in place there;
// a put it cannot place ends the link. A graph's exchange that is followed by
// a signal for its device goes this way (Session.plan).
func (ps *peers) exchangeQuiet(num int, dst plugin.Ptr, src []byte) error {
	_, err := ps.exchangeOut(num, dst, src, true)
	return err
}

// exchangeOut sends src to dst in device num's memory. It returns once the
// data is written on their link; src may change then. Unless quiet, the
// channel says when the data is in place there; quiet, it is nil.
func (ps *peers) exchangeOut(num int, dst plugin.Ptr, src []byte, quiet bool) (chan error, error) {
	p, err := ps.get(num)
	if err != nil {
		return nil, err
	}
	var ch chan error
	if !quiet {
		ch = make(chan error, 1)
	}
	p.mu.Lock()
	if p.lost != nil {
		p.mu.Unlock()
		return nil, p.lost
	}
	p.next++
	id := p.next
	if !quiet {
		p.waiting[id] = ch
	}
	p.mu.Unlock()
	put := &proto.PeerPut{Xfer: id, Dst: uint64(dst), Size: uint64(len(src)), Quiet: quiet}
	if len(src) > 0 && len(src) <= proto.MaxInline && p.l.canTryWrite() {
		// Small: the data goes in a control frame behind the put. This
		// goroutine writes both at once where the link takes them without
		// blocking. There is no hand-off to the writer and back.
		err = p.l.put(put)
		if err == nil {
			_, err = p.l.sendDataSoon(id, src)
		}
	} else if err = p.l.send(put); err == nil {
		_, err = p.l.sendData(id, src, false)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: link to device %d: %v", plugin.ErrDeviceLost, num, err)
	}
	return ch, nil
}

// read serves a peer link: exchanges into our memory, and confirmations of
// ours.
func (ps *peers) read(p *peer) {
	err := ps.serve(p)
	lost := fmt.Errorf("%w: link to device %d: %v", plugin.ErrDeviceLost, p.num, err)
	p.l.fail(lost)
	p.mu.Lock()
	p.lost = lost
	waiting := p.waiting
	p.waiting = map[uint64]chan error{}
	p.mu.Unlock()
	for _, ch := range waiting {
		ch <- lost
	}
	ps.mu.Lock()
	if ps.by[p.num] == p {
		delete(ps.by, p.num)
	}
	ps.dead[p.num] = lost
	var orphans []*opqueue.Event
	for k, si := range ps.events {
		if k[0] == uint64(p.num) {
			orphans = append(orphans, si.ev)
		}
	}
	orphans = append(orphans, ps.signalOrphans(p.num)...)
	ps.mu.Unlock()
	for _, ev := range orphans { // their device cannot tell us any more
		ev.Fire(lost)
	}
}

// putBytes is where a peer's exchange into dst lands. That is the device's
// memory, or a buffer for a served device's (servedPut writes it there).
func (ps *peers) putBytes(dst plugin.Ptr, size int64) ([]byte, error) {
	if ps.s.srv == nil {
		return ps.s.mem.Bytes(dst, size)
	}
	if _, err := ps.s.srv.addr(dst, size); err != nil {
		return nil, ps.s.servedErr(err)
	}
	return ps.s.srv.stage.get(size), nil
}

func (ps *peers) serve(p *peer) error {
	for {
		m, err := p.l.r.ReadMsg()
		if err != nil {
			return err
		}
		fr, err := proto.Parse(m)
		if err != nil {
			return err
		}
		switch f := fr.(type) {
		case *proto.PeerPut:
			b, err := ps.putBytes(plugin.Ptr(f.Dst), int64(f.Size))
			in := &incoming{dst: b, size: int(f.Size), done: make(chan struct{}), at: plugin.Ptr(f.Dst), quiet: f.Quiet}
			if err != nil { // skip the data as it comes, then refuse it
				in = &incoming{size: int(f.Size), err: err, done: make(chan struct{}), quiet: f.Quiet}
			}
			if f.Size == 0 {
				if err := ps.placed(p, f.Xfer, in); err != nil {
					return err
				}
				continue
			}
			p.mu.Lock()
			p.in[f.Xfer] = in
			p.mu.Unlock()
		case *proto.Data:
			in, err := receive(&p.mu, p.in, p.l, m)
			if err != nil {
				return err
			}
			if in != nil { // written at once where the link takes it: no writer woken
				if ps.s.srv != nil && in.err == nil {
					in.err = ps.s.servedPut(in.at, in.dst)
					ps.s.srv.stage.put(in.dst)
				}
				if err := ps.placed(p, f.Xfer, in); err != nil {
					return err
				}
			}
		case *proto.PeerEvent:
			ps.fired(p.num, f.Wait, f.Status.Err())
		case *proto.PeerSignal:
			ps.gevent(p.num, f.Graph, f.Gen, f.Signal).Fire(f.Status.Err())
		case *proto.XferDone:
			ch, _ := take(&p.mu, p.waiting, f.Xfer)
			if ch == nil {
				return fmt.Errorf("%w: confirmation of unknown exchange %d", proto.ErrFrame, f.Xfer)
			}
			ch <- f.Status.Err()
		default:
			return fmt.Errorf("%w: unexpected %s frame from device %d", proto.ErrFrame, m.Type, p.num)
		}
	}
}

// placed answers p's exchange xfer, whose data is in (or was refused: in.err).
// A quiet one is not answered; refused, it ends the link, with why.
func (ps *peers) placed(p *peer, xfer uint64, in *incoming) error {
	if !in.quiet {
		p.l.sendSoon(&proto.XferDone{Xfer: xfer, Status: proto.StatusOf(in.err)})
		return nil
	}
	if in.err != nil {
		return fmt.Errorf("exchange %d from device %d (not confirmed: the link ends): %w", xfer, p.num, in.err)
	}
	return nil
}

// An Introducer links the devices it opened to each other (Device.Intro).
// Their queues then wait on each other's events and exchange data directly.
// The devices are device processes of this machine, or an MPI job's ranks.
// The engine calls Introduce before a's queue first depends on b. It calls
// Forget when a device closes.
type Introducer interface {
	// Introduce makes sure a and b have a link between them, or are
	// introduced to each other. It returns once each will find the other.
	Introduce(a, b *Device) error
	// Forget drops d's introductions: d closed.
	Forget(d *Device)
}

// introduce introduces a and b to each other, if their kind can.
func introduce(a, b *Device) error {
	if a.Intro == nil || a.Intro != b.Intro {
		return fmt.Errorf("%w: devices %d and %d are not both processes of this machine", plugin.ErrUnsupported, a.num, b.num)
	}
	return a.Intro.Introduce(a, b)
}

// The device side of copies: submits (inline, pulled, pushed), retrieves, and
// the host's acknowledgements of retrieves. Tells to peers wait for those
// acknowledgements.

// tell sends peers the word that state.Session says is due. It never
// blocks.
func (s *Session) tell(now []state.Tell) {
	for _, t := range now {
		s.peers.tell(t.Peer, t.Wait, t.Err)
	}
}

// ack counts an acknowledgement from the host. It sends the tells that waited
// for it, on the reader (peers.tell never blocks). There is no goroutine to
// wake.
func (s *Session) ack() {
	s.emu.Lock()
	now := s.evs.Acked()
	s.emu.Unlock()
	s.tell(now)
}

// submitInline copies a submit's data, carried in its frame.
func (s *Session) submitInline(f *proto.Submit) error {
	q, dst, size := s.queue(f.Queue), plugin.Ptr(f.Dst), int64(len(f.Data))
	timed := s.timer(f.Queue, plugin.OpSubmit, 0, size)
	if s.srv != nil { // the served queue reads its own copy until drained
		qid, data := f.Queue, append([]byte(nil), f.Data...)
		t := s.servedTimer(qid, plugin.OpSubmit, 0, size)
		run := func() error { return s.servedSubmit(qid, dst, data, t) }
		if ran, err := q.RunHere(run, t.timed()); ran || err != nil {
			return nil
		}
		return q.DoTimed(run, t.timed())
	}
	copyFrom := func(data []byte) func() error {
		return func() error {
			b, err := s.mem.Bytes(dst, size)
			if err != nil {
				return err
			}
			copy(b, data)
			return nil
		}
	}
	// On an idle queue the reader copies the payload straight into
	// device memory.
	if ran, err := q.RunHere(copyFrom(f.Data), timed); ran || err != nil {
		return nil
	}
	// Otherwise the data waits for its turn in a buffer of the pool. A fresh
	// allocation each time costs page faults once the heap is large.
	buf := inlineBufs.Get().(*[]byte)
	data := append((*buf)[:0], f.Data...)
	run := copyFrom(data)
	return q.DoTimed(func() error {
		defer inlineBufs.Put(buf) // not if the copy is skipped: the buffer is garbage then
		return run()
	}, timed)
}

// submitPulled asks for a submit's data when its queue reaches it. It reads
// it straight into device memory.
func (s *Session) submitPulled(f *proto.SubmitPulled) error {
	q, qid, id, dst, size := s.queue(f.Queue), f.Queue, f.Xfer, plugin.Ptr(f.Dst), int64(f.Size)
	timed := s.timer(f.Queue, plugin.OpSubmit, 0, size)
	var t *servedTimer
	if s.srv != nil {
		t = s.servedTimer(qid, plugin.OpSubmit, 0, size)
		timed = t.timed()
	}
	return q.DoTimed(func() error {
		var b []byte
		var err error
		if s.srv != nil {
			if _, err = s.srv.addr(dst, size); err == nil {
				b = s.srv.stage.get(size)
			}
		} else {
			b, err = s.mem.Bytes(dst, size)
		}
		if err != nil {
			return err
		}
		p := &incoming{dst: b, size: len(b), done: make(chan struct{})}
		if s.srv != nil {
			p.prog = make(chan struct{}, 1)
		}
		s.mu.Lock()
		s.pulls[id] = p
		s.mu.Unlock()
		if err := s.l.sendNow(&proto.Pull{Queue: qid, Xfer: id}); err != nil { // a queue's goroutine
			return err
		}
		if s.srv != nil {
			return s.servedSubmitAsItComes(qid, dst, p, t)
		}
		return p.wait()
	}, timed)
}

// submitPushed takes a submit whose data follows at once. The reader reads it
// straight into device memory as it comes. (The host sends it so only when
// the queue has nothing before it.) The queue's operation ends when all of it
// is in. A submit to memory that is not the device's is skipped on arrival
// and fails in the queue.
func (s *Session) submitPushed(f *proto.SubmitPushed) error {
	q, dst, size := s.queue(f.Queue), plugin.Ptr(f.Dst), int64(f.Size)
	timed := s.timer(f.Queue, plugin.OpSubmit, 0, size)
	p := &incoming{size: int(size), done: make(chan struct{})}
	if s.srv != nil {
		p.prog = make(chan struct{}, 1)
		if _, p.err = s.srv.addr(dst, size); p.err == nil {
			p.dst = s.srv.stage.get(size)
		}
	} else {
		p.dst, p.err = s.mem.Bytes(dst, size)
	}
	s.mu.Lock()
	if s.pulls[f.Xfer] != nil {
		s.mu.Unlock()
		return fmt.Errorf("%w: submit reuses transfer %d", proto.ErrFrame, f.Xfer)
	}
	s.pulls[f.Xfer] = p
	s.mu.Unlock()
	if size == 0 { // no data comes
		take(&s.mu, s.pulls, f.Xfer)
		close(p.done)
	}
	if s.srv != nil {
		qid := f.Queue
		t := s.servedTimer(qid, plugin.OpSubmit, 0, size)
		return q.DoTimed(func() error { return s.servedSubmitAsItComes(qid, dst, p, t) }, t.timed())
	}
	return q.DoTimed(p.wait, timed)
}

// retrieve sends size bytes at src as transfer id. It numbers it among the
// counted transfers, the order the host acknowledges them in. If now, it goes
// in one frame written at once (link.sendDataSoon). Else the writer streams
// it.
func (s *Session) retrieve(id uint64, src plugin.Ptr, size int64, now bool) error {
	b, err := s.mem.Bytes(src, size)
	if err != nil {
		return err
	}
	return s.sendRetrieved(id, b, now)
}

// sendRetrieved sends b as transfer id, numbered among the counted
// transfers, as retrieve does.
func (s *Session) sendRetrieved(id uint64, b []byte, now bool) error {
	var (
		seq uint64
		err error
	)
	if now {
		seq, err = s.l.sendDataSoon(id, b)
	} else {
		seq, err = s.l.sendData(id, b, true)
	}
	if err != nil {
		return err
	}
	s.emu.Lock()
	s.evs.Sent(seq)
	s.emu.Unlock()
	return nil
}

// inlineBufs holds the buffers inline submits wait in, proto.MaxInline
// bytes each.
var inlineBufs = sync.Pool{New: func() any { b := make([]byte, proto.MaxInline); return &b }}

// data reads a fragment of a pulled submit straight into device memory.
func (s *Session) data(m *proto.Msg) error {
	in, err := receive(&s.mu, s.pulls, s.l, m)
	if in != nil {
		close(in.done)
	}
	return err
}

// Sessions of one process that serve devices of one host link to each other
// inside the process. They do so when the host introduces them (Sibling). The
// session has a token, which its Serve answer tells the host. The host tells
// each the other's.

// processToken tells the host which sessions share a process.
var processToken = randomToken()

// siblings are the process's proxying sessions, by token.
var siblings = struct {
	sync.Mutex
	by map[uint64]*Session
}{by: map[uint64]*Session{}}

func randomToken() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return binary.LittleEndian.Uint64(b[:]) | 1
}

// enlist gives the session its token, among the process's siblings.
func (s *Session) enlist() uint64 {
	siblings.Lock()
	defer siblings.Unlock()
	if s.token == 0 {
		s.token = randomToken()
		siblings.by[s.token] = s
	}
	return s.token
}

// unlist takes the session out of its process's siblings.
func (s *Session) unlist() {
	siblings.Lock()
	defer siblings.Unlock()
	if s.token != 0 {
		delete(siblings.by, s.token)
	}
}

// linkSibling links the session and the process's session token (the host's
// device peer) with a link inside the process. Their exchanges and waits go
// over it. Exchanges go straight between their served devices where the kind
// can copy so (servedExchange).
func (s *Session) linkSibling(peer int, token uint64) {
	siblings.Lock()
	o := siblings.by[token]
	siblings.Unlock()
	if o == nil || o == s || s.PairLinks == nil {
		fmt.Fprintf(os.Stderr, "goffload device %d (pid %d): no session %#x in this process to link to as device %d\n", s.num, os.Getpid(), token, peer)
		return
	}
	a, b, err := s.PairLinks()
	if err != nil {
		fmt.Fprintf(os.Stderr, "goffload device %d (pid %d): link to device %d: %v\n", s.num, os.Getpid(), peer, err)
		return
	}
	s.mu.Lock()
	s.sibs[peer] = o
	s.mu.Unlock()
	o.mu.Lock()
	o.sibs[s.num] = s
	o.mu.Unlock()
	s.AddPeer(peer, a)
	o.AddPeer(s.num, b)
}

// sibling is the session of this process that serves device peer, or nil.
func (s *Session) sibling(peer int) *Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sibs[peer]
}
