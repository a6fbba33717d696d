package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestShmPeers starts this test binary as the raw baselines' peers over a
// shared-memory link, in both roles, and checks what they answer, that they
// exit cleanly at the end of the stream, and that a peer that fails makes
// the host's reads fail instead of waiting on.
func TestShmPeers(t *testing.T) {
	p, err := startShmPeer("echo", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.pingPong(1000); err != nil {
		t.Errorf("echo peer: %v", err)
	}
	if reads, _ := p.r.stats(); reads < 1000 {
		t.Errorf("shared-memory link: %d reads for 1000 echoes", reads)
	}
	if err := p.close(); err != nil {
		t.Errorf("echo peer: %v", err)
	}

	// Messages larger than the rings (2 MiB each way), and batches of other
	// sizes and directions, one after the other.
	const size = 5<<20 + 3
	p, err = startShmPeer("xfer", size)
	if err != nil {
		t.Fatal(err)
	}
	msg := fill(make([]byte, size))
	if err := p.send(msg, 3); err != nil {
		t.Errorf("xfer peer: %v", err)
	}
	msg[size-1]++
	msg[size/2]++
	if err := p.send(msg, 1); err != nil {
		t.Errorf("xfer peer, changed message: %v", err)
	}
	for _, n := range []int{1, 8, 4096, size} {
		if err := p.send(msg[:n], 2); err != nil {
			t.Errorf("xfer peer, %d-byte sink batch: %v", n, err)
		}
		back := make([]byte, n)
		if err := p.fetch(back, msg[:n], 2); err != nil {
			t.Errorf("xfer peer, %d-byte source batch: %v", n, err)
		} else if n == size && !bytes.Equal(back, msg) {
			t.Errorf("xfer peer: the %d bytes fetched differ from those sent", n)
		}
	}
	if err := p.close(); err != nil {
		t.Errorf("xfer peer: %v", err)
	}

	// A batch bigger than the peer's buffer: the peer fails and exits, and
	// the host's read of the answer fails, naming the peer's exit.
	p, err = startShmPeer("xfer", 100)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.fetch(make([]byte, 101), make([]byte, 101), 1) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "peer process") {
			t.Errorf("fetch of 101 bytes from a 100-byte xfer peer: %v, want the peer's failure", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("fetch from a failed xfer peer still waits after 20 s")
	}
	if err := p.close(); err == nil {
		t.Error("xfer peer given a batch of 101-byte messages exited cleanly, want a failure")
	}
}
