package remote

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/remote/engine"
	"github.com/goffload/offload/plugins/remote/stream"
	"github.com/goffload/offload/plugins/remote/transport"
)

// Bad input at the handshake of a protected TCP session: each is refused
// with an error that names the device (host side) or the host (device
// side) and the cause, and the device goes on serving honest hosts.

// refused opens the device at addr and wants an error wrapping want whose
// text names the device and holds every one of says.
func refused(t *testing.T, addr string, want error, says ...string) {
	t.Helper()
	_, err := openTCP(addr)
	if err == nil {
		t.Fatalf("tcp://%s: opened, want an error", addr)
	}
	msg := err.Error()
	if want != nil && !errors.Is(err, want) {
		t.Errorf("got %v, want it to wrap %v", err, want)
	}
	if !strings.Contains(msg, "tcp://"+addr) {
		t.Errorf("got %v, want it to name tcp://%s", err, addr)
	}
	for _, s := range says {
		if !strings.Contains(msg, s) {
			t.Errorf("got %v, want it to say %q", err, s)
		}
	}
}

// logged waits until the device's log has a line with every one of says
// (its handshake goroutine may still be writing it when the host's error
// came back), and checks that no connection is left in the handshake.
func logged(t *testing.T, srv *tcpServer, logs *lockedBuffer, says ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, l := range logs.lines() {
			ok := true
			for _, s := range says {
				ok = ok && strings.Contains(l, s)
			}
			if ok {
				if n := srv.handshaking(); n != 0 {
					t.Errorf("%d connections left in the handshake", n)
				}
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no device log line says %q:\n%s", says, strings.Join(logs.lines(), "\n"))
		}
		time.Sleep(time.Millisecond) // the log is written by another goroutine; no event to wait on
	}
}

// TestTCPSecDowngrade: a host and a device that want different modes (one
// GOFFLOAD_TCP_PLAIN=1, one not) are refused on both sides, each saying
// which side wants what; a relay that rewrites the host's TLS preface into
// a plain one gets the session refused, not downgraded.
func TestTCPSecDowngrade(t *testing.T) {
	t.Setenv(envSecret, limitSecret)
	for _, devPlain := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain-host-tls-device", true: "tls-host-plain-device"}[devPlain], func(t *testing.T) {
			ln := listenLoopback(t)
			srv, logs := startTCP(t, ln, 5*time.Second, security(t, devPlain))
			security(t, !devPlain) // the host's environment
			hostWants, devWants := "TLS 1.3", "plain TCP (GOFFLOAD_TCP_PLAIN=1)"
			if !devPlain {
				hostWants, devWants = devWants, hostWants
			}
			refused(t, ln.Addr().String(), ErrMismatch, "the device wants "+devWants, "the host wants "+hostWants)
			logged(t, srv, logs, "refused host", "the host wants "+hostWants, "the device wants "+devWants)
			security(t, devPlain)
			checkServed(t, openHonest(t, ln.Addr().String()))
		})
	}
	t.Run("rewritten-preface", func(t *testing.T) {
		ln := listenLoopback(t)
		srv, logs := startTCP(t, ln, 5*time.Second, security(t, false))
		r := startRewriter(t, ln.Addr().String(), prefaceTLS, prefacePlain)
		refused(t, r, nil, "TLS handshake")
		logged(t, srv, logs, "refused host", "the host wants plain TCP")
		checkServed(t, openHonest(t, ln.Addr().String()))
	})
}

// startRewriter relays connections to target, replacing the first
// occurrence of from in what the host sends by to.
func startRewriter(t *testing.T, target, from, to string) string {
	t.Helper()
	ln := listenLoopback(t)
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			d, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			wg.Go(func() { defer c.Close(); defer d.Close(); io.Copy(c, d) })
			wg.Go(func() {
				defer c.Close()
				defer d.Close()
				b := make([]byte, len(from))
				if _, err := io.ReadFull(c, b); err != nil {
					return
				}
				if string(b) == from {
					b = []byte(to)
				}
				d.Write(b)
				io.Copy(d, c)
			})
		}
	})
	return ln.Addr().String()
}

// startMITM stands between hosts and the device at target as a man in the
// middle who does not know the secret but terminates TLS on both sides
// (its own ephemeral certificate towards the host) and relays what each
// side says inside, the proofs included.
func startMITM(t *testing.T, target string) string {
	t.Helper()
	ln := listenLoopback(t)
	sec := security(t, false)
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				d, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer d.Close()
				if exchangePreface(sec, c, "device") != nil || exchangePreface(sec, d, "host") != nil {
					return
				}
				hc, dc := tlsServer(t, c), tlsClient(d)
				if hc.Handshake() != nil || dc.Handshake() != nil {
					return
				}
				done := make(chan struct{}, 2)
				go func() { io.Copy(dc, hc); done <- struct{}{} }()
				go func() { io.Copy(hc, dc); done <- struct{}{} }()
				<-done
				c.Close()
				d.Close()
				<-done
			})
		}
	})
	return ln.Addr().String()
}

// TestTCPSecRelayedProof: a man in the middle who terminates TLS on both
// sides and relays the host's proof gets it refused by the device (the
// proof is bound to the host's session, not the relay's), and the host is
// told.
func TestTCPSecRelayedProof(t *testing.T) {
	t.Setenv(envSecret, limitSecret)
	ln := listenLoopback(t)
	srv, logs := startTCP(t, ln, 5*time.Second, security(t, false))
	mitm := startMITM(t, ln.Addr().String())
	refused(t, mitm, ErrAuth, "the device refused the host", "did not prove the shared secret over this TLS session")
	logged(t, srv, logs, "refused host", "did not prove the shared secret")
	checkServed(t, openHonest(t, ln.Addr().String()))
}

// TestTCPSecWrongSecret: a host with another secret is refused inside the
// TLS session, with the device's reason.
func TestTCPSecWrongSecret(t *testing.T) {
	ln := listenLoopback(t)
	srv, logs := startTCP(t, ln, 5*time.Second, security(t, false))
	t.Setenv(envSecret, "another secret, long enough")
	refused(t, ln.Addr().String(), ErrAuth, "the device refused the host", "GOFFLOAD_SECRET differs")
	logged(t, srv, logs, "refused host", "did not prove the shared secret")
	checkServed(t, openHonest(t, ln.Addr().String()))
}

// TestTCPSecStalled: a peer that stops in the middle of the handshake is
// cut off by the deadline on either side, with an error saying so.
func TestTCPSecStalled(t *testing.T) {
	t.Setenv(envSecret, limitSecret)
	t.Run("device-side", func(t *testing.T) {
		// A host that completes TLS and never sends its proof.
		ln := listenLoopback(t)
		srv, logs := startTCP(t, ln, 300*time.Millisecond, security(t, false))
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		sec := security(t, false)
		if err := exchangePreface(sec, c, "host"); err != nil {
			t.Fatal(err)
		}
		tc := tlsClient(c)
		if err := tc.Handshake(); err != nil {
			t.Fatal(err)
		}
		if err := waitClosed(c); err != nil {
			t.Fatal(err)
		}
		logged(t, srv, logs, "refused host", "no handshake within 300ms")
		checkServed(t, openHonest(t, ln.Addr().String()))
	})
	t.Run("host-side", func(t *testing.T) {
		// A device that writes its preface and then nothing.
		defer func(d time.Duration) { hostHandshakeTimeout = d }(hostHandshakeTimeout)
		hostHandshakeTimeout = 300 * time.Millisecond
		ln := listenLoopback(t)
		defer ln.Close()
		got := make(chan net.Conn, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte(prefaceTLS))
			got <- c
		}()
		security(t, false)
		refused(t, ln.Addr().String(), os.ErrDeadlineExceeded, "no handshake within 300ms")
		(<-got).Close()
	})
}

// pki is a CA and files of certificates it signed, for GOFFLOAD_TLS_*.
type pki struct {
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	file string // the CA's PEM file
}

func newPKI(t *testing.T, name string) *pki {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	p := &pki{dir: t.TempDir(), cert: cert, key: key}
	p.file = p.write(t, name+"-ca.pem", "CERTIFICATE", der)
	return p
}

func (p *pki) write(t *testing.T, name, typ string, der []byte) string {
	t.Helper()
	f := filepath.Join(p.dir, name)
	if err := os.WriteFile(f, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// issue makes a certificate for 127.0.0.1 valid until notAfter, and
// returns its file and its key's.
func (p *pki) issue(t *testing.T, name string, notAfter time.Time) (certFile, keyFile string) {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: notAfter,
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.cert, &key.PublicKey, p.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, _ := x509.MarshalPKCS8PrivateKey(key)
	return p.write(t, name+".pem", "CERTIFICATE", der), p.write(t, name+"-key.pem", "PRIVATE KEY", kder)
}

// usePKI sets this process's GOFFLOAD_TLS_* (nothing for empty cert) and
// returns the security they make.
func usePKI(t *testing.T, cert, key, ca string) *stream.Security {
	t.Helper()
	t.Setenv(envPlain, "")
	t.Setenv(envTLSCert, cert)
	t.Setenv(envTLSKey, key)
	t.Setenv(envTLSCA, ca)
	s, err := stream.SecurityFromEnv(limitSecret)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestTCPSecPKI: with GOFFLOAD_TLS_CERT, _KEY and _CA on both sides, each
// side verifies the other's certificate against the CA, besides the
// secret: an expired or foreign certificate on either side, or none, is
// refused with the reason, and a host with a good one is served.
func TestTCPSecPKI(t *testing.T) {
	t.Setenv(envSecret, limitSecret)
	ca, foreign := newPKI(t, "cluster"), newPKI(t, "elsewhere")
	future, past := time.Now().Add(time.Hour), time.Now().Add(-time.Hour)
	devCert, devKey := ca.issue(t, "device", future)
	hostCert, hostKey := ca.issue(t, "host", future)
	expCert, expKey := ca.issue(t, "expired", past)
	forCert, forKey := foreign.issue(t, "foreign", future)

	honest := func(t *testing.T, addr string) {
		usePKI(t, hostCert, hostKey, ca.file)
		checkServed(t, openHonest(t, addr))
	}
	t.Run("host", func(t *testing.T) {
		ln := listenLoopback(t)
		srv, logs := startTCP(t, ln, 5*time.Second, usePKI(t, devCert, devKey, ca.file))
		addr := ln.Addr().String()
		honest(t, addr)

		usePKI(t, expCert, expKey, ca.file)
		refused(t, addr, nil, "TLS handshake", "refused a certificate")
		logged(t, srv, logs, "refused host", "expired")

		// A client certificate not from the CAs the device names is not
		// sent at all.
		usePKI(t, forCert, forKey, ca.file)
		refused(t, addr, nil, "TLS handshake", "refused a certificate")
		logged(t, srv, logs, "refused host", "didn't provide a certificate")

		usePKI(t, "", "", "") // ephemeral: no certificate from the CA
		refused(t, addr, nil, "TLS handshake", "the peer checks certificates")

		honest(t, addr)
	})
	for _, c := range []struct{ name, cert, key, says string }{
		{"device-expired", expCert, expKey, "expired"},
		{"device-foreign", forCert, forKey, "unknown authority"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ln := listenLoopback(t)
			startTCP(t, ln, 5*time.Second, usePKI(t, c.cert, c.key, ca.file))
			usePKI(t, hostCert, hostKey, ca.file)
			refused(t, ln.Addr().String(), nil, "does not verify against GOFFLOAD_TLS_CA", c.says)
		})
	}
}

// loaded loads the kernel table on d.
func loaded(t *testing.T, d plugin.Device) plugin.Device {
	t.Helper()
	if err := d.Load(entries.Current(), 0); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestTCPSecConfig: settings that cannot protect a session are refused at
// Start, saying what to set.
func TestTCPSecConfig(t *testing.T) {
	t.Setenv(envSecret, limitSecret)
	ca := newPKI(t, "cluster")
	cert, key := ca.issue(t, "host", time.Now().Add(time.Hour))
	for _, c := range []struct {
		plain, cert, key, ca string
		says                 string
	}{
		{plain: "yes", says: "GOFFLOAD_TCP_PLAIN=\"yes\": want 1"},
		{plain: "1", cert: cert, key: key, ca: ca.file, says: "uses no certificates"},
		{cert: cert, says: "set all three"},
		{cert: cert, key: key, says: "set all three"},
		{cert: key, key: cert, ca: ca.file, says: "GOFFLOAD_TLS_CERT="},
		{cert: cert, key: key, ca: key, says: "no PEM certificate"},
		{cert: cert, key: key, ca: filepath.Join(ca.dir, "absent.pem"), says: "no such file"},
	} {
		t.Setenv(envPlain, c.plain)
		t.Setenv(envTLSCert, c.cert)
		t.Setenv(envTLSKey, c.key)
		t.Setenv(envTLSCA, c.ca)
		_, err := openTCP("127.0.0.1:1")
		if !errors.Is(err, plugin.ErrBadSpec) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%+v: got %v, want a configuration error saying %q", c, err, c.says)
		}
	}
}

// TestTCPSecEphemeral: without a PKI, sessions are TLS 1.3 and each
// process's certificate is made once; a closed session leaves no goroutine
// behind on either side.
func TestTCPSecEphemeral(t *testing.T) {
	t.Setenv(envSecret, limitSecret)
	ln := listenLoopback(t)
	startTCP(t, ln, 5*time.Second, security(t, false))
	before := runtime.NumGoroutine()
	t.Setenv(envSecret, limitSecret)
	devs, err := openTCP(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	checkServed(t, loaded(t, devs[0]))
	devs[0].Close()
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > before; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) { // no event tells that a goroutine is gone
			t.Fatalf("%d goroutines after a closed session, %d before", runtime.NumGoroutine(), before)
		}
	}
	d := openHonest(t, ln.Addr().String())
	checkServed(t, d)
	st, ok := d.(*engine.Device).Transport().(interface{ ConnectionState() tls.ConnectionState })
	if !ok {
		t.Fatalf("the link's transport is a %T, want TLS", d.(*engine.Device).Transport())
	}
	if v := st.ConnectionState().Version; v != tls.VersionTLS13 {
		t.Errorf("TLS version %x, want 1.3", v)
	}
}

// TestTLSLinkBusyBothWays: over a protected session, 8 MiB transfers
// stream both ways while small operations go back and forth between them
// (answers that the device's reader writes without blocking, holding back
// what of a TLS record the socket has no room for): every byte arrives
// where it belongs and nothing hangs.
func TestTLSLinkBusyBothWays(t *testing.T) {
	t.Setenv(envSecret, limitSecret)
	ln := listenLoopback(t)
	startTCP(t, ln, 5*time.Second, security(t, false))
	d := openHonest(t, ln.Addr().String())
	if _, ok := d.(*engine.Device).Transport().(transport.Holder); !ok {
		t.Fatalf("not a TLS link: %T", d.(*engine.Device).Transport())
	}
	const big = 8 << 20
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Go(func() {
		p, err := d.Alloc(big)
		if err != nil {
			errs <- err
			return
		}
		q, _ := d.NewQueue()
		defer q.Close()
		in, out := make([]byte, big), make([]byte, big)
		for round := range 3 {
			for i := range in {
				in[i] = byte(i*7 + round)
			}
			q.Submit(p, in)
			q.Retrieve(out, p)
			if err := q.Synchronize(); err != nil {
				errs <- err
				return
			}
			if !bytes.Equal(in, out) {
				t.Errorf("round %d: 8 MiB came back different", round)
			}
		}
	})
	wg.Go(func() {
		p, err := d.Alloc(64)
		if err != nil {
			errs <- err
			return
		}
		q, _ := d.NewQueue()
		defer q.Close()
		for i := range 500 {
			in, out := bytes.Repeat([]byte{byte(i)}, 64), make([]byte, 64)
			q.Submit(p, in)
			q.Launch(nopK, []plugin.Arg{})
			q.Retrieve(out, p)
			if err := q.Synchronize(); err != nil {
				errs <- err
				return
			}
			if !bytes.Equal(in, out) {
				t.Errorf("small round trip %d: %v", i, out[:4])
				return
			}
		}
	})
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("transfers over a TLS link hang")
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
