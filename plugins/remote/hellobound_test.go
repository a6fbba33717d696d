package remote

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/internal/proctest"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/remote/engine"
)

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
// and then says nothing fails Load after GOFFLOAD_DEVICE_TIMEOUT.
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
		if _, err := sec.deviceHandshake(c, nil); err != nil {
			c.Close()
			return
		}
		held <- c // proved, and silent from now on
	}()
	devs, err := openTCP(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer devs[0].Close()
	err = loadWithin(t, devs[0], 20*time.Second)
	wantSilentHello(t, err, "tcp://"+ln.Addr().String())
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
	s, err := security(t, false).hostHandshake(c, ln.Addr().String())
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
