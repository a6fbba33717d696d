package remote

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
)

// TestGuessLimiter drives the failed-proof limiter without sockets: a
// failed proof pauses its source's next ones, doubling up to the most,
// other sources are not paused, a proof forgets the failures, and so does
// a long quiet time; the sources remembered are bounded.
func TestGuessLimiter(t *testing.T) {
	g := newGuessLimiter()
	t0 := time.Unix(1000, 0)
	if w := g.allow("10.0.0.1", t0); w != 0 {
		t.Fatalf("a new source waits %v", w)
	}
	want := failPause
	now := t0
	for i := range 12 {
		if p := g.failed("10.0.0.1", now); p != want {
			t.Fatalf("failure %d: pause %v, want %v", i+1, p, want)
		}
		if w := g.allow("10.0.0.1", now.Add(want/2)); w != want/2 {
			t.Fatalf("failure %d: halfway through the pause, waits %v, want %v", i+1, w, want/2)
		}
		if w := g.allow("10.0.0.2", now); w != 0 {
			t.Fatalf("another source waits %v", w)
		}
		now = now.Add(want)
		if w := g.allow("10.0.0.1", now); w != 0 {
			t.Fatalf("failure %d: after the pause, waits %v", i+1, w)
		}
		want = min(2*want, failPauseMax)
	}
	if want != failPauseMax {
		t.Fatalf("the pause stopped doubling at %v, want %v", want, failPauseMax)
	}
	g.proved("10.0.0.1")
	if p := g.failed("10.0.0.1", now); p != failPause {
		t.Fatalf("after a proof, a failure pauses %v, want %v", p, failPause)
	}
	g.failed("10.0.0.1", now)
	if p := g.failed("10.0.0.1", now.Add(failForget)); p != failPause {
		t.Fatalf("after %v quiet, a failure pauses %v, want %v", failForget, p, failPause)
	}
	for i := range 2 * maxFailSources {
		g.failed(fmt.Sprintf("src%d", i), now.Add(time.Duration(i)))
	}
	if n := len(g.src); n > maxFailSources {
		t.Fatalf("%d sources remembered, want at most %d", n, maxFailSources)
	}
	if w := g.allow(fmt.Sprintf("src%d", 2*maxFailSources-1), now); w == 0 {
		t.Fatal("the latest source's failure was forgotten")
	}
}

// TestSecretTooShort: a secret shorter than 16 bytes is refused by a host
// opening a tcp:// device (ErrBadSpec: Start fails) and by a TCP device
// starting, saying how to make one, unless GOFFLOAD_WEAK_SECRET=1.
func TestSecretTooShort(t *testing.T) {
	ln := listenLoopback(t)
	addr := ln.Addr().String()
	ln.Close() // nothing serves there
	t.Setenv(envWeakSecret, "")
	for _, secret := range []string{"x", "s3cret", "fifteen bytes!!"} {
		t.Setenv(envSecret, secret)
		_, err := openTCP(addr)
		if !errors.Is(err, plugin.ErrBadSpec) || !strings.Contains(err.Error(), "openssl rand -hex 32") || !strings.Contains(err.Error(), envWeakSecret+"=1") || !strings.Contains(err.Error(), fmt.Sprintf("%d bytes, shorter than 16", len(secret))) {
			t.Errorf("host, secret %q: %v; want ErrBadSpec saying how to make one and how to opt out", secret, err)
		}
		t.Setenv(envRole, "device")
		t.Setenv(envFD, "")
		t.Setenv(envListen, "127.0.0.1:0")
		if err := serve(entries.Current()); err == nil || !strings.Contains(err.Error(), "openssl rand -hex 32") {
			t.Errorf("device, secret %q: %v; want a refusal saying how to make one", secret, err)
		}
		t.Setenv(envWeakSecret, "1")
		if _, err := openTCP(addr); err == nil || errors.Is(err, plugin.ErrBadSpec) {
			t.Errorf("host, secret %q with %s=1: %v; want it taken (and the device unavailable)", secret, envWeakSecret, err)
		}
		t.Setenv(envWeakSecret, "")
	}
	t.Setenv(envSecret, "sixteen bytes!!!")
	if _, err := openTCP(addr); err == nil || errors.Is(err, plugin.ErrBadSpec) {
		t.Errorf("a secret of 16 bytes: %v; want it taken (and the device unavailable)", err)
	}
}

// TestHandshakeSlotsFair drives the handshake slots without sockets: one
// address opening connections without end holds at most its share and
// evicts only its own, the honest addresses keep theirs; with every slot
// taken by addresses of one connection each, the oldest goes first.
func TestHandshakeSlotsFair(t *testing.T) {
	s := newHandshakeSlots(64, 8)
	var honest []*handshake
	for i := range 20 {
		h := &handshake{src: fmt.Sprintf("10.0.1.%d", i)}
		if _, old := s.admit(h); old != nil {
			t.Fatalf("an honest host was admitted by evicting %s", old.src)
		}
		honest = append(honest, h)
	}
	for i := range 1000 {
		_, old := s.admit(&handshake{src: "10.6.6.6"})
		if old != nil && old.src != "10.6.6.6" {
			t.Fatalf("flood connection %d evicted %s's", i, old.src)
		}
	}
	if n := s.bySrc["10.6.6.6"]; n != 8 {
		t.Errorf("the flooder holds %d slots, want 8", n)
	}
	for _, h := range honest {
		if h.evicted {
			t.Fatalf("%s was evicted by the flood", h.src)
		}
	}
	// 36 more addresses fill the 64 slots; newcomers then evict the
	// flooder's down to one, then the oldest of those that hold one each.
	for i := range 36 {
		if _, old := s.admit(&handshake{src: fmt.Sprintf("10.0.2.%d", i)}); old != nil {
			t.Fatalf("address %d of 36 evicted %s, with %d slots taken", i, old.src, s.len())
		}
	}
	for i := range 7 {
		if _, old := s.admit(&handshake{src: fmt.Sprintf("10.0.3.%d", i)}); old == nil || old.src != "10.6.6.6" {
			t.Fatalf("with every slot taken, newcomer %d evicted %v, want the flooder's", i, old)
		}
	}
	if _, old := s.admit(&handshake{src: "10.0.4.1"}); old != honest[0] {
		t.Fatalf("with every address holding one, the newcomer evicted %v, want the oldest (%s)", old, honest[0].src)
	}
	if s.len() != 64 {
		t.Fatalf("%d in the handshake, want 64", s.len())
	}
	for e := s.all.Front(); e != nil; {
		next := e.Next()
		if !s.leave(e) {
			t.Fatal("a handshake in the list counts as evicted")
		}
		e = next
	}
	if s.len() != 0 || len(s.bySrc) != 0 {
		t.Fatalf("after every handshake left: %d in the list, %d addresses counted", s.len(), len(s.bySrc))
	}
}
