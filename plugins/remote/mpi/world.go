//go:build mpi

package mpi

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	cmpi "github.com/goffload/offload/internal/mpi"
	"github.com/goffload/offload/plugins/remote/proto"
	"github.com/goffload/offload/plugins/remote/transport"
)

// These are the tags of raw MPI baselines for benchmarks (Raw). One is for
// the host's request to a device rank, and one for the exchange itself.
const (
	tagBench   = 4
	tagRawData = 5
)

// World is this process's part of the MPI job: its engine and its links
// to other ranks. Start starts it, once per process.
type World struct {
	e     *cmpi.Engine
	ranks Ranks

	mu     sync.Mutex
	links  map[[2]int]*Link  // by rank and control tag
	tags   map[int]int       // control tags listened for, with their links
	accept map[int]acceptTag // links other device ranks begin, by control tag
}

// acceptTag is what Accept registered for a control tag.
type acceptTag struct {
	data int
	f    func(src int, l *Link)
}

var world struct {
	once sync.Once
	w    atomic.Pointer[World] // set once MPI started
	err  error
}

// Start starts MPI once per process and returns this process's World.
// MPI's progress goroutine does not poll while a kernel computes
// (transport.Computing). The host is rank GOFFLOAD_HOST_RANK (default 0).
func Start() (*World, error) {
	world.once.Do(func() {
		e, err := cmpi.Init()
		if err != nil {
			world.err = fmt.Errorf("starting MPI: %w", err)
			return
		}
		e.SetQuiet(transport.Computing)
		host, err := parseHostRank(os.Getenv(envHostRank), e.Size())
		if err != nil {
			world.err = err
			return
		}
		world.w.Store(&World{e: e, ranks: Ranks{Host: host, Size: e.Size()}, links: map[[2]int]*Link{},
			tags: map[int]int{}, accept: map[int]acceptTag{}})
	})
	return world.w.Load(), world.err
}

// Started returns this process's World once Start has started MPI, else
// nil.
func Started() *World { return world.w.Load() }

// Rank is this process's rank.
func (w *World) Rank() int { return w.e.Rank() }

// Ranks is the job's ranks: the host's and how many (Base is 0).
func (w *World) Ranks() Ranks { return w.ranks }

// IsHost reports whether this process is the host rank.
func (w *World) IsHost() bool { return w.e.Rank() == w.ranks.Host }

// Post sends b to rank on tag, and returns the wait for the send. The wait
// returns once the send completed, or with an error once done is closed.
func (w *World) Post(rank, tag int, b []byte) (wait func(done <-chan struct{}) error) {
	return w.e.Send(rank, tag, b).Wait
}

// Finalize ends MPI (MPI_Finalize: it waits for every rank).
func (w *World) Finalize() error { return w.e.Finalize() }

// listenLocked tells the engine which control tags to receive.
func (w *World) listenLocked() {
	tags := make([]int, 0, len(w.tags))
	for t := range w.tags {
		tags = append(tags, t)
	}
	w.e.Listen(w.deliver, tags...)
}

// Link registers and returns a link to rank on its tags.
func (w *World) Link(rank, ctrl, data int) *Link {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.addLocked(rank, ctrl, data)
}

// addLocked registers a link to rank on its tags; w.mu is held.
func (w *World) addLocked(rank, ctrl, data int) *Link {
	t := &Link{w: w, rank: rank, ctrl: ctrl, data: data, closed: make(chan struct{}), more: make(chan struct{}, 1)}
	w.links[[2]int{rank, ctrl}] = t
	w.listenTagLocked(ctrl, 1)
	return t
}

// listenTagLocked counts a use of tag, or ends one (n = -1).
func (w *World) listenTagLocked(tag, n int) {
	w.tags[tag] += n
	switch w.tags[tag] {
	case 0:
		delete(w.tags, tag)
		w.listenLocked()
	case 1:
		if n > 0 {
			w.listenLocked()
		}
	}
}

// Drop closes t and forgets it. Messages for it that come later are dropped.
func (w *World) Drop(t *Link) {
	t.Close()
	w.mu.Lock()
	defer w.mu.Unlock()
	key := [2]int{t.rank, t.ctrl}
	if w.links[key] == t {
		delete(w.links, key)
		w.listenTagLocked(t.ctrl, -1)
	}
}

// Accept hands f the links that other device ranks begin on control tag ctrl
// (and data tag data). Each goes on a goroutine of its own, with the rank
// that began it. These are a device rank's peers within a session.
func (w *World) Accept(ctrl, data int, f func(src int, l *Link)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.accept[ctrl] = acceptTag{data: data, f: f}
	w.listenTagLocked(ctrl, 1)
}

// Unaccept ends Accept's for ctrl. It returns the links on that tag, for the
// caller to drop.
func (w *World) Unaccept(ctrl int) []*Link {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.accept, ctrl)
	w.listenTagLocked(ctrl, -1)
	var links []*Link
	for k, l := range w.links {
		if k[1] == ctrl {
			links = append(links, l)
		}
	}
	return links
}

// deliver hands a control message to its link. It runs on MPI's progress
// goroutine, so it must not block. A device's first message from another
// device rank starts their peer link.
func (w *World) deliver(r *cmpi.Req) {
	w.mu.Lock()
	t := w.links[[2]int{r.Src, r.Tag}]
	var acc acceptTag
	if t == nil && r.Src != w.ranks.Host {
		if acc = w.accept[r.Tag]; acc.f != nil {
			t = w.addLocked(r.Src, r.Tag, acc.data)
		}
	}
	w.mu.Unlock()
	if t == nil {
		return // for a link that ended: dropped
	}
	t.push(r)
	if acc.f != nil {
		go acc.f(r.Src, t)
	}
}

// PeerLink returns the link to device rank on tags, and whether it is new.
func (w *World) PeerLink(rank, ctrl, data int) (*Link, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if t := w.links[[2]int{rank, ctrl}]; t != nil {
		return t, false
	}
	return w.addLocked(rank, ctrl, data), true
}

// ServeRaw answers the host's raw baselines (Raw) on a device rank, until
// stop is called.
func (w *World) ServeRaw() (stop func()) {
	t := w.Link(w.ranks.Host, tagBench, tagBench)
	go func() {
		for {
			m, err := t.ReadMsg()
			if err != nil {
				return
			}
			f, err := proto.As[proto.RawBench](m)
			if err == nil {
				err = w.e.Raw(w.ranks.Host, tagRawData, int(f.N), int(f.Size), f.Stream, false)
			}
			if err != nil {
				fmt.Fprintf(os.Stderr, "goffload device (MPI rank %d): raw baseline: %v\n", w.e.Rank(), err)
			}
		}
	}()
	return func() { w.Drop(t) }
}

// Raw runs a raw MPI baseline between the host rank and device rank i. (i
// counts device ranks only, in rank order.) It runs n rounds of a ping-pong
// of size bytes. With stream, it sends size bytes to the device and one byte
// back. Both sides use blocking MPI_Send and MPI_Recv, with nothing of
// goffload in between. The bench measures the transport against it.
func Raw(i, n, size int, stream bool) error {
	w := world.w.Load()
	if w == nil || !w.IsHost() {
		return fmt.Errorf("mpi.Raw: not the host rank of an MPI job")
	}
	if i < 0 || i >= w.ranks.Size-1 {
		return fmt.Errorf("mpi.Raw: no device rank %d in a job of %d ranks", i, w.ranks.Size)
	}
	r := w.ranks.RankAt(i)
	cmd := proto.AppendFrame(nil, proto.Encode(&proto.RawBench{N: uint64(n), Size: uint64(size), Stream: stream}), nil)
	if err := w.e.Send(r, tagBench, cmd).Wait(nil); err != nil {
		return err
	}
	return w.e.Raw(r, tagRawData, n, size, stream, true)
}
