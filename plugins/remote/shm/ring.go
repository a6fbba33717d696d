// Package shm is the transport of a local device's link: shared memory, two
// rings, one each way. They are in an anonymous memory file (memfd) that the
// host creates and hands to the device process. So nothing has a name another
// process could open. A ring is a byte stream with one writer and one reader.
// The writer copies into it and publishes its head. The reader copies out and
// publishes its tail. Neither makes a system call while the other keeps up.
//
// A reader with nothing to read polls for a short while. That follows the
// spin budget and backoff of package transport: one polling reader per
// process, none while a kernel computes. Then it parks reading the socket the
// two processes share. That is the one the device process inherits, or a peer
// pair's. The writer writes a byte on it only when the reader said it parks:
// the socket is the doorbell.
//
// A goroutine parked on a socket holds no processor. (One blocked in a futex
// system call would hold its P until the runtime's monitor took it back. A
// kernel's parallel loop would wait for that P.) And the socket's end is the
// other process's end: a reader parked on it hears of a death at once. A
// writer that finds the ring full polls, then sleeps a little longer each
// time, until the reader makes room. A ring small enough to stay in the cache
// makes its two copies cost about one copy through memory. The writer's bytes
// are still in the cache when the reader takes them.
//
// New makes a link's transport over such memory, for the kind's local devices
// and their peers. NewFile and Open are the same rings for a raw baseline,
// which parks on a futex instead of a doorbell. Links reports the links this
// process has mapped.
package shm

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/goffload/offload/internal/waitpoll"
	"github.com/goffload/offload/plugins/remote/transport"
)

// shmRingSize is the bytes of data in each ring. It is large enough for a
// fragment of bulk data and the frames around it. It is small enough to stay
// in the cache.
const shmRingSize = 2 << 20

// ringHdr is the shared state of one ring, at the start of its region. Each
// side's words are on a cache line of their own.
type ringHdr struct {
	head    atomic.Uint64 // bytes written in all; the writer's
	_       [56]byte
	tail    atomic.Uint64 // bytes read in all; the reader's
	_       [56]byte
	dataSeq atomic.Uint32 // bumped when data comes for a reader parked on the futex (no doorbell)
	rParked atomic.Uint32 // the reader parks, or is about to
	rPolled atomic.Uint32 // a caller of the reading side polls the ring (the engine's await): no doorbell while it does
	_       [52]byte
	closed  atomic.Uint32 // either side closed the link
	_       [60]byte
}

const ringHdrSize = 4096 // the header's page; the data follows

// shmSize is the size of a link's memory: two rings.
const shmSize = 2 * (ringHdrSize + shmRingSize)

// ring is one direction of a shared-memory link, as one side sees it.
type ring struct {
	h    *ringHdr
	data []byte // shmRingSize bytes
}

func ringAt(mem []byte, i int) ring {
	base := i * (ringHdrSize + shmRingSize)
	return ring{h: (*ringHdr)(unsafe.Pointer(&mem[base])), data: mem[base+ringHdrSize : base+ringHdrSize+shmRingSize]}
}

// conn is one side of a shared-memory link: it writes one ring and reads the
// other. It is a link's byte stream (transport.Stream). One goroutine at a
// time reads, and one at a time writes.
type conn struct {
	mem     []byte
	tx, rx  ring
	bell    net.Conn        // the socket shared with the other process: the doorbell; nil: the futex
	rawBell syscall.RawConn // bell's descriptor, for writes that never wait
	endWhat string          // what bell's end means, for the error

	closed atomic.Bool
	cause  atomic.Pointer[error] // why the link ended here, if not a clean close
	active atomic.Int32          // Read and Write calls in progress: the memory stays mapped while any is
	once   sync.Once
	unmap  sync.Once

	bo     transport.Backoff // Read's, as transport.SpinReader's
	abo    transport.Backoff // awaitReadable's
	reads  int64             // Read calls (one goroutine at a time reads)
	parked atomic.Int64
	kicked atomic.Int64 // parked reads that kick woke
	// pollOnly makes Read poll instead of parking while it waits for the rest
	// of a frame. A caller that reads its own answer (the engine's await)
	// sets it. It does so while the link's reader may be parked on the
	// doorbell, which only one goroutine reads.
	pollOnly bool
}

// shmLinks counts this process's shared-memory links still mapped.
var shmLinks atomic.Int64

// newConn maps the memory file fd (shmSize bytes) as side 0 (the host) or 1
// (the device). bell is the socket both processes hold, the doorbell, closed
// with the conn. Its end means endWhat. Without one, a reader parks on a
// futex in the shared page (bench's raw baselines).
func newConn(fd int, side int, bell net.Conn, endWhat string) (*conn, error) {
	mem, err := syscall.Mmap(fd, 0, shmSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping the link's shared memory: %w", err)
	}
	c := &conn{mem: mem, tx: ringAt(mem, side), rx: ringAt(mem, 1-side), bell: bell, endWhat: endWhat}
	if bell != nil {
		sc, ok := bell.(syscall.Conn)
		if !ok {
			syscall.Munmap(mem)
			return nil, fmt.Errorf("shared-memory link: a doorbell without a descriptor (%T)", bell)
		}
		if c.rawBell, err = sc.SyscallConn(); err != nil {
			syscall.Munmap(mem)
			return nil, err
		}
	}
	shmLinks.Add(1)
	return c, nil
}

// newFile creates the memory of a shared-memory link: an anonymous,
// close-on-exec memory file of shmSize bytes.
func newFile() (*os.File, error) {
	name := []byte("goffload-link\x00")
	const mfdCloexec = 1
	fd, _, errno := syscall.Syscall(sysMemfdCreate, uintptr(unsafe.Pointer(&name[0])), mfdCloexec, 0)
	if errno != 0 {
		return nil, fmt.Errorf("memfd_create: %w", errno)
	}
	if err := syscall.Ftruncate(int(fd), shmSize); err != nil {
		syscall.Close(int(fd))
		return nil, fmt.Errorf("sizing the link's shared memory: %w", err)
	}
	return os.NewFile(fd, "goffload-link"), nil
}

func (c *conn) enter() bool {
	c.active.Add(1)
	if c.closed.Load() {
		c.leave()
		return false
	}
	return true
}

func (c *conn) leave() {
	if c.active.Add(-1) == 0 && c.closed.Load() {
		c.release()
	}
}

func (c *conn) release() {
	c.unmap.Do(func() {
		syscall.Munmap(c.mem)
		shmLinks.Add(-1)
	})
}

// errShm is the error of a read or write after the link closed here.
func (c *conn) errShm() error {
	if p := c.cause.Load(); p != nil {
		return *p
	}
	return net.ErrClosed
}

// Read reads what the other side wrote, waiting for at least one byte. It
// returns io.EOF once the other side closed and everything it wrote was read.
func (c *conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if !c.enter() {
		return 0, c.errShm()
	}
	defer c.leave()
	c.reads++
	r := c.rx
	w := waiter{c: c, bo: &c.bo, skipping: c.bo.Skipping()}
	var polled time.Time
	for {
		head, tail := r.h.head.Load(), r.h.tail.Load()
		if head-tail > shmRingSize {
			return 0, c.corrupt(head, tail)
		}
		if head != tail {
			n := int(min(uint64(len(p)), head-tail))
			off := int(tail % shmRingSize)
			k := copyOut(p[:n], r.data[off:])
			copyOut(p[k:n], r.data)
			r.h.tail.Store(tail + uint64(n))
			shmAcquired()
			w.done()
			return n, nil
		}
		if c.closed.Load() {
			w.done()
			return 0, c.errShm()
		}
		if r.h.closed.Load() != 0 {
			w.done()
			return 0, io.EOF
		}
		if c.pollOnly {
			// The rest of a frame the other side is writing: poll, and
			// nap after a while (the other side is slow, or stuck until
			// the link fails and closes).
			if polled.IsZero() {
				polled = time.Now()
			}
			if time.Since(polled) < writerSpin {
				runtime.Gosched()
			} else {
				time.Sleep(20 * time.Microsecond)
			}
			continue
		}
		w.wait(tail)
	}
}

// setPolled says whether a goroutine of this side polls the ring it reads
// (the engine's await). While one does, the other side rings no doorbell for
// the parked reader. Whoever clears it reads what came meanwhile, or leaves
// it to a reader that is not parked (see the engine's await).
func (c *conn) SetPolled(on bool) {
	if !c.enter() {
		return
	}
	defer c.leave()
	v := uint32(0)
	if on {
		v = 1
	}
	c.rx.h.rPolled.Store(v)
}

// readable reports whether a Read would return without waiting: the ring
// holds data, or the link ended.
func (c *conn) Readable() bool {
	if !c.enter() {
		return true // closed: a Read fails at once
	}
	defer c.leave()
	return c.ready()
}

// ready is readable while c is entered (its memory mapped).
func (c *conn) ready() bool {
	h := c.rx.h
	return h.head.Load() != h.tail.Load() || h.closed.Load() != 0 || c.closed.Load()
}

// awaitReadable waits as a Read waits (polling, then parked on the doorbell)
// until the link is readable, without reading. The host's link reader waits
// here between frames, holding nothing. So a caller polling for its answer
// may read it itself (the engine's await). While quiet says so (such a caller
// polls), it parks at once rather than poll too: one poller per process.
//
// A kick (see kick) makes it return even if the ring is empty. The frames it
// was kicked for may be in the link's read buffer already. (A polling caller
// read them from the ring with its own answer and left them there.) Only the
// caller of awaitReadable can see those.
func (c *conn) AwaitReadable(quiet func() bool) {
	if !c.enter() {
		return
	}
	defer c.leave()
	w := waiter{c: c, bo: &c.abo, skipping: c.abo.Skipping(), quiet: quiet}
	for !c.ready() && !w.kicked {
		w.wait(c.rx.h.tail.Load())
	}
	w.done()
}

// Write writes all of p, waiting for room as the reader makes it.
func (c *conn) Write(p []byte) (int, error) {
	if !c.enter() {
		return 0, c.errShm()
	}
	defer c.leave()
	written := 0
	var full time.Time
	var nap time.Duration
	for written < len(p) {
		n, err := c.put(p[written:])
		written += n
		if err != nil {
			return written, err
		}
		if n > 0 {
			full = time.Time{}
			continue
		}
		// The ring is full: the reader is taking from it (or gone, which
		// the link learns elsewhere and closes it).
		if full.IsZero() {
			full, nap = time.Now(), 0
		}
		if time.Since(full) < writerSpin {
			runtime.Gosched()
		} else {
			nap = min(max(2*nap, 20*time.Microsecond), time.Millisecond)
			time.Sleep(nap)
		}
	}
	return written, nil
}

// writerSpin is how long a writer that finds the ring full polls before it
// sleeps. That is about the time the reader takes to empty a full ring.
const writerSpin = 200 * time.Microsecond

// TryWriteFrames writes as much of frames as the ring has room for now.
func (c *conn) TryWriteFrames(frames []byte) (int, error) {
	if !c.enter() {
		return 0, c.errShm()
	}
	defer c.leave()
	return c.put(frames)
}

// put copies as much of p as fits into the ring and publishes it.
func (c *conn) put(p []byte) (int, error) {
	if c.closed.Load() {
		return 0, c.errShm()
	}
	r := c.tx
	if r.h.closed.Load() != 0 {
		return 0, syscall.EPIPE
	}
	head, tail := r.h.head.Load(), r.h.tail.Load()
	if head-tail > shmRingSize {
		return 0, c.corrupt(head, tail)
	}
	n := int(min(uint64(len(p)), shmRingSize-(head-tail)))
	if n == 0 {
		return 0, nil
	}
	off := int(head % shmRingSize)
	k := copyOut(r.data[off:], p[:n])
	copyOut(r.data, p[k:n])
	shmReleased()
	r.h.head.Store(head + uint64(n))
	if r.h.rParked.Load() != 0 && r.h.rPolled.Load() == 0 {
		c.ring(r)
	}
	return n, nil
}

// kick wakes this side's reader if it parked on the doorbell, to poll again.
// A kernel of this process ended, and the other side's next frame is likely
// on its way. The wake-up is in this process (the read's deadline), not a
// system call.
func (c *conn) Kick() {
	if !c.enter() {
		return
	}
	defer c.leave()
	if c.bell != nil && c.rx.h.rParked.Load() != 0 && !c.closed.Load() {
		c.bell.SetReadDeadline(longAgo)
	}
}

// longAgo is a deadline in the past: a read waiting for it returns.
var longAgo = time.Unix(1, 0)

// ring wakes the other side's reader, which said it parks. It writes a byte
// on the doorbell, or wakes the futex. The write never waits: a full socket
// already holds bytes that wake it.
func (c *conn) ring(r ring) {
	if c.bell == nil {
		r.h.dataSeq.Add(1)
		futexWake(&r.h.dataSeq)
		return
	}
	c.rawBell.Write(func(fd uintptr) bool {
		for {
			if _, err := syscall.Write(int(fd), []byte{1}); err != syscall.EINTR {
				return true
			}
		}
	})
}

// corrupt ends the link whose ring says more is in it than it holds. The
// other process wrote its shared memory out of turn.
func (c *conn) corrupt(head, tail uint64) error {
	err := fmt.Errorf("%w: shared-memory ring out of order (head %d, tail %d, size %d)", errShmCorrupt, head, tail, shmRingSize)
	c.closeWith(err)
	return err
}

// Close ends the link on both sides: the other side reads what was written
// and then io.EOF.
func (c *conn) Close() error { return c.closeWith(nil) }

// closeWith ends the link. Reads and writes here fail with cause (nil: a
// clean close).
func (c *conn) closeWith(cause error) error {
	c.once.Do(func() {
		if cause != nil {
			c.cause.Store(&cause)
		}
		c.enter() // the memory is ours until the wake-ups are done
		c.closed.Store(true)
		for _, r := range []ring{c.tx, c.rx} {
			r.h.closed.Store(1)
			if c.bell == nil { // readers parked on the futex; the doorbell's close wakes the others
				r.h.dataSeq.Add(1)
				futexWake(&r.h.dataSeq)
			}
		}
		c.leave()
		if c.bell != nil {
			c.bell.Close() // wakes our parked reader; the other side's reads EOF
		}
	})
	return nil
}

// waiter is a read's wait for its ring, as a link's reader waits for its
// socket. It polls while the budget lasts, while this is the process's one
// polling reader and no kernel computes. Then it parks on the doorbell (or
// the futex).
type waiter struct {
	c        *conn
	bo       *transport.Backoff // c's that this wait goes by
	quiet    func() bool        // if set and true: park at once (another goroutine polls)
	skipping bool               // the backoff makes this read park at once
	start    time.Time
	holding  bool
	spun     bool
	parkedN  int
	polls    int
	kicked   bool // a kick woke it (awaitReadable returns then)
	bell     [64]byte
}

// wait waits for the ring to move past tail, or for a close.
func (w *waiter) wait(tail uint64) {
	c, h := w.c, w.c.rx.h
	if w.start.IsZero() {
		w.start = time.Now()
		if !w.skipping && transport.SpinBudget() > 0 && transport.TakeSpinner() {
			w.holding = true
		}
	}
	if w.holding && w.parkedN == 0 && !transport.Computing() && (w.quiet == nil || !w.quiet()) {
		w.polls++
		if w.polls%8 != 0 || time.Since(w.start) < transport.SpinBudget() { // the clock is read every 8th poll
			w.spun = true
			waitpoll.Pause(w.polls)
			return
		}
	}
	if w.holding {
		transport.DropSpinner()
		w.holding = false
	}
	s := h.dataSeq.Load()
	h.rParked.Store(1)
	if h.head.Load() == tail && h.closed.Load() == 0 && !c.closed.Load() {
		w.parkedN++
		c.parked.Add(1)
		if c.bell == nil {
			futexWait(&h.dataSeq, s, 200*time.Millisecond) // woken by the writer or a close: the timeout only bounds a wake-up missed by a bug
		} else if _, err := c.bell.Read(w.bell[:]); errors.Is(err, os.ErrDeadlineExceeded) {
			// kicked: poll again, for a whole budget
			c.kicked.Add(1)
			w.kicked = true
			c.bell.SetReadDeadline(time.Time{})
			h.rParked.Store(0)
			w.start, w.parkedN, w.polls, w.skipping = time.Time{}, 0, 0, false
			w.bo.Wake()
			return
		} else if err != nil && !c.closed.Load() {
			// The other process is gone: what it wrote before is still
			// read, then the reads fail.
			h.rParked.Store(0)
			c.closeWith(fmt.Errorf("%s: %w", c.endWhat, io.EOF))
			return
		}
	}
	h.rParked.Store(0)
}

// done ends a read's wait with the backoff of transport.SpinReader's reads.
// An idle link makes the next reads park at once. A busy one keeps spinning.
func (w *waiter) done() {
	if w.holding {
		transport.DropSpinner()
		w.holding = false
	}
	if !w.skipping {
		w.bo.After(w.parkedN > 0, w.spun, w.start)
	}
}

// Stats returns how many reads the conn made, and how many of them parked.
func (c *conn) Stats() (reads, parked int64) { return c.reads, c.parked.Load() }

// copyOut copies as copy does, but out of the race detector's sight, as a
// socket's read(2) and write(2) do. The buffers on the other end of a link
// are ordered by the other process, which the race detector cannot see. It
// would report the engine's reads of a buffer being sent against its later
// writes of the same buffer received.
func copyOut(dst, src []byte) int {
	n := min(len(dst), len(src))
	if n > 0 {
		memmove(unsafe.Pointer(unsafe.SliceData(dst)), unsafe.Pointer(unsafe.SliceData(src)), uintptr(n))
	}
	return n
}

//go:linkname memmove runtime.memmove
//go:noescape
func memmove(to, from unsafe.Pointer, n uintptr)

const (
	futexWaitOp = 0 // FUTEX_WAIT, shared between processes
	futexWakeOp = 1 // FUTEX_WAKE
)

// futexWait sleeps while *addr is val, for at most d.
func futexWait(addr *atomic.Uint32, val uint32, d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWaitOp, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// futexWake wakes the waiters on addr.
func futexWake(addr *atomic.Uint32) {
	syscall.Syscall6(syscall.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWakeOp, 1<<30, 0, 0, 0)
}

// errShmCorrupt is the error of a link whose shared memory the other side
// left in a state its writer and reader never make.
var errShmCorrupt = errors.New("corrupt link")

// NewFile creates the memory of a shared-memory link: an anonymous,
// close-on-exec memory file. Map it with New or Open here (side 0). Hand it
// to another process (exec.Cmd.ExtraFiles) and map it there (side 1).
func NewFile() (*os.File, error) { return newFile() }

// New makes the transport of a link over the memory file fd (from NewFile).
// It is side 0 (the process that created it) or 1. bell is the socket both
// processes hold, the doorbell, closed with the link. Its end means the other
// process ended, which endWhat says. The transport can write without
// blocking, and be polled and kicked (transport.TryWriter, transport.Poller).
func New(fd, side int, bell net.Conn, endWhat string) (transport.Transport, error) {
	if bell == nil {
		return nil, fmt.Errorf("shared-memory link: no doorbell")
	}
	c, err := newConn(fd, side, bell, endWhat)
	if err != nil {
		return nil, err
	}
	return &link{Stream: transport.NewStream(c, nil), c: c}, nil
}

// Open maps the link memory f (from NewFile) as side 0 or side 1. It is for a
// raw baseline that means to measure the same rings as a local device's link.
// The stream it returns reads and writes as the link does. A read polls for
// transport.SpinBudget and then parks. It parks on a futex in the shared
// page, as the stream has no doorbell socket. Close ends it on both sides;
// the other side reads io.EOF. One goroutine at a time may read it, and one
// write it.
func Open(f *os.File, side int) (io.ReadWriteCloser, error) {
	if side != 0 && side != 1 {
		return nil, fmt.Errorf("shared-memory link: side %d, want 0 or 1", side)
	}
	return newConn(int(f.Fd()), side, nil, "")
}

// Links reports how many shared-memory links this process has mapped.
func Links() int64 { return shmLinks.Load() }

// link is a shared-memory link's transport: the stream framing over the
// rings, with the rings' capabilities.
type link struct {
	*transport.Stream
	c *conn
}

func (l *link) TryWriteFrames(frames []byte) (int, error) { return l.c.TryWriteFrames(frames) }
func (l *link) Readable() bool                            { return l.c.Readable() }
func (l *link) SetPolled(on bool)                         { l.c.SetPolled(on) }
func (l *link) SetPollOnly(on bool)                       { l.c.pollOnly = on }
func (l *link) Kick()                                     { l.c.Kick() }
func (l *link) AwaitReadable(quiet func() bool)           { l.c.AwaitReadable(quiet) }

var (
	_ transport.TryWriter = (*link)(nil)
	_ transport.Poller    = (*link)(nil)
)
