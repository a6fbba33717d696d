//go:build mpi

package mpi

import (
	"fmt"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// napper is how the progress goroutine naps: parked in Go's netpoller on a
// timerfd, which its expiry or a poke (the timer set to expire at once)
// makes readable. A nap made on the thread instead (ppoll, a cgo call)
// keeps the goroutine's P: the Go scheduler takes a P from a system call
// only when sysmon sees the same call on two of its ticks, and sysmon,
// finding nothing to take, backs off to a tick of 10 ms, longer than any
// nap; so the naps held a P for the whole idle time, and the program's own
// goroutines had one P fewer (issue 34: its Go code ran 1.6× slower on the
// host rank of an MPI job with idle devices; runtime/trace showed the
// progress goroutine in the nap's ppoll 67% of the time, holding a P, and
// the program's goroutines runnable without one). Parked, the goroutine
// holds nothing; a timerfd keeps the nap's length to the microsecond where
// a Go timer would round it up to a millisecond.
type napper struct {
	fd int
	f  *os.File // keeps fd registered with the netpoller
	rc syscall.RawConn
}

const (
	clockMonotonic = 1
	tfdNonblock    = syscall.O_NONBLOCK
	tfdCloexec     = syscall.O_CLOEXEC
)

type itimerspec struct {
	interval, value syscall.Timespec
}

func newNapper() (*napper, error) {
	fd, _, errno := syscall.Syscall(syscall.SYS_TIMERFD_CREATE, clockMonotonic, tfdNonblock|tfdCloexec, 0)
	if errno != 0 {
		return nil, fmt.Errorf("timerfd_create: %w", errno)
	}
	f := os.NewFile(fd, "goffload-mpi-nap")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("timerfd: %w", err)
	}
	return &napper{fd: int(fd), f: f, rc: rc}, nil
}

// arm sets the timer to expire once, d from now (at least a nanosecond).
func (n *napper) arm(d time.Duration) {
	its := itimerspec{value: syscall.NsecToTimespec(max(d.Nanoseconds(), 1))}
	syscall.Syscall6(syscall.SYS_TIMERFD_SETTIME, uintptr(n.fd), 0, uintptr(unsafe.Pointer(&its)), 0, 0, 0)
}

// clear forgets an expiry not waited for.
func (n *napper) clear() {
	var b [8]byte
	syscall.Read(n.fd, b[:])
}

// wait parks the calling goroutine until the timer expires (at once if it
// has expired since the last wait or clear).
func (n *napper) wait() {
	var b [8]byte
	n.rc.Read(func(fd uintptr) bool {
		_, err := syscall.Read(int(fd), b[:])
		return err != syscall.EAGAIN
	})
}
