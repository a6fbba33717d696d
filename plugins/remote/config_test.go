package remote

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/remote/proto"
	"github.com/goffload/offload/plugins/remote/stream"
)

// TestTimeoutAtMostAYear: a GOFFLOAD_DEVICE_TIMEOUT over 8760h is refused
// when the kinds open devices, naming the variable, the value and the
// range. It passed Start, and every device refused the hello (issue 47).
// (The engine's test of the same name checks that 8760h is taken.)
func TestTimeoutAtMostAYear(t *testing.T) {
	for _, bad := range []string{"8761h", "87600h", "2562047h"} {
		t.Setenv(envTimeout, bad)
		devs, err := openLocal("1")
		for _, d := range devs {
			d.Close()
		}
		if !errors.Is(err, plugin.ErrBadSpec) || !strings.Contains(err.Error(), envTimeout+`="`+bad+`"`) || !strings.Contains(err.Error(), "at most 8760h") {
			t.Errorf("%s=%s: open local:1: %v; want ErrBadSpec naming it and saying at most 8760h", envTimeout, bad, err)
		}
	}
}

// TestTCPItemMalformed: a tcp:// item whose port is no port number (out
// of range, negative, empty, a name) is an error of the item
// (plugin.ErrBadSpec, so that Start fails naming it), before any network
// is looked at; it was an unavailable device, which DEFAULT's policy
// silently replaced with the host (issue 47). A well-formed item with no
// device behind it is still an unavailable device.
func TestTCPItemMalformed(t *testing.T) {
	t.Setenv(envSecret, limitSecret)
	for _, addr := range []string{"127.0.0.1:99999", "127.0.0.1:65536", "127.0.0.1:-1", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:+80", "127.0.0.1:http", "[::1]:70000"} {
		_, err := openTCP(addr)
		if !errors.Is(err, plugin.ErrBadSpec) || !strings.Contains(err.Error(), "tcp://"+addr) || !strings.Contains(err.Error(), "PORT a number from 1 to 65535") {
			t.Errorf("tcp://%s: %v; want ErrBadSpec naming the item and the port range", addr, err)
		}
	}
	ln := listenLoopback(t)
	addr := ln.Addr().String()
	ln.Close() // nothing serves there now
	if _, err := openTCP(addr); err == nil || errors.Is(err, plugin.ErrBadSpec) {
		t.Errorf("tcp://%s, where nothing serves: %v; want an error that is no ErrBadSpec", addr, err)
	}
}

// envTimeout names the device timeout, as the engine reads it.
const envTimeout = "GOFFLOAD_DEVICE_TIMEOUT"

// socketPair is a connected pair of Unix stream sockets, as a local
// device's link has.
func socketPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := stream.SocketPair()
	if err != nil {
		t.Fatal(err)
	}
	var c [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "test-socket")
		c[i], err = net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { c[0].Close(); c[1].Close() })
	return c[0], c[1]
}

// frames encodes ms, one after the other.
func frames(ms ...*proto.Msg) []byte {
	var b []byte
	for _, m := range ms {
		b = proto.AppendFrame(b, m, m.Payload)
	}
	return b
}

// FuzzTCPHandshake feeds a TCP device's handshake (device side, in the mode
// of the input's first byte: odd plain, even TLS) what a host that has not
// proved the secret may send, after the device's preface: it must refuse
// it with an error, never panic or hang, and never let it in. What a host
// sends once in is read by the session's handlers (FuzzSession) through
// the same frame reader, whether the link is plain or TLS.
func FuzzTCPHandshake(f *testing.F) {
	hello := func(plain bool) []byte {
		if plain {
			return append([]byte(prefacePlain), frames(&proto.Msg{Type: proto.TAuth, Text: strings.Repeat("ab", 32) + " " + strings.Repeat("cd", 32)})...)
		}
		return append([]byte(prefaceTLS), clientHello(f)...)
	}
	f.Add(append([]byte{1}, hello(true)...))
	f.Add(append([]byte{0}, hello(false)...))
	f.Add(append([]byte{0}, prefacePlain...))
	f.Add([]byte{0, 0x16, 3, 1, 0xff, 0xff})
	secs := map[bool]*tcpSecurity{}
	for _, plain := range []bool{false, true} {
		s := &tcpSecurity{secret: limitSecret, plain: plain}
		if !plain {
			s.cert, _ = ephemeralCert()
		}
		secs[plain] = s
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		sec := secs[data[0]%2 == 1]
		host, dev := socketPair(t)
		dev.SetDeadline(time.Now().Add(20 * time.Second))
		go func() {
			host.Write(data[1:])
			host.(*net.UnixConn).CloseWrite()
			io.Copy(io.Discard, host)
		}()
		if c, err := sec.deviceHandshake(dev, nil); err == nil {
			t.Fatalf("%x: let in as %T", data, c)
		} else if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%x: the handshake hung", data)
		}
	})
}

// FuzzParseIntro: an introduction from the host, any text with one or two
// descriptors, is accepted only in its two forms, and a refused one closes
// the descriptors it came with.
func FuzzParseIntro(f *testing.F) {
	f.Add([]byte("peer 3"), false)
	f.Add([]byte("peer 3 shm 1"), true)
	f.Add([]byte("peer 3 shm 2"), true)
	f.Add([]byte("peer -1"), false)
	f.Add([]byte("peer 3 shm 0"), false)
	f.Fuzz(func(t *testing.T, text []byte, two bool) {
		var fds []int
		for range map[bool]int{false: 1, true: 2}[two] {
			fd, err := syscall.Open("/dev/null", syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
			if err != nil {
				t.Skip(err)
			}
			fds = append(fds, fd)
		}
		in, err := parseIntro(text, syscall.UnixRights(fds...))
		open := func(fd int) bool {
			_, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0)
			return errno != syscall.EBADF
		}
		if err != nil {
			for _, fd := range fds {
				if open(fd) {
					syscall.Close(fd)
					t.Fatalf("%q refused (%v) but descriptor %d left open", text, err, fd)
				}
			}
			return
		}
		for _, fd := range fds {
			syscall.Close(fd)
		}
		s, ok := strings.CutPrefix(string(text), "peer ")
		num, _, _ := strings.Cut(s, " ")
		n, nerr := strconv.Atoi(num)
		if !ok || nerr != nil || n != in.num || in.num < 0 || (in.shm >= 0) != two || in.fd != fds[0] || (two && (in.shmFD != fds[1] || in.shm > 1)) {
			t.Fatalf("%q with %d descriptors: accepted as %+v", text, len(fds), in)
		}
	})
}

// helloText is a hello frame's text as this process's engine says it.
func helloText(img *plugin.Image) string {
	return fmt.Sprintf("%s %d %s %d %d", proto.Magic, proto.Version, img.Digest, len(img.Kernels), 30*time.Second.Microseconds())
}

var nopK, _ = entries.RegisterKernel("remote.tcp.nop", func() {})
