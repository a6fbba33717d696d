package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/hostmem"
	"github.com/goffload/offload/plugin/opqueue"
	"github.com/goffload/offload/plugins/remote/proto"
	"github.com/goffload/offload/plugins/remote/state"
	"github.com/goffload/offload/plugins/remote/transport"
)

// Session serves one host on one link: the device side of the protocol. One
// goroutine reads frames. Queue operations run on the queues' goroutines, in
// order per queue and concurrently across queues.
type Session struct {
	l     *link
	img   *plugin.Image
	mem   *hostmem.Memory
	pool  *plugin.Pool
	cores int
	num   int // device number, from the host's hello
	// Helloed, if set, is told the device number the host gave.
	Helloed func(num int)
	// Rank is the device's MPI rank, or -1.
	Rank int
	// Kind is how the host reached the device, as GOFFLOAD_DEVICES names it.
	// It is "local" (a process the host started), "tcp" or "mpi".
	Kind string

	peers *peers

	// evs are the events the host recorded, the peers waiting on them and the
	// retrieves they wait for (see package state). They are under emu.
	emu sync.Mutex
	evs *state.Session[*opqueue.Event]

	mu     sync.Mutex
	queues map[uint32]*opqueue.Queue
	pulls  map[uint64]*incoming
	// launchStops are the stop signals of numbered launches (Launch.Stop), by
	// number, and the numbers by queue. A queue's are forgotten at its next
	// Sync.
	launchStops map[uint64]*plugin.StopSignal
	queueStops  map[uint32][]uint64
	tags        map[uint32]qtag // tagged queues: their operations are timed (see tag.go)

	// hostTimeout is the host's device timeout, from its hello (-1: it did
	// not say). The link's heartbeat keeps to it (timingFor).
	hostTimeout time.Duration
	// HelloLimit bounds the wait for the host's hello (0: none). A tcp://
	// session's host proved the secret, and the heartbeat starts after hello.
	// A local device's host is its parent. It may open other devices between
	// this one's start and its hello.
	HelloLimit time.Duration

	role readerRole // who reads the link (see hello.go)
	end  chan error // how the session ended, from its last reader

	// stop is what the kernels' ctx.Done() says: the host's Cancel closes it.
	// kctx is the context kernels get (set at hello).
	stop *plugin.StopSignal
	kctx *plugin.KernelCtx

	// srv is the device of another kind the session drives (Proxy), or nil.
	// If nil, the device is this process's Go CPU device (mem, pool).
	srv *served
	// Serves, if set, opens the device the session drives in place of the Go
	// CPU device. It opens device index of those the process serves. The host
	// picks one with a Serve frame before hello; else it is device 0.
	Serves Opener
	// PairLinks, if set, makes the two ends of a link inside the process,
	// for two sessions of it that serve one host (Sibling).
	PairLinks func() (transport.Transport, transport.Transport, error)

	// token is the session's number among the process's proxying sessions
	// (siblings). sibs are the sessions of this process that serve other
	// devices of the same host, by device number (under mu).
	token uint64
	sibs  map[int]*Session

	graphs *sgraphs // the graph parts the host defined (graphserve.go), made at the first
}

// An Opener opens device index of those a proxying process serves (its
// GOFFLOAD_DEVICES), for one session. It returns the device, its kind and how
// many devices the process serves. An index past the last is an error.
type Opener func(index int) (dev plugin.Device, kind string, count int, err error)

// NewSession serves the host at the other end of t (Serve), with the kernels
// of img. It splits loops over cores. The kind that serves sets its fields
// before Serve.
func NewSession(t transport.Transport, img *plugin.Image, cores int) *Session {
	return newSession(startLink(t), img, cores)
}

// Num is the device's number, from the host's hello (-1 before).
func (s *Session) Num() int { return s.num }

// AddPeer links the session to device num over t. t is a link the host
// introduced, or one an MPI rank began. Exchanges with device num go over it.
// A link to num already there is replaced.
func (s *Session) AddPeer(num int, t transport.Transport) { s.peers.add(num, startLink(t)) }

// ConnectPeers has the session start its links to other devices itself, with
// connect(num), when it first needs one. (MPI ranks reach each other without
// the host's introduction.) connect adds the link with AddPeer, unless the
// other side's first frame did.
func (s *Session) ConnectPeers(connect func(num int) error) { s.peers.connect = connect }

// ShareMemory charges the session's device memory to b, which other sessions
// of the device share. So a TCP device bounds what all its hosts hold
// together. Call it before Serve.
func (s *Session) ShareMemory(b *hostmem.Budget) { s.mem.SetBudget(b) }

func newSession(l *link, img *plugin.Image, cores int) *Session {
	s := &Session{
		l: l, img: img, cores: cores, num: -1, Rank: -1, hostTimeout: -1,
		mem:    hostmem.New(256 << 20),
		pool:   plugin.NewPool(cores),
		queues: map[uint32]*opqueue.Queue{},
		evs:    state.NewSession[*opqueue.Event](),
		pulls:  map[uint64]*incoming{},
		tags:   map[uint32]qtag{},
		sibs:   map[int]*Session{},
		stop:   plugin.NewStopSignal(),

		launchStops: map[uint64]*plugin.StopSignal{},
		queueStops:  map[uint32][]uint64{},
	}
	s.peers = newPeers(s)
	return s
}

// Serve runs the session until the host says exit or the link ends. It
// returns nil for a normal end. It returns ErrSessionOver where the session's
// link ended under it.
func (s *Session) Serve() error {
	defer s.close()
	s.pool.SetKernelLimit(deviceTasks(os.Getenv("GOFFLOAD_DEVICE_TASKS"), s.Kind))
	if err := s.hello(); err != nil {
		if err == errExitFirst {
			return nil // a host that had no use for this device
		}
		return err
	}
	return s.serveFrames()
}

func (s *Session) serveFrames() error {
	s.l.live(timingFor(s.hostTimeout))
	s.end = make(chan error, 1)
	s.role.init(s.read)
	defer s.role.stop()
	// The reader has a goroutine of its own. A kernel it runs may end it
	// (runtime.Goexit), and then a new one reads (session.read). Meanwhile
	// this one waits for the end.
	go s.read(0)
	return <-s.end
}

// read serves frames while the goroutine holds the reader's role as
// generation gen (see hello.go). The one that reads the session's last frame
// says how it ended on s.end.
func (s *Session) read(gen uint64) {
	ended := false
	defer func() {
		if !ended { // a kernel run here called runtime.Goexit
			s.role.exited(gen)
		}
	}()
	for {
		m, err := s.l.r.ReadMsg()
		if err != nil {
			if lerr := s.l.failed(); lerr != nil && !isClosedErr(lerr) {
				err = lerr // the link failed first: the host went silent
			} else if isClosedErr(err) {
				err = nil // the host went away: the device's work is over
			} else {
				err = s.l.fail(err)
			}
			ended = true
			s.end <- err
			return
		}
		if m.Type == proto.TExit {
			ended = true
			s.end <- nil
			return
		}
		if err := s.handle(m, gen); err != nil {
			ended = true
			s.end <- s.l.fail(err)
			return
		}
		if !s.role.holds(gen) {
			ended = true
			return // a standby reads now
		}
	}
}

func (s *Session) close() {
	s.l.close(closeTimeout) // what is queued (a refusal, the last replies) goes out first
	s.mu.Lock()
	qs := s.queues
	s.queues = map[uint32]*opqueue.Queue{}
	for _, p := range s.pulls {
		close(p.done)
	}
	s.pulls = map[uint64]*incoming{}
	s.mu.Unlock()
	s.l.fail(ErrSessionOver)
	s.emu.Lock()
	held := s.evs.End()
	s.emu.Unlock()
	s.tell(held)
	s.peers.close()
	s.endGraphs()
	for _, q := range qs {
		q.Close()
	}
	s.pool.Close() // and with it the declare target variables' bindings
	s.mem.Reset()
	if s.srv != nil {
		s.unlist()
		s.srv.close()
	}
}

// ErrSessionOver is the error of a session's link, its peers' and its
// stand-in events once the session ended.
var ErrSessionOver = fmt.Errorf("session over")

// errExitFirst: the host said exit before hello.
var errExitFirst = fmt.Errorf("exit before hello")

// hello checks the host's protocol version and image, and answers with the
// device's.
func (s *Session) hello() error {
	var m *proto.Msg
	for picked := false; ; picked = true {
		stop := s.l.within(s.HelloLimit, "hello from the host")
		var err error
		m, err = s.l.r.ReadMsg()
		stop()
		if err != nil {
			return fmt.Errorf("reading hello: %w", s.l.readErr(err))
		}
		if m.Type != proto.TServe {
			break
		}
		if picked {
			return s.refuse(fmt.Errorf("%w: a second serve frame before hello", proto.ErrFrame))
		}
		if err := s.pick(m); err != nil {
			return err
		}
	}
	mine := helloText(s.img)
	if m.Type == proto.TExit {
		return errExitFirst
	}
	if m.Type != proto.THello {
		return s.refuse(fmt.Errorf("want hello, got %s", m.Type))
	}
	f, err := proto.As[proto.Hello](m)
	if err != nil {
		return s.refuse(err)
	}
	h, err := parseHello(f.Text)
	if err != nil {
		return s.refuse(err)
	}
	if err := checkImage(h, s.img, "device"); err != nil {
		return s.refuse(err)
	}
	s.num = int(f.Num)
	s.hostTimeout = h.timeout
	if s.srv == nil && s.Serves != nil {
		dev, kind, _, err := s.Serves(0)
		if err != nil {
			return s.refuse(fmt.Errorf("%s: %w", s.name(), err))
		}
		s.Proxy(dev, kind)
	}
	if s.srv != nil {
		if err := s.srv.dev.Load(s.img, s.num); err != nil {
			return s.refuse(fmt.Errorf("%s: loading the kernels on %s: %w", s.name(), s.srv.label, err))
		}
	}
	s.kctx = plugin.NewKernelCtx(s.num, s.pool).WithStop(s.stop)
	if s.Helloed != nil {
		s.Helloed(s.num)
	}
	return s.l.send(&proto.Hello{Status: proto.Status{Text: mine}})
}

// pick answers a Serve frame: the session will drive the device it names.
func (s *Session) pick(m *proto.Msg) error {
	f, err := proto.As[proto.Serve](m)
	if err != nil {
		return err
	}
	if s.Serves == nil {
		if f.Index != 0 {
			return s.reply(f.Req, 1, "", fmt.Errorf("%w: device %d of a process that serves its CPUs alone", plugin.ErrBadSpec, f.Index))
		}
		// Its sessions with one host are siblings too. They link inside the
		// process, so each waits on the other's events itself.
		return s.reply(f.Req, 1, serveText("Go CPU device", s.enlist()), nil)
	}
	dev, kind, count, err := s.Serves(int(f.Index))
	if err != nil {
		s.reply(f.Req, uint64(count), "", err)
		return err
	}
	if s.srv != nil {
		s.srv.dev.Close()
	}
	s.Proxy(dev, kind)
	return s.reply(f.Req, uint64(count), serveText(s.srv.label, s.enlist()), nil)
}

// serveText is a Serve answer's text. It holds the served device's name, the
// session's token among its process's siblings, and the process's.
func serveText(name string, token uint64) string {
	b, _ := json.Marshal(struct {
		Name           string
		Token, Process uint64
	}{name, token, processToken})
	return string(b)
}

func (s *Session) refuse(err error) error {
	s.l.send(&proto.Hello{Status: proto.StatusOf(err)})
	return err
}

func (s *Session) queue(id uint32) *opqueue.Queue {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[id]
	if q == nil {
		q = opqueue.New()
		s.queues[id] = q
	}
	return q
}

// event returns the event id the host recorded. It returns nil if there is
// none: an id the host never recorded, or one it told us to forget.
func (s *Session) event(id uint64) *opqueue.Event {
	s.emu.Lock()
	defer s.emu.Unlock()
	ev, _ := s.evs.Event(id)
	return ev
}

func (s *Session) reply(id uint64, value uint64, text string, err error) error {
	st := proto.StatusOf(err)
	if err == nil {
		st.Text = text
	}
	return s.l.send(&proto.Reply{Req: id, Value: value, Status: st})
}

// handle serves one frame for the reader of generation gen. Its error ends
// the session (a broken stream). Errors of operations go back to the host.
func (s *Session) handle(m *proto.Msg, gen uint64) error {
	fr, err := proto.Parse(m)
	if err != nil {
		return err
	}
	switch f := fr.(type) {
	case *proto.Alloc: // at the address the host chose; no answer: a failure shows where the memory is used
		if s.srv != nil {
			if err := s.srv.alloc(plugin.Ptr(f.Ptr), int64(f.Size)); err != nil {
				return fmt.Errorf("%w: %w", proto.ErrFrame, err)
			}
			return nil
		}
		if err := s.mem.AllocAt(plugin.Ptr(f.Ptr), int64(f.Size)); err != nil && !errors.Is(err, plugin.ErrOutOfMemory) {
			return fmt.Errorf("%w: %w", proto.ErrFrame, err)
		}
		return nil
	case *proto.Free: // no answer: the host frees only the allocations it made
		if s.srv != nil {
			if !s.srv.free(plugin.Ptr(f.Ptr)) {
				return fmt.Errorf("%w: free of %#x, which is no allocation", proto.ErrFrame, f.Ptr)
			}
			return nil
		}
		if err := s.mem.Free(plugin.Ptr(f.Ptr)); err != nil {
			return fmt.Errorf("%w: %w", proto.ErrFrame, err)
		}
		return nil
	case *proto.Info:
		if s.srv != nil {
			return s.reply(f.Req, 0, string(s.servedInfoJSON()), nil)
		}
		b, _ := json.Marshal(s.info())
		return s.reply(f.Req, 0, string(b), nil)
	case *proto.CloseQueue:
		s.mu.Lock()
		q := s.queues[f.Queue]
		delete(s.queues, f.Queue)
		delete(s.tags, f.Queue)
		s.mu.Unlock()
		s.forgetStops(f.Queue)
		if q != nil {
			if s.srv != nil {
				go func() { q.Close(); s.srv.closeQueue(f.Queue) }()
			} else {
				go q.Close()
			}
		}
		return nil
	case *proto.Submit:
		return s.submitInline(f)
	case *proto.SubmitPulled:
		return s.submitPulled(f)
	case *proto.SubmitPushed:
		return s.submitPushed(f)
	case *proto.Data:
		return s.data(m)
	case *proto.Retrieve:
		q, id, src, size := s.queue(f.Queue), f.Xfer, plugin.Ptr(f.Src), int64(f.Size)
		timed := s.timer(f.Queue, plugin.OpRetrieve, 0, size)
		// A small retrieve's data goes in one frame, written without blocking
		// by whoever runs it. On an idle queue that is the reader itself.
		// Else it is the queue's goroutine, not the writer after a hand-off.
		small := size <= proto.MaxInline && s.l.canTryWrite()
		if s.srv != nil { // the served queue may hold work: never on the reader
			qid := f.Queue
			t := s.servedTimer(qid, plugin.OpRetrieve, 0, size)
			return q.DoTimed(func() error {
				b, err := s.servedRetrieve(qid, src, size, t)
				if err != nil {
					return err
				}
				defer s.srv.stage.put(b) // sendRetrieved returns once b is written
				return s.sendRetrieved(id, b, small)
			}, t.timed())
		}
		if small {
			ran, err := q.RunHere(func() error { return s.retrieve(id, src, size, true) }, timed)
			if ran || err != nil {
				return nil
			}
		}
		return q.DoTimed(func() error { return s.retrieve(id, src, size, small) }, timed)
	case *proto.XferDone: // the host has a retrieve's data
		s.ack()
		return nil
	case *proto.Exchange:
		return s.exchange(f)
	case *proto.Launch:
		return s.launch(f, gen)
	case *proto.Record:
		return s.record(f)
	case *proto.Wait:
		q, id := s.queue(f.Queue), f.Event
		timed := s.timer(f.Queue, plugin.OpWait, 0, 0)
		ev := s.event(id)
		if ev == nil {
			return q.Do(func() error { return fmt.Errorf("wait on event %d: %w", id, plugin.ErrNotRecorded) })
		}
		if s.srv != nil {
			t := s.servedTimer(f.Queue, plugin.OpWait, 0, 0)
			if ok, err := s.servedWait(q, f.Queue, id, ev, t); ok {
				return err
			}
			timed = t.timed() // in the queue's order of the served kind's reports
		}
		return q.WaitTimed(ev, timed)
	case *proto.WaitPeer: // another device's event: that device tells us when it fires
		timed := s.timer(f.Queue, plugin.OpWait, 0, 0)
		if s.srv != nil {
			timed = s.servedTimer(f.Queue, plugin.OpWait, 0, 0).timed()
		}
		return s.queue(f.Queue).WaitTimed(s.peers.event(int(f.Peer), f.Wait), timed)
	case *proto.Notify:
		s.notify(f)
		return nil
	case *proto.Forget:
		s.emu.Lock()
		s.evs.Forget(f.Events)
		s.emu.Unlock()
		if s.srv != nil {
			s.srv.forgetEvents(f.Events)
		}
		return nil
	case *proto.Tag:
		s.tag(f)
		return nil
	case *proto.Sibling:
		s.linkSibling(int(f.Peer), f.Token)
		return nil
	case *proto.GraphDef, *proto.GraphSet, *proto.GraphRun, *proto.GraphFree:
		return s.graphFrame(f)
	case *proto.Cancel: // the host's Stop began: kernels should end
		s.stop.Stop()
		if c, ok := s.servedDev().(plugin.Canceler); ok {
			c.CancelKernels()
		}
		return nil
	case *proto.StopLaunch: // a construct's context ended: its kernel should end
		s.mu.Lock()
		sig := s.launchStops[f.Stop]
		s.mu.Unlock()
		if sig != nil {
			sig.Stop()
		}
		return nil
	case *proto.Addr:
		if s.srv != nil {
			a, err := s.servedAddr(plugin.Ptr(f.Ptr))
			return s.reply(f.Req, uint64(a), "", err)
		}
		b, err := s.mem.Bytes(plugin.Ptr(f.Ptr), 0)
		if err != nil {
			return s.reply(f.Req, 0, "", err)
		}
		return s.reply(f.Req, uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))), "", nil)
	case *proto.Clock:
		return s.reply(f.Req, uint64(deviceClock(time.Now())), "", nil)
	case *proto.Sync:
		qid, seq := f.Queue, f.Seq
		var upto uint64
		if s.srv != nil {
			upto = s.timesMark(qid)
		}
		answer := func(failed error) error {
			if s.srv != nil {
				failed = s.servedSettle(qid, failed, true, upto)
			}
			s.forgetStops(qid)
			return s.l.sendSoon(&proto.SyncDone{Queue: qid, Seq: seq, Status: proto.StatusOf(failed)})
		}
		return s.queue(qid).MarkHere(true, answer)
	}
	return fmt.Errorf("%w: unexpected %s frame from the host", proto.ErrFrame, m.Type)
}

func (s *Session) info() plugin.Info {
	host, _ := os.Hostname()
	kind, name := s.kindName(), fmt.Sprintf("Go CPU device process (%d cores)", s.cores)
	if s.Rank >= 0 {
		kind, name = "mpi", fmt.Sprintf("Go CPU device, MPI rank %d (%d cores)", s.Rank, s.cores)
	}
	return plugin.Info{Kind: kind, Name: name, Cores: s.cores,
		Memory: hostmem.MachineMemory(), Arch: runtime.GOARCH, Host: host, PID: os.Getpid()}
}

// wait waits for a submit's data to be in, or the session to end. It says
// whether all of it came.
func (in *incoming) wait() error {
	<-in.done
	switch {
	case in.err != nil:
		return in.err
	case in.got != in.size:
		return fmt.Errorf("%w: submit ended after %d of %d bytes", plugin.ErrDeviceLost, in.got, in.size)
	}
	return nil
}

// deviceTasks is the bound on kernels running at once that
// GOFFLOAD_DEVICE_TASKS gives a device of kind. The variable is read from
// this device process's environment. The bound is its KIND=N item, else its
// plain N, else 0 (none). The host's Start checks the variable's form. A
// malformed item is ignored here.
func deviceTasks(spec, kind string) int {
	all, mine := 0, 0
	for _, item := range strings.Split(spec, ",") {
		k, num, named := strings.Cut(strings.TrimSpace(item), "=")
		if !named {
			num, k = k, ""
		}
		n, err := strconv.Atoi(strings.TrimSpace(num))
		if err != nil || n < 1 {
			continue
		}
		switch strings.TrimSpace(k) {
		case "":
			all = n
		case kind:
			mine = n
		}
	}
	if mine > 0 {
		return mine
	}
	return all
}
