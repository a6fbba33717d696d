package main

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goffload/offload/plugins/remote/stream"
	"github.com/goffload/offload/plugins/remote/transport"
)

// The raw baselines of suite remote talk to a peer process over the kind of
// connection a local remote device has: an AF_UNIX SOCK_STREAM socketpair
// whose other end the child inherits as descriptor 3, both ends wrapped by
// net.FileConn. The peer is this same executable (bench, or the bench test
// binary) started with GOFFLOAD_BENCH_ROLE set; main and TestMain call
// servePeerRole first of all, before anything else runs or prints. The
// spinning baselines of local devices on shared memory talk to the same
// peers over a shared-memory ring pair instead (peershm.go), and with
// -peer the peers are served over TCP by a bench -serve-peer (peertcp.go),
// with the same roles and traffic.

// Environment of a peer process.
const (
	envPeerRole = "GOFFLOAD_BENCH_ROLE" // "echo", "xfer" or "compute"
	envPeerSpin = "GOFFLOAD_BENCH_SPIN" // how the peer's reads wait: unset or 0, plain blocking reads; else a spin (parseSpin)
	envPeerSize = "GOFFLOAD_BENCH_SIZE" // xfer: the largest message, in bytes
	peerFD      = 3
	pingSize    = 8
)

// The batches of an xfer peer: the host writes a header of three
// little-endian uint64s, the direction (xferSink or xferSource), the
// message size and the message count, and then the messages flow.
const (
	xferSink   = 1 // host→peer: each message answered with its last byte
	xferSource = 2 // peer→host: each 1-byte request answered with a message
	xferHeader = 24
)

// servePeerRole serves as a peer and ends the process if the environment
// says this process is one; otherwise it returns at once.
//
//   - echo: reads 8-byte messages and writes each back, until end of stream.
//   - xfer: serves batches of messages of up to GOFFLOAD_BENCH_SIZE bytes,
//     all of one size and one direction, out of one buffer allocated (and
//     faulted in, filled as fill does) beforehand, until end of stream. In a
//     sink batch it reads each message into the buffer and answers with one
//     byte, the message's last; in a source batch it answers each one-byte
//     request with the buffer's first size bytes (as the sink batches left
//     them).
func servePeerRole() {
	role := os.Getenv(envPeerRole)
	if role == "" {
		return
	}
	serve := servePeer
	if role == "compute" { // the baseline of mpi.host_compute_idle_device (hostcompute.go)
		serve = func(string) error { return serveCompute(os.Stdin, os.Stdout) }
	}
	if err := serve(role); err != nil {
		fmt.Fprintf(os.Stderr, "bench %s peer (pid %d): %v\n", role, os.Getpid(), err)
		os.Exit(1)
	}
	os.Exit(0)
}

// servePeer serves as a peer in role over the inherited socket, or the
// inherited shared memory (GOFFLOAD_BENCH_SHM_FD), as the environment says.
func servePeer(role string) error {
	sp, err := parseSpin(os.Getenv(envPeerSpin))
	if err != nil {
		return err
	}
	size := 0
	if role == "xfer" {
		size, err = strconv.Atoi(os.Getenv(envPeerSize))
		if err != nil || size < 1 {
			return fmt.Errorf("%s=%q: want a positive byte count", envPeerSize, os.Getenv(envPeerSize))
		}
	}
	if v := os.Getenv(envPeerShm); v != "" {
		return servePeerShm(v, role, size)
	}
	f := os.NewFile(peerFD, "bench-peer")
	if f == nil {
		return fmt.Errorf("no inherited descriptor %d", peerFD)
	}
	conn, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("inherited socket: %w", err)
	}
	defer conn.Close()
	if os.Getenv(envPeerTLS) != "" {
		return serveTLSPeer(conn, role, sp, size) // suite tcp-tls's raw baselines
	}
	return servePeerConn(conn, role, sp, size)
}

// servePeerConn serves as a peer in role over conn, reading as sp says,
// until end of stream; size is an xfer peer's largest message.
func servePeerConn(conn net.Conn, role string, sp spin, size int) error {
	r, err := newSockReader(conn, sp)
	if err != nil {
		return err
	}
	return servePeerStream(conn, r, role, size)
}

// servePeerStream serves as a peer in role, reading r and writing w, until
// end of stream; size is an xfer peer's largest message.
func servePeerStream(w io.Writer, r *sockReader, role string, size int) error {
	switch role {
	case "echo":
		var buf [pingSize]byte
		for {
			if err := r.readFull(buf[:]); err != nil {
				return endOfStream(err)
			}
			if _, err := w.Write(buf[:]); err != nil {
				return err
			}
		}
	case "xfer":
		if size < 1 {
			return fmt.Errorf("xfer peer of %d-byte messages: want a positive size", size)
		}
		return serveXfer(w, r, fill(make([]byte, size)))
	}
	return fmt.Errorf("peer role %q: want echo or xfer", role)
}

// serveXfer serves an xfer peer's batches out of buf, reading r and writing
// w, until end of stream.
func serveXfer(w io.Writer, r *sockReader, buf []byte) error {
	var hdr [xferHeader]byte
	for {
		if err := r.readFull(hdr[:]); err != nil {
			return endOfStream(err)
		}
		dir := binary.LittleEndian.Uint64(hdr[0:])
		size := binary.LittleEndian.Uint64(hdr[8:])
		count := binary.LittleEndian.Uint64(hdr[16:])
		if size < 1 || size > uint64(len(buf)) {
			return fmt.Errorf("xfer batch of %d-byte messages: want 1 to %d bytes", size, len(buf))
		}
		msg := buf[:size]
		for range count {
			var err error
			switch dir {
			case xferSink:
				if err = r.readFull(msg); err == nil {
					_, err = w.Write(msg[size-1:])
				}
			case xferSource:
				var req [1]byte
				if err = r.readFull(req[:]); err == nil {
					_, err = w.Write(msg)
				}
			default:
				return fmt.Errorf("xfer batch direction %d: want %d (sink) or %d (source)", dir, xferSink, xferSource)
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = io.ErrUnexpectedEOF // the stream ended inside a batch
				}
				return err
			}
		}
	}
}

// endOfStream is nil for the end of the stream before a message (the host
// is done) and err otherwise.
func endOfStream(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

// spin says how a sockReader waits for data: with a zero budget it reads
// plainly (conn.Read: the goroutine parks in the netpoller until the socket
// is readable); otherwise as a remote link's reader does
// (transport.SpinReader): it polls the non-blocking socket with read(2) for up
// to budget, yielding the P between polls, then parks the same way.
type spin struct {
	budget time.Duration
}

func (s spin) String() string { return s.budget.String() }

// parseSpin parses what spin.String writes.
func parseSpin(v string) (spin, error) {
	if v == "" {
		return spin{}, nil
	}
	budget, err := time.ParseDuration(v)
	if err != nil || budget < 0 {
		return spin{}, fmt.Errorf("%s=%q: want a duration of at least 0", envPeerSpin, v)
	}
	return spin{budget: budget}, nil
}

// sockReader reads a socket as its spin says, or a shared-memory link (which
// waits as the transport's does).
type sockReader struct {
	r io.Reader
}

func newSockReader(conn net.Conn, sp spin) (*sockReader, error) {
	return &sockReader{r: transport.SpinReader(conn, sp.budget)}, nil
}

// readFull fills p; io.EOF means the stream ended before the first byte,
// io.ErrUnexpectedEOF within p.
func (r *sockReader) readFull(p []byte) error {
	_, err := io.ReadFull(r.r, p)
	return err
}

// stats returns the reads of a spinning reader or a shared-memory link, and
// how many parked (zeros for a plain one).
func (r *sockReader) stats() (reads, parked int64) {
	if s, ok := r.r.(interface{ Stats() (int64, int64) }); ok {
		return s.Stats()
	}
	return 0, 0
}

// peer is the host's end of a connection to a peer: a child process over a
// socketpair (startPeer) or a shared-memory link (startShmPeer, peershm.go),
// or a connection to a peer server (dialPeer, peertcp.go).
type peer struct {
	w    io.Writer   // the stream to the peer: conn, or shm
	r    *sockReader // what the peer answers
	conn net.Conn    // a socketpair's end or a TCP connection; nil over shared memory
	shm  io.Closer   // the shared-memory link; nil over a socket
	// A child process:
	cmd  *exec.Cmd
	done chan struct{}
	werr error // the peer's exit status, once done is closed
	// A peer server's connection: its address.
	addr string
}

// startPeer starts this executable as a peer in role, both sides reading
// as sp says; size is an xfer peer's largest message.
func startPeer(role string, sp spin, size int) (*peer, error) {
	fds, err := stream.SocketPair() // the transport's own set-up
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	ours := os.NewFile(uintptr(fds[0]), "bench-host")
	theirs := os.NewFile(uintptr(fds[1]), "bench-peer")
	defer theirs.Close()
	conn, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		return nil, err
	}
	r, err := newSockReader(conn, sp)
	if err != nil {
		conn.Close()
		return nil, err
	}
	p := &peer{w: conn, r: r, conn: conn}
	if err := p.start(role, size, theirs, envPeerSpin+"="+sp.String()); err != nil {
		conn.Close()
		return nil, err
	}
	return p, nil
}

// start starts this executable as the peer in role at the other end of
// p's stream, with theirs, that end, as its descriptor 3 and env added to
// its environment, and waits for its exit in the background: the exit ends
// a shared-memory link (a socket's end ends itself), so that a read of a
// peer that failed fails instead of waiting on.
func (p *peer) start(role string, size int, theirs *os.File, env ...string) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("cannot find this program's executable to start a peer: %w", err)
	}
	cmd := exec.Command(exe) // no arguments: a test binary must not take its test flags as a peer
	cmd.Env = append(os.Environ(), envPeerRole+"="+role,
		// A peer built with -race (the test binary under go test -race)
		// would otherwise sleep a second before exiting; the caller's own
		// GORACE options come after, so they win.
		"GORACE="+strings.TrimSpace("atexit_sleep_ms=0 "+os.Getenv("GORACE")))
	cmd.Env = append(cmd.Env, env...)
	if role == "xfer" {
		cmd.Env = append(cmd.Env, fmt.Sprintf("%s=%d", envPeerSize, size))
	}
	cmd.ExtraFiles = []*os.File{theirs} // descriptor 3
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	// The peer dies with us, also when we are killed; Pdeathsig follows the
	// thread that forks, so keep it for the fork.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	runtime.LockOSThread()
	err = cmd.Start()
	runtime.UnlockOSThread()
	if err != nil {
		return fmt.Errorf("starting a %s peer: %w", role, err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func() {
		p.werr = cmd.Wait()
		if p.shm != nil {
			p.shm.Close()
		}
		close(p.done)
	}()
	return nil
}

// pingPong does n round trips of an 8-byte message, checking each echo.
func (p *peer) pingPong(n int) error {
	var out, in [pingSize]byte
	for i := range n {
		for j := range out {
			out[j] = byte(i >> (8 * j))
		}
		if _, err := p.w.Write(out[:]); err != nil {
			return p.failed(err)
		}
		if err := p.r.readFull(in[:]); err != nil {
			return p.failed(err)
		}
		if in != out {
			return fmt.Errorf("echo peer answered %x to %x", in, out)
		}
	}
	return nil
}

// batch tells an xfer peer that n messages of size bytes follow in
// direction dir.
func (p *peer) batch(dir uint64, size, n int) error {
	var hdr [xferHeader]byte
	binary.LittleEndian.PutUint64(hdr[0:], dir)
	binary.LittleEndian.PutUint64(hdr[8:], uint64(size))
	binary.LittleEndian.PutUint64(hdr[16:], uint64(n))
	if _, err := p.w.Write(hdr[:]); err != nil {
		return p.failed(err)
	}
	return nil
}

// send writes msg to an xfer peer n times, waiting each time for its
// one-byte answer, which must be msg's last byte.
func (p *peer) send(msg []byte, n int) error {
	if err := p.batch(xferSink, len(msg), n); err != nil {
		return err
	}
	var ack [1]byte
	for range n {
		if _, err := p.w.Write(msg); err != nil {
			return p.failed(err)
		}
		if err := p.r.readFull(ack[:]); err != nil {
			return p.failed(err)
		}
		if ack[0] != msg[len(msg)-1] {
			return fmt.Errorf("xfer peer answered %d, want the message's last byte %d", ack[0], msg[len(msg)-1])
		}
	}
	return nil
}

// fetch asks an xfer peer n times for len(dst) bytes and reads them into
// dst. The peer's buffer holds what fill writes, overwritten by the
// messages sent to it: both ends of what comes must be want's.
func (p *peer) fetch(dst, want []byte, n int) error {
	if len(want) != len(dst) {
		return fmt.Errorf("fetch: %d bytes into %d", len(want), len(dst))
	}
	if err := p.batch(xferSource, len(dst), n); err != nil {
		return err
	}
	req := [1]byte{1}
	last := len(dst) - 1
	for range n {
		dst[0], dst[last] = ^want[0], ^want[last] // the read must write them again
		if _, err := p.w.Write(req[:]); err != nil {
			return p.failed(err)
		}
		if err := p.r.readFull(dst); err != nil {
			return p.failed(err)
		}
		if dst[0] != want[0] || dst[last] != want[last] {
			return fmt.Errorf("xfer peer sent %d bytes from %d to %d, want %d to %d", len(dst), dst[0], dst[last], want[0], want[last])
		}
	}
	return nil
}

// failed explains an I/O error with the peer's exit status if it has ended.
func (p *peer) failed(err error) error {
	if p.cmd == nil {
		return p.tcpFailed(err)
	}
	select {
	case <-p.done:
		return fmt.Errorf("peer process %d: %v (%v)", p.cmd.Process.Pid, err, p.werr)
	case <-time.After(100 * time.Millisecond):
		return fmt.Errorf("peer process %d: %v", p.cmd.Process.Pid, err)
	}
}

// close ends the stream, which ends the peer, and waits for it.
func (p *peer) close() error {
	if p.cmd == nil {
		return p.tcpClose()
	}
	if p.shm != nil {
		p.shm.Close()
	} else {
		p.conn.Close()
	}
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("peer process %d did not exit; killed it", p.cmd.Process.Pid)
	}
	if p.werr != nil {
		return fmt.Errorf("peer process %d: %v", p.cmd.Process.Pid, p.werr)
	}
	return nil
}
