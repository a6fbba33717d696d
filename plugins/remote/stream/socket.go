// Package stream is the transport of links over sockets. One is a Unix
// socket: a local device's link where shared memory is refused, or with
// GOFFLOAD_LOCAL_LINK=socket. The other is a TCP session, plain or under TLS.
// Its frames are transport.Stream's. Its reads poll before they park
// (transport.SpinReader). Its writes can be tried without blocking
// (transport.TryWriter).
//
// New frames a socket, and NewTLS a TLS session over Under's connection.
// Session frames either, as a TCP session was set up. SocketPair makes the
// sockets that a local device's link and its peers' go over. Raw baselines
// use it to measure the same sockets as the transport.
package stream

import (
	"crypto/tls"
	"net"
	"os"
	"syscall"

	"github.com/goffload/offload/plugins/remote/transport"
)

// socket is a Transport over a socket: the stream framing, read through a
// reader that spins before it parks. Its writes never wait.
type socket struct {
	*transport.Stream
	raw syscall.RawConn // conn's descriptor, for TryWriteFrames; nil if it has none
}

// New makes the transport of a link over conn. Its reader spins briefly
// before parking (transport.SpinReader).
func New(conn net.Conn) transport.Transport {
	t := &socket{Stream: transport.NewStream(conn, transport.SpinReader(conn, transport.SpinBudget()))}
	if sc, ok := conn.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			t.raw = raw
		}
	}
	return t
}

// Session makes the transport of an authenticated TCP session. It is a TLS
// session's (NewTLS) if c is one, else a plain socket's.
func Session(c net.Conn) transport.Transport {
	if tc, ok := c.(*tls.Conn); ok {
		return NewTLS(tc)
	}
	return New(c)
}

// TryWriteFrames makes one non-blocking write(2) of frames.
func (t *socket) TryWriteFrames(frames []byte) (int, error) {
	if t.raw == nil {
		return 0, nil
	}
	return tryWrite(t.raw, frames)
}

// tryWrite makes one non-blocking write(2) of b on raw's descriptor. It
// returns how much it wrote.
func tryWrite(raw syscall.RawConn, frames []byte) (int, error) {
	var n int
	var werr error
	err := raw.Write(func(fd uintptr) bool {
		for {
			n, werr = syscall.Write(int(fd), frames)
			if werr != syscall.EINTR {
				return true // done, or full: never park here
			}
		}
	})
	switch {
	case err != nil:
		return 0, err
	case werr == syscall.EAGAIN:
		return 0, nil
	case werr != nil:
		return 0, os.NewSyscallError("write", werr)
	}
	return max(n, 0), nil
}

// SocketPair returns a connected pair of Unix stream sockets (close-on-exec
// descriptors), set up as a local device's link is. Their buffers are 4 MiB.
// The default ~200 KiB makes a large transfer sleep and wake hundreds of
// times.
func SocketPair() ([2]int, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return fds, err
	}
	for _, fd := range fds {
		syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_SNDBUF, 4<<20)
		syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<20)
	}
	return fds, nil
}

var (
	_ transport.TryWriter = (*socket)(nil)
	_ transport.Buffered  = (*socket)(nil)
)
