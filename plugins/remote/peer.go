package remote

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/opqueue"
	"github.com/goffload/offload/plugins/remote/proto"
	"github.com/goffload/offload/plugins/remote/shm"
	"github.com/goffload/offload/plugins/remote/stream"
)

// Device-to-device transfers go straight between the two device processes.
// The host only introduces them: it makes a socket pair and hands one end to
// each device over a side channel (a Unix socket that carries descriptors).
// Each device then writes exchanges into the other's memory over the pair,
// and the writer's queue operation completes when the receiver says the data
// is in place.

// peers is a device process's links to other devices, by device number.
type peers struct {
	s    *session
	mu   sync.Mutex
	cond *sync.Cond
	by   map[int]*peer
	done bool
	// events stand in for other devices' events that our queues wait on, by
	// device and wait id (one per wait the host asked for): the other device
	// fires them over the peer link. Each is touched twice, by the wait and
	// by the firing, in either order, and forgotten at the second touch.
	events map[[2]uint64]*standIn
	// dead holds why the link to a device broke: its events never fire.
	dead map[int]error
	// connect, if set, starts the link to device num itself (MPI ranks
	// reach each other without the host's introduction); it adds the link
	// unless the other side's first frame did.
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

func newPeers(s *session) *peers {
	p := &peers{s: s, by: map[int]*peer{}, events: map[[2]uint64]*standIn{}, dead: map[int]error{}}
	p.cond = sync.NewCond(&p.mu)
	return p
}

// receive reads introductions from the host's side channel until it closes.
func (ps *peers) receive(ch *net.UnixConn) {
	defer ch.Close()
	buf, oob := make([]byte, 64), make([]byte, syscall.CmsgSpace(8))
	for {
		n, oobn, _, _, err := ch.ReadMsgUnix(buf, oob)
		if err != nil {
			return
		}
		in, err := parseIntro(buf[:n], oob[:oobn])
		if err != nil {
			fmt.Fprintf(os.Stderr, "goffload device %d: bad introduction: %v\n", ps.s.num, err)
			continue
		}
		f := os.NewFile(uintptr(in.fd), "goffload-peer")
		conn, err := net.FileConn(f)
		f.Close()
		if err != nil {
			if in.shm >= 0 {
				syscall.Close(in.shmFD)
			}
			continue
		}
		if in.shm < 0 {
			ps.add(in.num, newLink(conn))
			continue
		}
		l, err := newShmLink(in.shmFD, in.shm, conn, fmt.Sprintf("device %d's process ended (its socket closed)", in.num))
		syscall.Close(in.shmFD)
		if err != nil {
			fmt.Fprintf(os.Stderr, "goffload device %d: link to device %d: %v\n", ps.s.num, in.num, err)
			conn.Close()
			continue
		}
		ps.add(in.num, l)
	}
}

// intro is the host's introduction of a peer: "peer N" with a socket, or
// "peer N shm S" with a socket and the memory file of a shared-memory link,
// of which this device is side S.
type intro struct {
	fd, num int
	shm     int // the side, or -1 for a link on the socket
	shmFD   int
}

func parseIntro(b, oob []byte) (intro, error) {
	bad := intro{fd: -1, shm: -1, shmFD: -1}
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil || len(msgs) != 1 {
		return bad, fmt.Errorf("no descriptor")
	}
	fds, err := syscall.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) < 1 || len(fds) > 2 {
		for _, fd := range fds {
			syscall.Close(fd)
		}
		return bad, fmt.Errorf("no descriptor")
	}
	fail := func() (intro, error) {
		for _, fd := range fds {
			syscall.Close(fd)
		}
		return bad, fmt.Errorf("%q", b)
	}
	s, ok := strings.CutPrefix(string(b), "peer ")
	if !ok {
		return fail()
	}
	in := intro{fd: fds[0], shm: -1, shmFD: -1}
	if num, side, shm := strings.Cut(s, " shm "); shm {
		if len(fds) != 2 || (side != "0" && side != "1") {
			return fail()
		}
		s, in.shm, in.shmFD = num, int(side[0]-'0'), fds[1]
	} else if len(fds) != 1 {
		return fail()
	}
	num, err := strconv.Atoi(s)
	if err != nil || num < 0 {
		return fail()
	}
	in.num = num
	return in, nil
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

// get returns the link to device num, waiting a while for the host's
// introduction, which may still be on its way; if the link broke, the
// error that broke it (which wraps plugin.ErrDeviceLost) at once.
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

// event returns the stand-in for wait id on device num's event, recorded:
// it fires when that device says so.
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
			si.ev.Fire(errSessionOver)
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

// tell lets device num know that our event id fired. It never blocks: if
// the host's introduction to num is still on its way, a goroutine waits
// for it.
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

// send writes the firing on p's link: at once if the link can take it
// without blocking (the waiting device hears a hand-off sooner), else by
// the writer.
func (ps *peers) send(p *peer, num int, id uint64, err error) {
	if err2 := p.l.sendSoon(&proto.PeerEvent{Wait: id, Status: proto.StatusOf(err)}); err2 != nil {
		ps.cannotTell(num, id, err2)
	}
}

// cannotTell says on stderr that device num could not be told that our
// event id fired, unless num is lost (err wraps ErrDeviceLost): then
// nothing there waits for it any more, and the host reports the loss (a
// lost peer made a line per event its queues had waited on).
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
	ps.cond.Broadcast()
	ps.mu.Unlock()
	for _, p := range by {
		p.l.fail(errSessionOver)
	}
	for _, si := range events { // no peer will tell: the queues must not wait forever
		si.ev.Fire(errSessionOver)
	}
}

// exchange copies src to dst in device num's memory and waits until the
// data is in place there.
func (ps *peers) exchange(num int, dst plugin.Ptr, src []byte) error {
	p, err := ps.get(num)
	if err != nil {
		return err
	}
	ch := make(chan error, 1)
	p.mu.Lock()
	if p.lost != nil {
		p.mu.Unlock()
		return p.lost
	}
	p.next++
	id := p.next
	p.waiting[id] = ch
	p.mu.Unlock()
	put := &proto.PeerPut{Xfer: id, Dst: uint64(dst), Size: uint64(len(src))}
	if len(src) > 0 && len(src) <= proto.MaxInline && p.l.canTryWrite() {
		// Small: the data goes in a control frame behind the put, both
		// written at once by this goroutine where the link takes them
		// without blocking (no hand-off to the writer and back).
		err = p.l.put(put)
		if err == nil {
			_, err = p.l.sendDataSoon(id, src)
		}
	} else if err = p.l.send(put); err == nil {
		_, err = p.l.sendData(id, src, false)
	}
	if err != nil {
		return fmt.Errorf("%w: link to device %d: %v", plugin.ErrDeviceLost, num, err)
	}
	return <-ch
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
	ps.mu.Unlock()
	for _, ev := range orphans { // their device cannot tell us any more
		ev.Fire(lost)
	}
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
			b, err := ps.s.mem.Bytes(plugin.Ptr(f.Dst), int64(f.Size))
			in := &incoming{dst: b, size: int(f.Size), done: make(chan struct{})}
			if err != nil { // skip the data as it comes, then refuse it
				in = &incoming{size: int(f.Size), err: err, done: make(chan struct{})}
			}
			if f.Size == 0 {
				p.l.sendSoon(&proto.XferDone{Xfer: f.Xfer, Status: proto.StatusOf(in.err)})
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
				p.l.sendSoon(&proto.XferDone{Xfer: f.Xfer, Status: proto.StatusOf(in.err)})
			}
		case *proto.PeerEvent:
			ps.fired(p.num, f.Wait, f.Status.Err())
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

// introductions is the host's record of which device processes it has
// introduced to each other.
var introductions struct {
	sync.Mutex
	done map[[2]*device]bool
}

// introduce hands a and b the two ends of a new socket pair, once.
func introduce(a, b *device) error {
	if a.rank >= 0 && b.rank >= 0 {
		return nil // MPI ranks link themselves
	}
	if a.side == nil || b.side == nil {
		return fmt.Errorf("%w: devices %d and %d are not both processes of this machine", plugin.ErrUnsupported, a.num, b.num)
	}
	key := [2]*device{a, b}
	if a.num > b.num {
		key = [2]*device{b, a}
	}
	introductions.Lock()
	defer introductions.Unlock()
	if introductions.done == nil {
		introductions.done = map[[2]*device]bool{}
	}
	if introductions.done[key] {
		return nil
	}
	fds, err := stream.SocketPair()
	if err != nil {
		return err
	}
	defer syscall.Close(fds[0])
	defer syscall.Close(fds[1])
	// Two local devices link through shared memory as each does with the
	// host, the socket only telling each of the other's end; a memory file
	// refused leaves them on the socket.
	introA, introB := fmt.Sprintf("peer %d", b.num), fmt.Sprintf("peer %d", a.num)
	rightsA, rightsB := syscall.UnixRights(fds[0]), syscall.UnixRights(fds[1])
	if localLink() == "shm" {
		if f, err := shm.NewFile(); err == nil {
			defer f.Close()
			introA, introB = introA+" shm 0", introB+" shm 1"
			rightsA, rightsB = syscall.UnixRights(fds[0], int(f.Fd())), syscall.UnixRights(fds[1], int(f.Fd()))
		}
	}
	if _, _, err := a.side.WriteMsgUnix([]byte(introA), rightsA, nil); err != nil {
		return introErr(a, b, err)
	}
	if _, _, err := b.side.WriteMsgUnix([]byte(introB), rightsB, nil); err != nil {
		return introErr(b, a, err)
	}
	introductions.done[key] = true
	return nil
}

// introErr is the error of introducing b to a, whose side channel
// refused the introduction with err: a's process is gone where the channel
// broke (ErrDeviceLost, naming a), which its link says soon too.
func introErr(a, b *device, err error) error {
	if errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("introducing device %d to %d: %w: device %d's process is gone: %w", b.num, a.num, plugin.ErrDeviceLost, a.num, err)
	}
	return fmt.Errorf("introducing device %d to %d: %w", b.num, a.num, err)
}

// forgetIntroductions drops d's introductions when it closes.
func forgetIntroductions(d *device) {
	introductions.Lock()
	defer introductions.Unlock()
	for k := range introductions.done {
		if k[0] == d || k[1] == d {
			delete(introductions.done, k)
		}
	}
}
