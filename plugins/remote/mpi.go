//go:build mpi

package remote

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goffload/offload/internal/mpi"
	"github.com/goffload/offload/internal/plugin"
	"github.com/goffload/offload/plugins/remote/proto"
)

// MPI devices: the program runs as one SPMD job (mpirun -np 3 ./prog); one
// rank is the host (GOFFLOAD_HOST_RANK, default 0) and every other rank
// serves as a device, numbered in rank order. The engine is the socket
// transport's; only the transport below it differs (mpiframes.go says how
// frames travel on MPI messages).

func init() {
	plugin.RegisterKind(plugin.Kind{
		Name:     "mpi",
		Open:     openMPI,
		Discover: discoverMPI,
		Sole:     mpi.Launched,
		Order:    40,
		Help:     "mpi[:N]  the ranks of this MPI job other than the host's, one device each (all, or the first N)",
	})
}

// mpiWorld is this process's part of the MPI job: its engine and its links
// to other ranks, by rank.
type mpiWorld struct {
	e     *mpi.Engine
	ranks mpiRanks // base is set on a device by the host's hello
	base  atomic.Int64

	mu     sync.Mutex
	links  map[int]*mpiTransport
	accept func(rank int, t *mpiTransport) // a device's: a peer's first frame
	opened map[int]bool                    // the host's: ranks opened as devices
	done   bool                            // the host's: MPI ended
}

var world struct {
	once sync.Once
	w    *mpiWorld
	err  error
}

// mpiWorldInit starts MPI once per process.
func mpiWorldInit() (*mpiWorld, error) {
	world.once.Do(func() {
		e, err := mpi.Init()
		if err != nil {
			world.err = fmt.Errorf("starting MPI: %w", err)
			return
		}
		host, err := parseHostRank(os.Getenv(envHostRank), e.Size())
		if err != nil {
			world.err = err
			return
		}
		w := &mpiWorld{e: e, ranks: mpiRanks{host: host, size: e.Size()}, links: map[int]*mpiTransport{}, opened: map[int]bool{}}
		w.base.Store(-1)
		e.Listen(w.deliver, mpiTagCtrl)
		world.w = w
	})
	return world.w, world.err
}

// deliver hands a control message to its link (on MPI's progress
// goroutine: it must not block). A device's first message from another
// device rank starts their peer link.
func (w *mpiWorld) deliver(r *mpi.Req) {
	w.mu.Lock()
	t := w.links[r.Src]
	accept := w.accept
	created := false
	if t == nil && accept != nil {
		t = newMPITransport(w, r.Src)
		w.links[r.Src] = t
		created = true
	}
	w.mu.Unlock()
	if t == nil {
		return // from a rank we have no link with (one that ended): dropped
	}
	t.push(r)
	if created {
		go accept(r.Src, t)
	}
}

// link returns the link to rank, and whether it is new.
func (w *mpiWorld) link(rank int) (*mpiTransport, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if t := w.links[rank]; t != nil {
		return t, false
	}
	t := newMPITransport(w, rank)
	w.links[rank] = t
	return t, true
}

func discoverMPI() ([]plugin.Device, error) {
	if !mpi.Launched() {
		return nil, nil
	}
	return openMPI("")
}

// openMPI opens the device ranks, all or the first N, on the host rank.
func openMPI(arg string) ([]plugin.Device, error) {
	if err := timeoutErr(); err != nil {
		return nil, fmt.Errorf("%w: %w", plugin.ErrBadSpec, err)
	}
	if !mpi.Launched() {
		return nil, fmt.Errorf("this program was not started by an MPI launcher: run it as mpirun -np 3 %s (one host rank and two device ranks)", os.Args[0])
	}
	w, err := mpiWorldInit()
	if err != nil {
		return nil, err
	}
	if w.e.Rank() != w.ranks.host {
		return nil, fmt.Errorf("rank %d is a device rank (the host is rank %d): offload.Start serves there and never returns", w.e.Rank(), w.ranks.host)
	}
	n := w.ranks.size - 1
	if arg != "" {
		v, err := strconv.Atoi(arg)
		if err != nil || v < 1 || v > n {
			return nil, fmt.Errorf("%w: mpi:%s: want mpi:N with N from 1 to %d, the device ranks of this job", plugin.ErrBadSpec, arg, n)
		}
		n = v
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return nil, fmt.Errorf("MPI ended with offload.Stop; it cannot start again in the same process")
	}
	var devs []plugin.Device
	for i := 0; i < n; i++ {
		r := i
		if r >= w.ranks.host {
			r++
		}
		if w.opened[r] {
			return nil, fmt.Errorf("rank %d was opened as a device before: each device rank serves one host session", r)
		}
		w.opened[r] = true
		t := newMPITransport(w, r)
		w.links[r] = t
		d := newDevice(startLink(t), fmt.Sprintf("mpi device (rank %d)", r))
		d.rank = r
		d.onLost = func(cause error) error { return fmt.Errorf("MPI rank %d: %w", r, cause) }
		d.closeFn = func(bool) error { t.Close(); return nil }
		devs = append(devs, d)
	}
	return devs, nil
}

// serveMPIIfDevice serves as a device and ends the process on a device rank
// of an MPI job; on the host rank, and outside MPI, it returns.
func serveMPIIfDevice() {
	if !mpi.Launched() {
		return
	}
	w, err := mpiWorldInit()
	rank, _ := mpi.LaunchRank()
	if err != nil {
		fmt.Fprintf(os.Stderr, "goffload (MPI rank %s): %v\n", rank, err)
		os.Exit(1)
	}
	if w.e.Rank() == w.ranks.host {
		return
	}
	err = w.serve()
	if ferr := w.e.Finalize(); err == nil && ferr != nil {
		err = ferr
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "goffload device (MPI rank %d, pid %d): %v\n", w.e.Rank(), os.Getpid(), err)
		os.Exit(1)
	}
	os.Exit(0)
}

// serve runs a device rank's session with the host rank.
func (w *mpiWorld) serve() error {
	if err := timeoutErr(); err != nil {
		return err
	}
	cores, err := deviceCores()
	if err != nil {
		return err
	}
	t, _ := w.link(w.ranks.host)
	s := newSession(startLink(t), plugin.CurrentImage(), cores)
	s.helloed = func(num int) { w.base.Store(int64(num - w.ranks.index(w.e.Rank()))) }
	s.peers.connect = func(num int) error {
		base := w.base.Load()
		if base < 0 {
			return fmt.Errorf("no device number yet")
		}
		ranks := w.ranks
		ranks.base = int(base)
		r, err := ranks.rankOf(num)
		if err != nil {
			return err
		}
		if r == w.e.Rank() {
			return fmt.Errorf("device %d is this device", num)
		}
		if pt, created := w.link(r); created {
			s.peers.add(num, startLink(pt))
		}
		return nil
	}
	w.mu.Lock()
	w.accept = func(r int, pt *mpiTransport) {
		base := w.base.Load()
		if base < 0 {
			pt.Close()
			return
		}
		ranks := w.ranks
		ranks.base = int(base)
		s.peers.add(ranks.numOf(r), startLink(pt))
	}
	w.mu.Unlock()
	err = s.serve()
	w.mu.Lock()
	w.accept = nil
	w.mu.Unlock()
	return err
}

// FinishMPI ends MPI on the host rank of an MPI job: the device ranks that
// were never opened as devices are told to exit, and MPI is finalized, as
// an MPI program must before it exits. offload.Stop calls it; afterwards,
// MPI devices cannot be opened again. Elsewhere it does nothing.
func FinishMPI() error {
	w := world.w
	if w == nil || w.e.Rank() != w.ranks.host {
		return nil
	}
	w.mu.Lock()
	if w.done {
		w.mu.Unlock()
		return nil
	}
	w.done = true
	var exits []*mpi.Req
	exit := proto.AppendFrame(nil, &proto.Msg{Type: proto.TExit}, nil)
	for r := 0; r < w.ranks.size; r++ {
		if r != w.ranks.host && !w.opened[r] {
			exits = append(exits, w.e.Send(r, mpiTagCtrl, exit))
		}
	}
	w.mu.Unlock()
	timeout := make(chan struct{})
	timer := time.AfterFunc(5*time.Second, func() { close(timeout) })
	defer timer.Stop()
	for _, x := range exits {
		if err := x.Wait(timeout); err != nil {
			return fmt.Errorf("telling an unused device rank to exit: %w", err)
		}
	}
	return w.e.Finalize()
}

// mpiTransport is a Transport between this rank and another: see
// mpiframes.go for the layout.
type mpiTransport struct {
	w      *mpiWorld
	rank   int
	closed chan struct{}
	once   sync.Once

	mu    sync.Mutex
	inbox []*mpi.Req // control messages, in the order MPI matched them
	more  chan struct{}

	cur     []byte // the reader's: the rest of the message being read
	scratch []byte // the reader's: discarded payloads
	hdr     []byte // the writer's
}

func newMPITransport(w *mpiWorld, rank int) *mpiTransport {
	return &mpiTransport{w: w, rank: rank, closed: make(chan struct{}), more: make(chan struct{}, 1)}
}

func (t *mpiTransport) push(r *mpi.Req) {
	t.mu.Lock()
	t.inbox = append(t.inbox, r)
	t.mu.Unlock()
	select {
	case t.more <- struct{}{}:
	default:
	}
}

// next waits for the next control message.
func (t *mpiTransport) next() ([]byte, error) {
	for {
		t.mu.Lock()
		if len(t.inbox) > 0 {
			r := t.inbox[0]
			t.inbox[0] = nil
			t.inbox = t.inbox[1:]
			t.mu.Unlock()
			if err := r.Wait(t.closed); err != nil {
				return nil, t.wrap(err)
			}
			return r.Buf, nil
		}
		t.mu.Unlock()
		select {
		case <-t.more:
		case <-t.closed:
			return nil, net.ErrClosed
		}
	}
}

func (t *mpiTransport) wrap(err error) error {
	if errors.Is(err, mpi.ErrAborted) {
		return net.ErrClosed
	}
	if err != nil {
		return fmt.Errorf("MPI rank %d: %w", t.rank, err)
	}
	return nil
}

func (t *mpiTransport) ReadMsg() (*proto.Msg, error) {
	for len(t.cur) == 0 {
		b, err := t.next()
		if err != nil {
			return nil, err
		}
		t.cur = b
	}
	m, n, err := parseMPIFrame(t.cur)
	if err != nil {
		t.cur = nil
		return nil, err
	}
	t.cur = t.cur[n:]
	return m, nil
}

func (t *mpiTransport) ReadPayload(m *proto.Msg, dst []byte) error {
	if len(dst) != m.PayloadLen {
		return fmt.Errorf("%w: payload of %d bytes into %d", proto.ErrFrame, m.PayloadLen, len(dst))
	}
	if !outOfBand(m) {
		copy(dst, m.Payload)
		return nil
	}
	return t.wrap(t.w.e.Recv(t.rank, mpiTagData, dst).Wait(t.closed))
}

func (t *mpiTransport) Discard(m *proto.Msg) error {
	if !outOfBand(m) {
		return nil
	}
	if cap(t.scratch) < m.PayloadLen {
		t.scratch = make([]byte, m.PayloadLen)
	}
	return t.ReadPayload(m, t.scratch[:m.PayloadLen])
}

func (t *mpiTransport) WriteFrames(frames []byte) error {
	return t.wrap(t.w.e.Send(t.rank, mpiTagCtrl, frames).Wait(t.closed))
}

func (t *mpiTransport) WriteData(id uint64, off int, data []byte) error {
	m := proto.Msg{Type: proto.TData, ID: id, Ptr: uint64(off)}
	if len(data) <= proto.MaxInline {
		t.hdr = proto.AppendFrame(t.hdr[:0], &m, data)
		return t.WriteFrames(t.hdr)
	}
	t.hdr = proto.AppendHeader(appendLen(t.hdr[:0], proto.FrameLen(&m, len(data))), &m, len(data))
	h := t.w.e.Send(t.rank, mpiTagCtrl, t.hdr)
	d := t.w.e.Send(t.rank, mpiTagData, data)
	err := h.Wait(t.closed)
	if derr := d.Wait(t.closed); err == nil {
		err = derr
	}
	return t.wrap(err)
}

func (t *mpiTransport) Close() error {
	t.once.Do(func() { close(t.closed) })
	return nil
}
