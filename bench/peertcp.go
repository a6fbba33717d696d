package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"
)

// Raw peers over TCP, for remote devices on another machine (tcp://): the
// raw baselines must cross the same network as the devices' links, so the
// peers run on the devices' machine, served by bench -serve-peer, and the
// Remote suites connect to them (-peer HOST:PORT) instead of starting
// children over socketpairs. A connection is set up as the tcp transport
// sets up its own (net.Dial, whose connections have TCP_NODELAY), and then
// carries the same traffic as a child's socketpair.
//
// The host opens a connection with a header of tcpPeerMagic and three
// little-endian uint64s: the role (1 echo, 2 xfer), how the peer's reads
// wait (a spin budget in nanoseconds, 0 for plain blocking reads) and an
// xfer peer's largest message in bytes. The server answers one byte, 0 if
// it serves, or 1 and a line that says why not. At the end of the stream
// (the host shuts its side down) the server writes one line, "ok" or
// "error: …", and closes: what a child's exit status says.

const (
	tcpPeerMagic  = "gofbpeer"
	tcpPeerHeader = len(tcpPeerMagic) + 24
	// tcpPeerMaxSize bounds an xfer peer's buffer: the largest message the
	// remote suite sends is 64 MiB.
	tcpPeerMaxSize = 1 << 30
	// tcpPeerTimeout bounds the header's exchange and the wait for the
	// final status.
	tcpPeerTimeout = 10 * time.Second
)

// The roles in a header.
var tcpPeerRoles = []string{1: "echo", 2: "xfer"}

// servePeersTCP serves raw peers to every connection ln accepts, each on a
// goroutine of its own, until ln is closed (then it returns nil). What goes
// wrong with a connection is logged to logw and ends that connection only.
func servePeersTCP(ln net.Listener, logw io.Writer) error {
	var mu sync.Mutex // logw's
	logf := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(logw, "bench raw peer: "+format+"\n", args...)
	}
	pause := 5 * time.Millisecond
	for {
		conn, err := ln.Accept()
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil { // out of descriptors, say: wait and go on
			logf("accept: %v", err)
			time.Sleep(pause)
			pause = min(2*pause, time.Second)
			continue
		}
		pause = 5 * time.Millisecond
		go func() {
			if err := serveTCPPeer(conn); err != nil {
				logf("%s: %v", conn.RemoteAddr(), err)
			}
		}()
	}
}

// serveTCPPeer serves one connection: the header, the peer's traffic and
// the final status.
func serveTCPPeer(conn net.Conn) error {
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(tcpPeerTimeout))
	var hdr [tcpPeerHeader]byte
	if _, err := io.ReadFull(conn, hdr[:]); err != nil {
		return fmt.Errorf("reading the header: %w", err)
	}
	role, sp, size, err := parseTCPPeerHeader(hdr[:])
	if err != nil {
		conn.Write(append([]byte{1}, err.Error()+"\n"...))
		return err
	}
	if _, err := conn.Write([]byte{0}); err != nil {
		return err
	}
	conn.SetDeadline(time.Time{})
	serr := servePeerConn(conn, role, sp, size)
	status := "ok\n"
	if serr != nil {
		status = "error: " + strings.ReplaceAll(serr.Error(), "\n", " ") + "\n"
	}
	conn.SetWriteDeadline(time.Now().Add(tcpPeerTimeout))
	conn.Write([]byte(status))
	if serr != nil {
		return fmt.Errorf("%s peer: %w", role, serr)
	}
	return nil
}

// tcpPeerHeaderOf is the header that asks for a peer in role, reading as sp
// says, with messages of up to size bytes.
func tcpPeerHeaderOf(role string, sp spin, size int) ([]byte, error) {
	code := 0
	for c, r := range tcpPeerRoles {
		if r != "" && r == role {
			code = c
		}
	}
	if code == 0 {
		return nil, fmt.Errorf("peer role %q: want echo or xfer", role)
	}
	hdr := make([]byte, 0, tcpPeerHeader)
	hdr = append(hdr, tcpPeerMagic...)
	hdr = binary.LittleEndian.AppendUint64(hdr, uint64(code))
	hdr = binary.LittleEndian.AppendUint64(hdr, uint64(sp.budget))
	hdr = binary.LittleEndian.AppendUint64(hdr, uint64(size))
	return hdr, nil
}

// parseTCPPeerHeader reads what tcpPeerHeaderOf writes.
func parseTCPPeerHeader(hdr []byte) (role string, sp spin, size int, err error) {
	if len(hdr) != tcpPeerHeader || string(hdr[:len(tcpPeerMagic)]) != tcpPeerMagic {
		return "", spin{}, 0, fmt.Errorf("not a bench raw peer header (%q)", hdr[:min(len(hdr), len(tcpPeerMagic))])
	}
	code := binary.LittleEndian.Uint64(hdr[8:])
	budget := binary.LittleEndian.Uint64(hdr[16:])
	n := binary.LittleEndian.Uint64(hdr[24:])
	if code == 0 || code >= uint64(len(tcpPeerRoles)) {
		return "", spin{}, 0, fmt.Errorf("peer role %d: want 1 (echo) or 2 (xfer)", code)
	}
	role = tcpPeerRoles[code]
	if budget > uint64(time.Second) {
		return "", spin{}, 0, fmt.Errorf("spin of %d ns: want at most 1s", budget)
	}
	if role == "xfer" && (n < 1 || n > tcpPeerMaxSize) {
		return "", spin{}, 0, fmt.Errorf("xfer peer of %d-byte messages: want 1 to %d bytes", n, tcpPeerMaxSize)
	}
	return role, spin{budget: time.Duration(budget)}, int(n), nil
}

// dialPeer connects to the peer server at addr for a peer in role, both
// sides reading as sp says; size is an xfer peer's largest message.
func dialPeer(addr, role string, sp spin, size int) (*peer, error) {
	hdr, err := tcpPeerHeaderOf(role, sp, size)
	if err != nil {
		return nil, err
	}
	conn, err := net.DialTimeout("tcp", addr, tcpPeerTimeout)
	if err != nil {
		return nil, fmt.Errorf("raw peer server: %w", err)
	}
	fail := func(err error) (*peer, error) {
		conn.Close()
		return nil, fmt.Errorf("raw peer server %s: %w", addr, err)
	}
	conn.SetDeadline(time.Now().Add(tcpPeerTimeout))
	if _, err := conn.Write(hdr); err != nil {
		return fail(err)
	}
	var ack [1]byte
	if _, err := io.ReadFull(conn, ack[:]); err != nil {
		return fail(fmt.Errorf("no answer to the header (is it a bench -serve-peer?): %w", err))
	}
	if ack[0] != 0 {
		line, _ := bufio.NewReader(io.LimitReader(conn, 1024)).ReadString('\n')
		return fail(fmt.Errorf("refused: %s", strings.TrimSpace(line)))
	}
	conn.SetDeadline(time.Time{})
	r, err := newSockReader(conn, sp)
	if err != nil {
		return fail(err)
	}
	return &peer{w: conn, r: r, conn: conn, addr: addr}, nil
}

// tcpFailed is failed for a peer server's connection.
func (p *peer) tcpFailed(err error) error {
	return fmt.Errorf("raw peer at %s: %w", p.addr, err)
}

// tcpClose ends a peer server's connection: it shuts the host's side
// down, which ends the peer, and reads the peer's final status.
func (p *peer) tcpClose() error {
	defer p.conn.Close()
	cw, ok := p.conn.(interface{ CloseWrite() error })
	if !ok {
		return fmt.Errorf("raw peer at %s: cannot shut down writing on a %T", p.addr, p.conn)
	}
	if err := cw.CloseWrite(); err != nil {
		return fmt.Errorf("raw peer at %s: %w", p.addr, err)
	}
	p.conn.SetReadDeadline(time.Now().Add(tcpPeerTimeout))
	b, err := io.ReadAll(io.LimitReader(p.conn, 4096))
	status := strings.TrimSpace(string(b))
	switch {
	case status == "ok":
		return nil
	case status != "":
		return fmt.Errorf("raw peer at %s: %s", p.addr, status)
	case err != nil:
		return fmt.Errorf("raw peer at %s: reading its status: %w", p.addr, err)
	}
	return fmt.Errorf("raw peer at %s: closed without a status", p.addr)
}

// openPeer is the peer in role for env's raw baselines: a connection to the
// peer server env.Peer names, or else a child process.
func openPeer(env *Env, role string, sp spin, size int) (*peer, error) {
	if env.Peer != "" {
		return dialPeer(env.Peer, role, sp, size)
	}
	return startPeer(role, sp, size)
}

// withPeer opens a peer (openPeer), runs f with it and closes it.
func withPeer(env *Env, role string, sp spin, size int, f func(p *peer) error) error {
	p, err := openPeer(env, role, sp, size)
	return usePeer(p, err, f)
}

// usePeer runs f with p, the peer just opened (unless opening it failed
// with err), and closes it.
func usePeer(p *peer, err error, f func(p *peer) error) (ferr error) {
	if err != nil {
		return err
	}
	defer func() {
		if cerr := p.close(); ferr == nil {
			ferr = cerr
		}
	}()
	return f(p)
}

// peerWhere says where env's raw baselines' peers are, for a comment.
func (e *Env) peerWhere() string {
	if e.Peer != "" {
		return fmt.Sprintf("bench -serve-peer at %s, over TCP (-peer; connections set up as the tcp transport's: net.Dial, TCP_NODELAY)", e.Peer)
	}
	return fmt.Sprintf("this executable started again with %s=echo|xfer, on an inherited AF_UNIX SOCK_STREAM socketpair (the transport's socket set-up, stream.SocketPair)", envPeerRole)
}
