package remote

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
)

// TestTimeoutAtMostAYear: GOFFLOAD_DEVICE_TIMEOUT up to 8760h is taken, and
// a device reads the hello that says it; a longer one is refused when the
// kinds open devices, naming the variable, the value and the range. It
// passed Start, and every device refused the hello (issue 47).
func TestTimeoutAtMostAYear(t *testing.T) {
	t.Setenv(envTimeout, "8760h")
	if d, err := parseTimeout("8760h"); err != nil || d != 8760*time.Hour {
		t.Fatalf("parseTimeout(8760h) = %v, %v", d, err)
	}
	if h, err := parseHello(helloText(entries.Current())); err != nil || h.timeout != 8760*time.Hour {
		t.Fatalf("the hello of a host with 8760h: %+v, %v", h, err)
	}
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
