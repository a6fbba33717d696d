package remote

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/internal/proctest"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/remote/engine"
	"github.com/goffload/offload/plugins/remote/proto"
	"github.com/goffload/offload/plugins/remote/shm"
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

// What the wire and the environment of TCP sessions say, as package
// stream has them: the tests speak to devices byte by byte.
const (
	prefaceTLS   = "goffload tls1.3\n"
	prefacePlain = "goffload plain \n"
	envTLSCert   = "GOFFLOAD_TLS_CERT"
	envTLSKey    = "GOFFLOAD_TLS_KEY"
	envTLSCA     = "GOFFLOAD_TLS_CA"
	failPause    = 200 * time.Millisecond // a failed source's first pause
	failPauseMax = 10 * time.Second       // its longest
)

// prefaceOf is the preface sec's side writes.
func prefaceOf(sec *stream.Security) string {
	if sec.Plain() {
		return prefacePlain
	}
	return prefaceTLS
}

// exchangePreface writes sec's preface on conn and reads the peer's, as
// a side of a TCP session does first (self names the side).
func exchangePreface(sec *stream.Security, conn net.Conn, self string) error {
	if _, err := io.WriteString(conn, prefaceOf(sec)); err != nil {
		return err
	}
	b := make([]byte, len(prefaceTLS))
	if _, err := io.ReadFull(conn, b); err != nil {
		return fmt.Errorf("%s: reading the peer's preface: %w", self, err)
	}
	if string(b) != prefaceOf(sec) {
		return fmt.Errorf("%s: the peer's preface is %q", self, b)
	}
	return nil
}

// readAuth reads one handshake frame, as a side of a plain session does.
func readAuth(r io.Reader) (*proto.Auth, error) {
	var lw [4]byte
	if _, err := io.ReadFull(r, lw[:]); err != nil {
		return nil, err
	}
	n := int(binary.LittleEndian.Uint32(lw[:]))
	if n < proto.HeaderSize || n > proto.HeaderSize+512 {
		return nil, fmt.Errorf("%w: a handshake frame of %d bytes", proto.ErrFrame, n)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, err
	}
	m, err := proto.ParseHeader(body, n)
	if err != nil {
		return nil, err
	}
	f, err := proto.As[proto.Auth](m)
	return &f, err
}

// tlsClient is the TLS side of a host without a PKI on conn: it trusts
// any certificate (the secret's proof authenticates the device).
func tlsClient(conn net.Conn) *tls.Conn {
	return tls.Client(conn, &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true})
}

// tlsServer is the TLS side of a device without a PKI on conn, with a
// fresh self-signed certificate.
func tlsServer(t testing.TB, conn net.Conn) *tls.Conn {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "goffload test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert := tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
	return tls.Server(conn, &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}, SessionTicketsDisabled: true})
}

// loadWithin loads d on another goroutine and returns its error, failing
// the test if Load takes longer than limit (it hung before issue 47).
func loadWithin(t *testing.T, d plugin.Device, limit time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	t0 := time.Now()
	go func() { done <- d.Load(entries.Current(), 0) }()
	select {
	case err := <-done:
		t.Logf("Load returned after %v: %v", time.Since(t0).Round(time.Millisecond), err)
		return err
	case <-time.After(limit):
		t.Fatalf("Load still waits for the device's hello after %v", limit)
		return nil
	}
}

// wantSilentHello checks that err says the device's hello did not come.
func wantSilentHello(t *testing.T, err error, says ...string) {
	t.Helper()
	if !errors.Is(err, ErrSilent) || !strings.Contains(err.Error(), "no hello from the device within 1s (GOFFLOAD_DEVICE_TIMEOUT=1s)") {
		t.Fatalf("Load: %v, want ErrSilent saying no hello came within the device timeout", err)
	}
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("Load: %v, want it to say %q", err, s)
		}
	}
}

// TestLocalStoppedBeforeHello: a local device process stopped before it
// answers the host's hello fails Load after GOFFLOAD_DEVICE_TIMEOUT, and
// is killed; Start waited for ever.
func TestLocalStoppedBeforeHello(t *testing.T) {
	t.Setenv(envTimeout, "1s")
	devs, err := openLocal("1")
	if err != nil {
		t.Fatal(err)
	}
	d := devs[0]
	var pid int
	if _, err := fmt.Sscanf(d.(*engine.Device).Name(), "local device (pid %d)", &pid); err != nil {
		t.Fatalf("no pid in %q: %v", d.(*engine.Device).Name(), err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		syscall.Kill(pid, syscall.SIGCONT)
		d.Close()
	})
	proctest.WaitStopped(t, pid)
	err = loadWithin(t, d, 20*time.Second)
	wantSilentHello(t, err, fmt.Sprintf("local device (pid %d)", pid))
	proctest.WaitGone(t, pid, 10*time.Second)
}

// TestTCPDeviceSilentAfterProof: a tcp:// device that proves the secret
// and then says nothing fails Open after GOFFLOAD_DEVICE_TIMEOUT: the
// host's first question, how many devices the process serves (Serve),
// gets no answer.
func TestTCPDeviceSilentAfterProof(t *testing.T) {
	t.Setenv(envTimeout, "1s")
	t.Setenv(envSecret, limitSecret)
	sec := security(t, false)
	ln := listenLoopback(t)
	defer ln.Close()
	held := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := sec.DeviceHandshake(c, nil, ""); err != nil {
			c.Close()
			return
		}
		held <- c // proved, and silent from now on
	}()
	start := time.Now()
	_, err := openTCP(ln.Addr().String())
	if !errors.Is(err, ErrSilent) || !strings.Contains(err.Error(), "no answer to serve from the device within 1s (GOFFLOAD_DEVICE_TIMEOUT=1s)") || !strings.Contains(err.Error(), "tcp://"+ln.Addr().String()) {
		t.Errorf("Open: %v, want ErrSilent naming the device and saying no answer came within the device timeout", err)
	}
	if time.Since(start) > 20*time.Second {
		t.Errorf("Open took %v", time.Since(start))
	}
	(<-held).Close()
}

// TestTCPHostSilentAfterProof: a TCP device closes a session whose host
// proved the secret and never sent its hello, after the device's
// GOFFLOAD_DEVICE_TIMEOUT; it kept the session for ever.
func TestTCPHostSilentAfterProof(t *testing.T) {
	t.Setenv(envTimeout, "1s")
	t.Setenv(envSecret, limitSecret)
	ln := listenLoopback(t)
	startTCP(t, ln, 5*time.Second, security(t, false))
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	s, err := security(t, false).HostHandshake(c, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Time{})
	t0 := time.Now()
	s.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err = s.Read(make([]byte, 1))
	if errors.Is(err, os.ErrDeadlineExceeded) || time.Since(t0) > 15*time.Second {
		t.Fatalf("the device kept a session without hello for %v: %v", time.Since(t0), err)
	}
	t.Logf("the device ended the session after %v: %v", time.Since(t0).Round(time.Millisecond), err)
	checkServed(t, openHonest(t, ln.Addr().String()))
}

// ShmLinks is the number of shared-memory links this process has mapped,
// for tests that run a kernel in a device process to see how it is linked.
func ShmLinks() int64 { return shm.Links() }

// LocalProcs is the number of local device processes of this process that
// run (the count that says whether the machine is crowded).
func LocalProcs() int64 { return localProcs.Load() }

// LocalLink is what local devices' links go through: shm or socket.
func LocalLink() string { return localLink() }
