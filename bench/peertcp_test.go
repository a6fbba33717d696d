package main

import (
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// startTCPDevice starts this test binary as a TCP device on 127.0.0.1 (it
// needs GOFFLOAD_SECRET set), which is killed when the test ends, and
// returns its address.
func startTCPDevice(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	addr, stop, err := spawnTCPDevice(exe)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return addr
}

// startPeerServer serves raw peers on 127.0.0.1 in this process until the
// test ends and returns the address.
func startPeerServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- servePeersTCP(ln, io.Discard) }()
	t.Cleanup(func() {
		ln.Close()
		if err := <-done; err != nil {
			t.Errorf("servePeersTCP: %v", err)
		}
	})
	return ln.Addr().String()
}

// TestTCPPeers: peers of a peer server answer as a child peer does, say
// so when they fail, and refuse what they cannot serve.
func TestTCPPeers(t *testing.T) {
	env := &Env{Peer: startPeerServer(t)}
	for _, sp := range []spin{{}, {budget: 50 * time.Microsecond}} {
		p, err := openPeer(env, "echo", sp, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.pingPong(100); err != nil {
			t.Errorf("echo peer, spin %v: %v", sp, err)
		}
		if err := p.close(); err != nil {
			t.Errorf("echo peer, spin %v: %v", sp, err)
		}
		const size = 1<<20 + 3
		msg := fill(make([]byte, size))
		err = withPeer(env, "xfer", sp, size, func(p *peer) error {
			for _, n := range []int{1, 4096, size} {
				if err := p.send(msg[:n], 2); err != nil {
					return err
				}
				if err := p.fetch(make([]byte, n), msg[:n], 2); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Errorf("xfer peer, spin %v: %v", sp, err)
		}
	}
	// A message cut short fails the peer, which says so at the close.
	p, err := openPeer(env, "xfer", spin{}, 100)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.batch(xferSink, 100, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := p.w.Write(make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	if err := p.close(); err == nil || !strings.Contains(err.Error(), "error: ") {
		t.Errorf("xfer peer given 10 of 100 bytes: close = %v, want the peer's error", err)
	}
	// A batch larger than the largest message, and a peer too large.
	if _, err := openPeer(env, "xfer", spin{}, tcpPeerMaxSize+1); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Errorf("xfer peer of %d bytes: %v, want a refusal", tcpPeerMaxSize+1, err)
	}
	if _, err := openPeer(env, "nosuch", spin{}, 0); err == nil {
		t.Error("a peer of role nosuch: no error")
	}
}
