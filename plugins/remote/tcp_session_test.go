package remote_test

import (
	"bytes"
	"errors"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/plugintest"
)

// A relay stands between a host and a TCP device, as anyone on the path
// can: it forwards every connection to the device, both ways, and when
// armed it alters the next chunk of at least tamperMin bytes that it
// forwards in one direction, once: it flips one bit of the chunk's last
// byte, or forwards the first half of the chunk and cuts both connections
// (a truncated record).
type relay struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	armed string // "" (forward untouched), "flip" or "cut"
	toDev bool   // alter host→device bytes, else device→host
	hits  int    // chunks altered
}

// tamperData is what the test's transfers carry.
var tamperData = bytes.Repeat([]byte("0123456789abcdef"), 256) // 4 KiB

// tamperMin is the smallest chunk the relay alters: the data of the test's
// transfers, not a heartbeat or an answer.
const tamperMin = 1024

func startRelay(t *testing.T, target string) *relay {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &relay{ln: ln, target: target}
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
			wg.Go(func() { r.pipe(d, c, true) })
			wg.Go(func() { r.pipe(c, d, false) })
		}
	})
	return r
}

func (r *relay) addr() string { return r.ln.Addr().String() }

func (r *relay) arm(mode string, toDev bool) {
	r.mu.Lock()
	r.armed, r.toDev = mode, toDev
	r.mu.Unlock()
}

// pipe copies from src to dst (toDev: host→device) until either ends, and
// then closes both.
func (r *relay) pipe(dst, src net.Conn, toDev bool) {
	defer dst.Close()
	defer src.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			r.mu.Lock()
			mode := ""
			if r.armed != "" && r.toDev == toDev && n >= tamperMin {
				mode, r.armed = r.armed, ""
				r.hits++
			}
			r.mu.Unlock()
			switch mode {
			case "flip":
				// Where it can read the data (a plain session), the
				// relay flips a bit of the data itself; else one of the
				// chunk's last byte.
				at := n - 1
				if i := bytes.Index(chunk, tamperData[:32]); i >= 0 {
					at = i + 5
				}
				chunk[at] ^= 0x10
			case "cut":
				dst.Write(chunk[:n/2])
				return
			}
			if _, werr := dst.Write(chunk); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// openTCPDevice opens and loads the TCP device at addr.
func openTCPDevice(t *testing.T, addr string) (plugin.Device, error) {
	t.Helper()
	k, _ := plugin.LookupKind("tcp")
	devs, err := k.Open(addr)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { devs[0].Close() })
	if err := devs[0].Load(entries.Current(), 0); err != nil {
		return nil, err
	}
	return devs[0], nil
}

// TestTCPTamper: a relay on the path flips one bit of a transfer's bytes,
// either way, or cuts the connection in the middle of them. Each must be an
// error that names the device and says what happened — never a wrong
// result — and the device serves other hosts on.
func TestTCPTamper(t *testing.T) {
	const secret = "tamper-s3cret-0123456789"
	addr, _ := startTCPDevice(t, secret)
	t.Setenv("GOFFLOAD_SECRET", secret)
	for _, c := range []struct {
		name  string
		mode  string
		toDev bool
		cause string // in the error, besides the device's name
	}{
		{"flip-to-device", "flip", true, "altered"},
		{"flip-to-host", "flip", false, "altered"},
		{"cut-to-device", "cut", true, ""},
		{"cut-to-host", "cut", false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := startRelay(t, addr)
			d, err := openTCPDevice(t, r.addr())
			if err != nil {
				t.Fatal(err)
			}
			in := tamperData
			p, err := d.Alloc(int64(len(in)))
			if err != nil {
				t.Fatal(err)
			}
			q, _ := d.NewQueue()
			if !c.toDev { // put the data in place first, untouched
				q.Submit(p, in)
				if err := q.Synchronize(); err != nil {
					t.Fatal(err)
				}
			}
			r.arm(c.mode, c.toDev)
			out := make([]byte, len(in))
			if c.toDev {
				q.Submit(p, in)
			}
			q.Retrieve(out, p)
			err = q.Synchronize()
			r.mu.Lock()
			hits := r.hits
			r.mu.Unlock()
			if hits != 1 {
				t.Fatalf("the relay altered %d chunks, want 1 (err %v)", hits, err)
			}
			switch {
			case err == nil && !bytes.Equal(in, out):
				t.Fatalf("%s: a wrong result and no error", c.name)
			case err == nil:
				t.Fatalf("%s: no error", c.name)
			}
			msg := err.Error()
			t.Logf("%s: %v", c.name, err)
			if !errors.Is(err, plugin.ErrDeviceLost) || !strings.Contains(msg, "tcp://"+r.addr()) || !strings.Contains(msg, c.cause) {
				t.Errorf("got %v; want ErrDeviceLost naming tcp://%s and saying %q", err, r.addr(), c.cause)
			}
			// The device serves others on, and this one is gone for good.
			other, err := openTCPDevice(t, addr)
			if err != nil {
				t.Fatal(err)
			}
			checkAlive(t, other)
			if _, err := d.Alloc(8); err == nil {
				t.Error("the altered session went on")
			}
		})
	}
}

// TestTCPConformance: the conformance suite over two protected sessions
// with one TCP device process, and over two plain ones.
func TestTCPConformance(t *testing.T) {
	for _, plain := range []string{"", "1"} {
		t.Run(map[string]string{"": "tls", "1": "plain"}[plain], func(t *testing.T) {
			const secret = "conformance-s3cret-0123"
			t.Setenv("GOFFLOAD_TCP_PLAIN", plain)
			addr, _ := startTCPDevice(t, secret)
			t.Setenv("GOFFLOAD_SECRET", secret)
			plugintest.Run(t, func(t *testing.T) []plugin.Device {
				k, _ := plugin.LookupKind("tcp")
				var devs []plugin.Device
				for range 2 {
					d, err := k.Open(addr)
					if err != nil {
						t.Fatal(err)
					}
					devs = append(devs, d...)
				}
				return devs
			})
		})
	}
}

// TestTCPDeviceStoppedMidTransfer stops (SIGSTOP) a TCP device process
// while 64 MiB stream to it, and while they stream back, over a protected
// session: the copy fails with the device's silence after
// GOFFLOAD_DEVICE_TIMEOUT (a TLS write waiting for room that never comes,
// a read waiting inside a record), and nothing hangs.
func TestTCPDeviceStoppedMidTransfer(t *testing.T) {
	const secret = "stopped-s3cret-0123456789"
	buf := make([]byte, 64<<20)
	for _, dir := range []string{"submit", "retrieve"} {
		t.Run(dir, func(t *testing.T) {
			t.Setenv("GOFFLOAD_DEVICE_TIMEOUT", "1s")
			addr, _ := startTCPDevice(t, secret)
			t.Setenv("GOFFLOAD_SECRET", secret)
			d, err := openTCPDevice(t, addr)
			if err != nil {
				t.Fatal(err)
			}
			p, err := d.Alloc(int64(len(buf)))
			if err != nil {
				t.Fatal(err)
			}
			q, _ := d.NewQueue()
			if dir == "submit" {
				q.Submit(p, buf)
			} else {
				q.Retrieve(buf, p)
			}
			pid := d.Info().PID
			syscall.Kill(pid, syscall.SIGSTOP)
			defer syscall.Kill(pid, syscall.SIGCONT)
			done := make(chan error, 1)
			go func() { done <- q.Synchronize() }()
			select {
			case err = <-done:
			case <-time.After(time.Minute):
				t.Fatal("a copy to a stopped TCP device hangs")
			}
			if err == nil { // done before the stop landed
				q.Launch(nopK, nil)
				err = q.Synchronize()
			}
			if !errors.Is(err, plugin.ErrDeviceLost) || !strings.Contains(err.Error(), "nothing heard") || !strings.Contains(err.Error(), "tcp://"+addr) {
				t.Fatalf("after SIGSTOP: %v, want ErrDeviceLost for the silence, naming tcp://%s", err, addr)
			}
		})
	}
}

// TestTCPIdleDeviceLongerTimeout: a host whose GOFFLOAD_DEVICE_TIMEOUT is
// shorter than its tcp:// device's keeps the device through a long idle
// spell. Each side pings an idle link by its own timeout (once a second at
// the default), so the device, told the host's timeout at hello, pings
// often enough for it; before, the host lost a healthy idle device (found
// by cutting a link in the testbed: the other device, idle while the lost
// one's work was redone, was lost too).
func TestTCPIdleDeviceLongerTimeout(t *testing.T) {
	const secret = "idle-s3cret-0123456789"
	t.Setenv("GOFFLOAD_DEVICE_TIMEOUT", "") // the default: 30s, a ping a second
	addr, _ := startTCPDevice(t, secret)
	const host = 500 * time.Millisecond
	t.Setenv("GOFFLOAD_DEVICE_TIMEOUT", host.String())
	t.Setenv("GOFFLOAD_SECRET", secret)
	d, err := openTCPDevice(t, addr)
	if err != nil {
		t.Fatal(err)
	}
	// The link idles for four of the host's timeouts: only the two
	// heartbeats cross it. (Idle time is what is tested: a sleep.)
	time.Sleep(4 * host)
	q, err := d.NewQueue()
	if err != nil {
		t.Fatalf("after %v idle (host timeout %v, device's the default): %v", 4*host, host, err)
	}
	q.Launch(nopK, nil)
	if err := q.Synchronize(); err != nil {
		t.Fatalf("after %v idle (host timeout %v, device's the default): %v", 4*host, host, err)
	}
}
