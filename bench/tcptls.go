package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"time"

	"github.com/goffload/offload"
	"github.com/goffload/offload/plugins/remote/transport"
)

// Suite tcp-tls (issue 33): what protecting a tcp:// session costs. Two
// TCP device processes of this executable on 127.0.0.1, one serving
// protected sessions (TLS 1.3, the default) and one plain ones
// (GOFFLOAD_TCP_PLAIN=1), and raw TLS 1.3 peers: a child process of this
// executable at the other end of a loopback TCP connection, both sides
// speaking crypto/tls as the transport does (TLS 1.3, ephemeral
// certificates, full-size records from the start) and reading as its
// links do (transport.SpinReader beneath the TLS layer).
//
//   - tcp_tls.launch_vs_tls: an empty kernel's synchronous launch over the
//     protected session vs an 8-byte ping-pong over raw TLS (goal ≤ 1.3).
//   - tcp_tls.submit_64MiB_vs_tls, tcp_tls.retrieve_64MiB_vs_tls: a
//     synchronous 64 MiB omp_target_memcpy each way vs the same bytes over
//     raw TLS to an xfer peer (goal: 0.85× its speed or better, a ratio ≤
//     1.18).
//   - tcp_tls.launch_vs_plain, tcp_tls.submit_64MiB_vs_plain,
//     tcp_tls.retrieve_64MiB_vs_plain: the same over the protected session
//     vs over a plain one, the cost of safety. A host opens all its tcp://
//     devices in one mode (GOFFLOAD_TCP_PLAIN is the process's), so these
//     are measured in two runtimes one after the other, twice in turn, not
//     in alternating rounds: noisier than the others.
//   - tcp_tls.plain_launch_vs_tcp: the launch over the plain session vs an
//     8-byte ping-pong over raw TCP: what the engine adds to a round trip,
//     TLS aside, for comparison with tcp_tls.launch_vs_tls.
//   - tcp_tls.raw_tls_vs_tcp_pingpong: raw TLS ping-pong vs a raw TCP one,
//     both over loopback, what TLS itself costs a round trip here.

func init() {
	register("tcp-tls", Suite{Devices: "host:1", Run: runTCPTLS})
}

// envPeerTLS makes a peer speak TLS (the server's side) over its inherited
// connection.
const envPeerTLS = "GOFFLOAD_BENCH_TLS"

// benchTLSConfig is the TLS configuration of the raw baselines: the
// transport's (TLS 1.3, full records from the start), with an ephemeral
// certificate the client does not check.
func benchTLSConfig() (*tls.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bench"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS13, DynamicRecordSizingDisabled: true, InsecureSkipVerify: true,
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
	}, nil
}

// spinUnder is a connection under a TLS session whose reads wait as a
// link's do.
type spinUnder struct {
	net.Conn
	r io.Reader
}

func (s spinUnder) Read(p []byte) (int, error) { return s.r.Read(p) }

// serveTLSPeer serves as a peer in role over a TLS session on conn (the
// server's side).
func serveTLSPeer(conn net.Conn, role string, sp spin, size int) error {
	cfg, err := benchTLSConfig()
	if err != nil {
		return err
	}
	tc := tls.Server(spinUnder{conn, transport.SpinReader(conn, sp.budget)}, cfg)
	if err := tc.Handshake(); err != nil {
		return fmt.Errorf("TLS handshake: %w", err)
	}
	defer tc.Close()
	return servePeerStream(tc, &sockReader{r: tc}, role, size)
}

// loopbackPair connects two TCP sockets over loopback: conn, ours, and
// the other end as a file for a child process to inherit.
func loopbackPair() (conn net.Conn, theirs *os.File, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	defer ln.Close()
	if conn, err = net.Dial("tcp", ln.Addr().String()); err != nil {
		return nil, nil, err
	}
	acc, err := ln.Accept()
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	theirs, err = acc.(*net.TCPConn).File()
	acc.Close()
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, theirs, nil
}

// startTLSPeer starts this executable as a peer in role at the other end
// of a loopback TCP connection, over TLS, both sides reading as sp says
// beneath the TLS layer; size is an xfer peer's largest message.
func startTLSPeer(role string, sp spin, size int) (*peer, error) {
	conn, theirs, err := loopbackPair()
	if err != nil {
		return nil, err
	}
	defer theirs.Close()
	cfg, err := benchTLSConfig()
	if err != nil {
		conn.Close()
		return nil, err
	}
	tc := tls.Client(spinUnder{conn, transport.SpinReader(conn, sp.budget)}, cfg)
	p := &peer{w: tc, r: &sockReader{r: tc}, conn: tc}
	if err := p.start(role, size, theirs, envPeerSpin+"="+sp.String(), envPeerTLS+"=1"); err != nil {
		conn.Close()
		return nil, err
	}
	if err := tc.Handshake(); err != nil {
		p.close()
		return nil, fmt.Errorf("TLS handshake with the %s peer: %w", role, err)
	}
	return p, nil
}

// startTCPPeer is startTLSPeer without TLS.
func startTCPPeer(role string, sp spin, size int) (*peer, error) {
	conn, theirs, err := loopbackPair()
	if err != nil {
		return nil, err
	}
	defer theirs.Close()
	r, _ := newSockReader(conn, sp)
	p := &peer{w: conn, r: r, conn: conn}
	if err := p.start(role, size, theirs, envPeerSpin+"="+sp.String()); err != nil {
		conn.Close()
		return nil, err
	}
	return p, nil
}

// tlsFigures are what one runtime's tcp:// device measures.
type tlsFigures struct{ launch, submit, retrieve float64 }

// runTCPTLS runs suite tcp-tls.
func runTCPTLS(env *Env) error {
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	secret, restore, err := useFreshSecret()
	if err != nil {
		return err
	}
	defer restore()
	tlsAddr, stop, err := spawnTCPDevice(exe, "GOFFLOAD_SECRET="+secret, "GOFFLOAD_TCP_PLAIN=")
	if err != nil {
		return err
	}
	defer stop()
	plainAddr, stopPlain, err := spawnTCPDevice(exe, "GOFFLOAD_SECRET="+secret, "GOFFLOAD_TCP_PLAIN=1")
	if err != nil {
		return err
	}
	defer stopPlain()
	back := suiteDevices(env, "host:1")
	sp := spin{budget: transport.SpinBudget()}
	env.Comment("tcp-tls: TCP devices on 127.0.0.1 (protected: %s; plain, GOFFLOAD_TCP_PLAIN=1: %s); raw baselines: a child process of this executable over loopback TCP, TLS 1.3 (crypto/tls, ephemeral certificates, full records) or plain, reads polling %v beneath TLS as the transport's", tlsAddr, plainAddr, sp.budget)

	src := fill(make([]byte, size64MiB))
	dst := make([]byte, size64MiB)
	var protected, plain []tlsFigures
	// one measures the runtime's device 0 and, the first time, compares
	// its launch with raw TLS's ping-pong (protected) or raw TCP's (plain)
	// and its copies with raw TLS's.
	one := func(vsRaw, plain bool) (f tlsFigures, err error) {
		dev := offload.On(0)
		region := func(n int) error {
			for range n {
				if err := dev.Run(benchEmpty); err != nil {
					return err
				}
			}
			return nil
		}
		d, err := dev.Alloc(size64MiB)
		if err != nil {
			return f, err
		}
		defer offload.Free(d)
		submit := memcpyTo(d, src)(size64MiB)
		retrieve := memcpyFrom(dst, d, src, "tcp_tls.retrieve_")(size64MiB)
		for _, w := range []func(int) error{region, submit, retrieve} { // warm up
			if err := w(1); err != nil {
				return f, err
			}
		}
		// launchVs measures the launch against an 8-byte ping-pong with
		// the echo peer that start makes, reported as metric.
		launchVs := func(start func(string, spin, int) (*peer, error), metric, note string) error {
			echo, err := start("echo", sp, 0)
			return usePeer(echo, err, func(p *peer) error {
				if err := p.pingPong(100); err != nil {
					return err
				}
				t, b, err := env.Compare(region, p.pingPong)
				if err != nil {
					return err
				}
				f.launch = t
				env.Report(Result{Metric: metric, Goffload: t, Baseline: b, Note: note})
				return nil
			})
		}
		if vsRaw && plain {
			if err := launchVs(startTCPPeer, "tcp_tls.plain_launch_vs_tcp",
				"empty kernel, synchronous, plain tcp:// session (GOFFLOAD_TCP_PLAIN=1) vs 8-byte ping-pong over raw TCP on loopback: the engine's part of a launch, TLS aside"); err != nil {
				return f, err
			}
		}
		if !vsRaw || plain {
			if !vsRaw {
				if f.launch, err = env.Measure(region); err != nil {
					return f, err
				}
			}
			if f.submit, err = env.Measure(submit); err != nil {
				return f, err
			}
			f.retrieve, err = env.Measure(retrieve)
			return f, err
		}
		if err := launchVs(startTLSPeer, "tcp_tls.launch_vs_tls",
			"empty kernel, synchronous, protected tcp:// session vs 8-byte ping-pong over raw TLS 1.3 on loopback (goal ≤ 1.3)"); err != nil {
			return f, err
		}
		xfer, err := startTLSPeer("xfer", sp, size64MiB)
		err = usePeer(xfer, err, func(p *peer) error {
			send := func(n int) error { return p.send(src, n) }
			fetch := func(n int) error { return p.fetch(dst, src, n) }
			if err := send(1); err != nil {
				return err
			}
			if err := fetch(1); err != nil {
				return err
			}
			t, b, err := env.Compare(submit, send)
			if err != nil {
				return err
			}
			f.submit = t
			env.Report(Result{Metric: "tcp_tls.submit_64MiB_vs_tls", Goffload: t, Baseline: b, Bytes: size64MiB,
				Note: fmt.Sprintf("host→device, protected session vs raw TLS 1.3: %s vs %s (goal ≤ 1.18: 0.85× raw TLS's speed)", gbps(size64MiB, t), gbps(size64MiB, b))})
			t, b, err = env.Compare(retrieve, fetch)
			if err != nil {
				return err
			}
			f.retrieve = t
			env.Report(Result{Metric: "tcp_tls.retrieve_64MiB_vs_tls", Goffload: t, Baseline: b, Bytes: size64MiB,
				Note: fmt.Sprintf("device→host, protected session vs raw TLS 1.3: %s vs %s (goal ≤ 1.18: 0.85× raw TLS's speed)", gbps(size64MiB, t), gbps(size64MiB, b))})
			return nil
		})
		return f, err
	}
	for round := range 2 {
		restore := setEnv(map[string]string{"GOFFLOAD_TCP_PLAIN": ""})
		err := withDevices("tcp://"+tlsAddr, back, func() error {
			f, err := one(round == 0, false)
			protected = append(protected, f)
			return err
		})
		restore()
		if err != nil {
			return err
		}
		restore = setEnv(map[string]string{"GOFFLOAD_TCP_PLAIN": "1"})
		err = withDevices("tcp://"+plainAddr, back, func() error {
			f, err := one(round == 0, true)
			plain = append(plain, f)
			return err
		})
		restore()
		if err != nil {
			return err
		}
	}
	mean := func(fs []tlsFigures, g func(tlsFigures) float64) float64 {
		s := 0.0
		for _, f := range fs {
			s += g(f)
		}
		return s / float64(len(fs))
	}
	for _, m := range []struct {
		name  string
		g     func(tlsFigures) float64
		bytes int64
	}{
		{"launch", func(f tlsFigures) float64 { return f.launch }, 0},
		{"submit_64MiB", func(f tlsFigures) float64 { return f.submit }, size64MiB},
		{"retrieve_64MiB", func(f tlsFigures) float64 { return f.retrieve }, size64MiB},
	} {
		t, b := mean(protected, m.g), mean(plain, m.g)
		note := "protected (TLS 1.3) vs plain (GOFFLOAD_TCP_PLAIN=1) tcp:// session, two runtimes in turn, twice each: the cost of safety"
		if m.bytes > 0 {
			note += fmt.Sprintf("; %s vs %s", gbps(m.bytes, t), gbps(m.bytes, b))
		}
		env.Report(Result{Metric: "tcp_tls." + m.name + "_vs_plain", Goffload: t, Baseline: b, Bytes: m.bytes, Note: note})
	}
	// What TLS itself costs a round trip on loopback.
	tp, err := startTLSPeer("echo", sp, 0)
	return usePeer(tp, err, func(tp *peer) error {
		pp, err := startTCPPeer("echo", sp, 0)
		return usePeer(pp, err, func(pp *peer) error {
			for _, p := range []*peer{tp, pp} {
				if err := p.pingPong(100); err != nil {
					return err
				}
			}
			t, b, err := env.Compare(tp.pingPong, pp.pingPong)
			if err != nil {
				return err
			}
			env.Report(Result{Metric: "tcp_tls.raw_tls_vs_tcp_pingpong", Goffload: t, Baseline: b,
				Note: "not a goffload figure: 8-byte ping-pong over raw TLS 1.3 vs over raw TCP, loopback, reads polling as the transport's"})
			return nil
		})
	})
}
