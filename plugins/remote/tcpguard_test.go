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
