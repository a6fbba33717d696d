package transport

import (
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goffload/offload/internal/waitpoll"
)

// Waking a process that sleeps in the kernel costs tens of microseconds on
// virtual machines, more than a whole message takes. So a link's reader polls
// its socket briefly before it parks. Measured on a 2-core VM, an empty
// synchronous launch went from about 95 µs to about 20 µs. (See the
// raw.pingpong_* lines of go run ./bench -suite remote.)
//
// Spinning costs a core while it lasts. When both processes share one core,
// it delays the very process it waits for. So a spin that finds nothing makes
// the next reads park at once, twice as many each time in a row. A spin that
// finds data (or data that comes soon after parking) ends that backoff.

// spinBudget is how long a read polls before parking. It is
// GOFFLOAD_REMOTE_SPIN, a duration from 0 to 1s; "0" turns spinning off. It
// is 100µs by default. Start refuses a value it cannot use (internal/core's
// CheckDeviceEnv, with the same rule). Some processes do not go through
// Start, such as a device process started by hand. Such a process says so on
// stderr, once, and spins for the default.
var spinBudget = func() time.Duration {
	const def = 100 * time.Microsecond
	s := os.Getenv("GOFFLOAD_REMOTE_SPIN")
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil || d < 0 || d > time.Second {
		fmt.Fprintf(os.Stderr, "goffload: GOFFLOAD_REMOTE_SPIN=%q: want a duration from 0 (no spinning) to 1s, such as 100us; using %v\n", s, def)
		return def
	}
	return d
}()

// SpinBudget is how long a link's reader polls before parking
// (GOFFLOAD_REMOTE_SPIN). Every transport's reader polls as long. So do raw
// baselines that mean to wait as the transports do.
func SpinBudget() time.Duration { return spinBudget }

// KernelStarted counts a kernel that starts running in this process. Until it
// ends, readers park at once rather than spin (see computing).
func KernelStarted() { computing.Add(1) }

// KernelEnded counts a kernel's end. It reports whether it was the last one
// running.
func KernelEnded() (last bool) { return computing.Add(-1) == 0 }

// Computing reports whether a kernel runs in this process.
func Computing() bool { return computing.Load() > 0 }

// TakeSpinner takes the role of the process's one spinning reader, if no
// other reader holds it. It reports whether it did. Its holder gives it back
// with DropSpinner when its wait ends.
func TakeSpinner() bool { return spinner.CompareAndSwap(false, true) }

// DropSpinner gives the spinner's role back.
func DropSpinner() { spinner.Store(false) }

const maxBackoff = 64

// computing counts the kernels running in this process. While one runs, a
// reader does not spin, nor does MPI's progress goroutine. The kernel's
// workers have the device's cores. A poller would take one from them for as
// long as it spins.
var computing atomic.Int32

// spinner is held by the one reader of this process that spins; the others
// park at once. Two spinning readers keep both of a 2-core machine's Go
// processors busy. Then no thread waits in the network poller. A third
// reader, parked, hears of its data only when the runtime's monitor polls, up
// to 10 ms later. With 8 goroutines running nowait tasks on two device
// processes, one spinner is 5–10% faster per task.
var spinner atomic.Bool

// Backoff is a link reader's backoff, the socket's (SpinReader) and the
// shared-memory ring's alike. A read that waited idle makes the next reads
// park at once. They are twice as many each time in a row, up to maxBackoff.
// A read that found data while polling, or soon after parking, ends it.
type Backoff struct{ skip, backoff int }

// Skipping reports whether this read parks at once, and counts it.
func (b *Backoff) Skipping() bool {
	if b.skip > 0 {
		b.skip--
		return true
	}
	return false
}

// Wake ends the parking at once that an idle link earned. The next read polls
// again (a reader that was kicked).
func (b *Backoff) Wake() { b.skip = 0 }

// After takes what a read that could poll did. That is whether it parked and
// whether it polled, and when it began to wait.
func (b *Backoff) After(parked, spun bool, start time.Time) {
	switch {
	case parked && time.Since(start) > idleAfter:
		// The link was idle: park at once for the next few reads.
		b.backoff = min(max(2*b.backoff, 1), maxBackoff)
		b.skip = b.backoff
	case parked || spun:
		// Data came while spinning, or soon after parking: the link is
		// busy, keep spinning.
		b.backoff = 0
	}
}

// idleAfter is how long a read must have waited in all for the link to count
// as idle. That makes the next reads park at once.
const idleAfter = time.Millisecond

// SpinReader returns a reader of conn that waits for data as a link's reader
// does. It polls for up to budget before it parks, with the same backoff on
// an idle link. For a budget of 0, or a conn without a descriptor to poll, it
// returns conn itself. Package stream's socket links read with it
// (SpinBudget). So can raw baselines that mean to wait exactly as the
// transport does. The reader's Stats method counts its reads, and those that
// spun out their budget and parked.
func SpinReader(conn net.Conn, budget time.Duration) io.Reader {
	sc, ok := conn.(syscall.Conn)
	if !ok || budget <= 0 {
		return conn
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return conn
	}
	c := &spinConn{rc: rc, spin: budget}
	c.tryRead = c.read
	return c
}

// spinConn polls read(2) for up to spin before parking in the netpoller. It
// yields the goroutine between polls: the goroutine the reader just handed a
// frame to must get to run.
type spinConn struct {
	rc            syscall.RawConn
	spin          time.Duration
	bo            Backoff
	reads, parked int64 // see Stats
	r             readState
	tryRead       func(fd uintptr) bool // c.read, bound once
}

// Stats returns how many reads the reader made, and how many of them spun
// out their budget and parked.
func (c *spinConn) Stats() (reads, parked int64) { return c.reads, c.parked }

func (c *spinConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.reads++
	budget := c.spin
	if c.bo.Skipping() {
		budget = 0
	}
	r := &c.r
	*r = readState{p: p, budget: budget}
	err := c.rc.Read(c.tryRead)
	if r.holding {
		spinner.Store(false)
	}
	n, rerr := r.n, r.rerr
	if r.budget > 0 { // it may spin, and was the spinner
		c.bo.After(r.parked, r.spun, r.start)
	}
	*r = readState{} // not the caller's buffer past the call
	switch {
	case err != nil:
		return 0, err // a closed connection: net.ErrClosed
	case rerr != nil:
		return 0, os.NewSyscallError("read", rerr)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// readState is what one Read's polling keeps between tryRead's calls. It is
// in the spinConn, so that a read allocates nothing.
type readState struct {
	p                     []byte
	n                     int
	rerr                  error
	parked, spun, holding bool
	start                 time.Time
	budget                time.Duration
	polls                 int
}

// read is the function RawConn.Read calls when the descriptor may be
// readable. It reads, polling with yields while the budget lasts. It returns
// false to park in the network poller.
func (c *spinConn) read(fd uintptr) bool {
	r := &c.r
	for {
		r.n, r.rerr = syscall.Read(int(fd), r.p)
		switch r.rerr {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
		default:
			return true
		}
		if r.parked {
			return false
		}
		if r.start.IsZero() {
			r.start = time.Now()
			if spinner.CompareAndSwap(false, true) {
				r.holding = true
			} else {
				r.budget = 0
			}
		} else if time.Since(r.start) >= r.budget || computing.Load() > 0 {
			r.parked = true
			c.parked++
			if r.holding {
				spinner.Store(false)
				r.holding = false
			}
			return false
		}
		r.spun = true
		r.polls++
		waitpoll.Pause(r.polls)
	}
}
