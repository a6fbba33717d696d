package remote

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
)

// A local device's link goes through shared memory: two rings, one each
// way, in an anonymous memory file (memfd) that the host creates and hands
// to the device process, so nothing has a name another process could open.
// A ring is a byte stream with one writer and one reader: the writer copies
// into it and publishes its head, the reader copies out and publishes its
// tail. Neither makes a system call while the other keeps up: a reader with
// nothing to read polls for a short while (the spin budget and backoff of
// spin.go, one spinning reader per process) and then parks on a futex in
// the shared page, which the writer wakes only when the reader said it
// parks. A ring small enough to stay in the cache makes its two copies cost
// about one copy through memory: the writer's bytes are still in the cache
// when the reader takes them.
//
// The socket the device process inherits stays open beside the rings: it
// carries nothing, and its end tells the device that the host is gone (the
// host learns of the device's end from its exit).

// shmRingSize is the bytes of data in each ring: large enough for a
// fragment of bulk data and the frames around it, small enough to stay in
// the cache.
const shmRingSize = 2 << 20

// ringHdr is the shared state of one ring, at the start of its region; each
// side's words on a cache line of their own.
type ringHdr struct {
	head     atomic.Uint64 // bytes written in all; the writer's
	_        [56]byte
	tail     atomic.Uint64 // bytes read in all; the reader's
	_        [56]byte
	dataSeq  atomic.Uint32 // bumped when data comes for a parked reader
	rParked  atomic.Uint32 // the reader parks, or is about to
	_        [56]byte
	spaceSeq atomic.Uint32 // bumped when room is made for a parked writer
	wParked  atomic.Uint32 // the writer parks, or is about to
	_        [56]byte
	closed   atomic.Uint32 // either side closed the link
	_        [60]byte
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

// shmConn is one side of a shared-memory link: it writes one ring and
// reads the other. It is a Transport's byte stream (streamTransport): one
// goroutine at a time reads, one at a time writes.
type shmConn struct {
	mem    []byte
	tx, rx ring
	watch  io.Closer // the socket whose end is the other side's; closed with the conn

	closed atomic.Bool
	cause  atomic.Pointer[error] // why the link ended here, if not a clean close
	active atomic.Int32          // Read and Write calls in progress: the memory stays mapped while any is
	once   sync.Once
	unmap  sync.Once

	skip, backoff int // the reader's spin backoff, as spinConn's
	reads, parked int64
}

// shmLinks counts this process's shared-memory links still mapped.
var shmLinks atomic.Int64

// newShmConn maps the memory file fd (shmSize bytes) as side 0 (the host)
// or 1 (the device).
func newShmConn(fd int, side int, watch io.Closer) (*shmConn, error) {
	mem, err := syscall.Mmap(fd, 0, shmSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mapping the link's shared memory: %w", err)
	}
	c := &shmConn{mem: mem, tx: ringAt(mem, side), rx: ringAt(mem, 1-side), watch: watch}
	shmLinks.Add(1)
	return c, nil
}

// newShmFile creates the memory of a shared-memory link: an anonymous,
// close-on-exec memory file of shmSize bytes.
func newShmFile() (*os.File, error) {
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

func (c *shmConn) enter() bool {
	c.active.Add(1)
	if c.closed.Load() {
		c.leave()
		return false
	}
	return true
}

func (c *shmConn) leave() {
	if c.active.Add(-1) == 0 && c.closed.Load() {
		c.release()
	}
}

func (c *shmConn) release() {
	c.unmap.Do(func() {
		syscall.Munmap(c.mem)
		shmLinks.Add(-1)
	})
}

// errShm is the error of a read or write after the link closed here.
func (c *shmConn) errShm() error {
	if p := c.cause.Load(); p != nil {
		return *p
	}
	return net.ErrClosed
}

// Read reads what the other side wrote, waiting for at least one byte; io.EOF
// once the other side closed and everything it wrote was read.
func (c *shmConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if !c.enter() {
		return 0, c.errShm()
	}
	defer c.leave()
	c.reads++
	r := c.rx
	w := waiter{c: c}
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
			if r.h.wParked.Load() != 0 {
				r.h.spaceSeq.Add(1)
				futexWake(&r.h.spaceSeq)
			}
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
		w.wait(&r.h.dataSeq, &r.h.rParked, func() bool { return r.h.head.Load() != tail || r.h.closed.Load() != 0 || c.closed.Load() })
	}
}

// Write writes all of p, waiting for room as the reader makes it.
func (c *shmConn) Write(p []byte) (int, error) {
	if !c.enter() {
		return 0, c.errShm()
	}
	defer c.leave()
	written := 0
	for written < len(p) {
		n, err := c.put(p[written:])
		written += n
		if err != nil {
			return written, err
		}
		if n == 0 {
			r := c.tx
			head := r.h.head.Load()
			w := waiter{c: c, writer: true}
			w.wait(&r.h.spaceSeq, &r.h.wParked, func() bool {
				return head-r.h.tail.Load() < shmRingSize || r.h.closed.Load() != 0 || c.closed.Load()
			})
		}
	}
	return written, nil
}

// TryWriteFrames writes as much of frames as the ring has room for now.
func (c *shmConn) TryWriteFrames(frames []byte) (int, error) {
	if !c.enter() {
		return 0, c.errShm()
	}
	defer c.leave()
	return c.put(frames)
}

// put copies as much of p as fits into the ring and publishes it.
func (c *shmConn) put(p []byte) (int, error) {
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
	if r.h.rParked.Load() != 0 {
		r.h.dataSeq.Add(1)
		futexWake(&r.h.dataSeq)
	}
	return n, nil
}

// corrupt ends the link whose ring says more is in it than it holds: the
// other process wrote its shared memory out of turn.
func (c *shmConn) corrupt(head, tail uint64) error {
	err := fmt.Errorf("%w: shared-memory ring out of order (head %d, tail %d, size %d)", errShmCorrupt, head, tail, shmRingSize)
	c.closeWith(err)
	return err
}

// Close ends the link on both sides: the other side reads what was written
// and then io.EOF.
func (c *shmConn) Close() error { return c.closeWith(nil) }

// closeWith ends the link; reads and writes here fail with cause (nil: a
// clean close).
func (c *shmConn) closeWith(cause error) error {
	c.once.Do(func() {
		if cause != nil {
			c.cause.Store(&cause)
		}
		c.enter() // the memory is ours until the wake-ups are done
		c.closed.Store(true)
		for _, r := range []ring{c.tx, c.rx} {
			r.h.closed.Store(1)
			r.h.dataSeq.Add(1)
			futexWake(&r.h.dataSeq)
			r.h.spaceSeq.Add(1)
			futexWake(&r.h.spaceSeq)
		}
		c.leave()
		if c.watch != nil {
			c.watch.Close()
		}
	})
	return nil
}

// watchEnd closes c when r's reads end: r is the socket whose other end
// only the other process's exit closes.
func (c *shmConn) watchEnd(r io.Reader, what string) {
	var b [64]byte
	for {
		if _, err := r.Read(b[:]); err != nil {
			if !c.closed.Load() {
				c.closeWith(fmt.Errorf("%s: %w", what, io.EOF))
			}
			return
		}
	}
}

// waiter waits for a ring's other side as a link's reader waits for its
// socket: it polls while the budget lasts and this is the process's one
// spinning reader and no kernel computes, then parks on the futex.
type waiter struct {
	c       *shmConn
	writer  bool // a writer waiting for room: parks at once after a short poll
	start   time.Time
	holding bool
	spun    bool
	parkedN int
}

func (w *waiter) wait(seq, parked *atomic.Uint32, ready func() bool) {
	if w.start.IsZero() {
		w.start = time.Now()
		if !w.writer && w.c.skip == 0 && spinBudget > 0 && spinner.CompareAndSwap(false, true) {
			w.holding = true
		}
	}
	budget := spinBudget
	if w.writer {
		budget = 20 * time.Microsecond
	}
	if (w.holding || w.writer) && w.parkedN == 0 && computing.Load() == 0 && time.Since(w.start) < budget {
		w.spun = true
		runtime.Gosched()
		return
	}
	if w.holding {
		spinner.Store(false)
		w.holding = false
	}
	s := seq.Load()
	parked.Store(1)
	if !ready() {
		w.parkedN++
		if !w.writer {
			w.c.parked++
		}
		futexWait(seq, s, 200*time.Millisecond) // woken by the writer or a close: the timeout only bounds a wake-up missed by a bug
	}
	parked.Store(0)
}

// done ends a read's wait: the backoff of spinConn.Read (an idle link makes
// the next reads park at once, a busy one keeps spinning).
func (w *waiter) done() {
	if w.holding {
		spinner.Store(false)
		w.holding = false
	}
	c := w.c
	if c.skip > 0 {
		c.skip--
		return
	}
	switch {
	case w.parkedN > 0 && time.Since(w.start) > idleAfter:
		c.backoff = min(max(2*c.backoff, 1), maxBackoff)
		c.skip = c.backoff
	case w.parkedN > 0 || w.spun:
		c.backoff = 0
	}
}

// Stats returns how many reads the conn made, and how many of them parked.
func (c *shmConn) Stats() (reads, parked int64) { return c.reads, c.parked }

// copyOut copies as copy does, but as a socket's read(2) and write(2) do,
// out of the race detector's sight: the buffers on the other end of a link
// are ordered by the other process, which the race detector cannot see,
// and it would report the engine's reads of a buffer being sent against its
// later writes of the same buffer received.
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


// NewShmLink creates the memory of a shared-memory link, as a local device's
// link has: a file to map with OpenShmLink here (side 0) and, handed to a
// child process (exec.Cmd.ExtraFiles), there (side 1). bench's raw
// baselines use it, so that they measure the same rings as the transport.
func NewShmLink() (*os.File, error) { return newShmFile() }

// OpenShmLink maps the link memory f as side 0 (the process that created it)
// or side 1 (the other). The stream it returns reads and writes as a local
// device's link does: a read polls for the spin budget (SpinBudget) and
// then parks on a futex; Close ends it on both sides (the other side reads
// io.EOF). One goroutine at a time may read it and one write it.
func OpenShmLink(f *os.File, side int) (io.ReadWriteCloser, error) {
	if side != 0 && side != 1 {
		return nil, fmt.Errorf("shared-memory link: side %d, want 0 or 1", side)
	}
	return newShmConn(int(f.Fd()), side, nil)
}
