package offload_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/goffload/offload"
)

// TestDeviceSpecsStrict: GOFFLOAD_DEVICES items that are empty or lack
// their argument are errors at Start that name them (issue 20: "local:"
// and "host,,local" were taken silently), and kind names may be in any
// case.
func TestDeviceSpecsStrict(t *testing.T) {
	cases := []struct{ devices, want string }{
		{"local:", `item "local:": nothing after the colon; want local[:N]`},
		{"host:", `item "host:": nothing after the colon; want host[:N]`},
		{"tcp://", `item "tcp://": nothing after the colon; want tcp://HOST:PORT`},
		{"host,,local", `"host,,local": item 2 is empty`},
		{"host,", `"host,": item 2 is empty`},
		{",host", `",host": item 1 is empty`},
	}
	for _, c := range cases {
		err := offload.Start(offload.WithDevices(c.devices))
		if err == nil {
			offload.Stop()
			t.Errorf("Start with devices %q succeeded", c.devices)
			continue
		}
		if !errors.Is(err, offload.ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("devices %q: %v; want ErrConfig saying %q", c.devices, err, c.want)
		}
	}
	start(t, offload.WithDevices("HOST:1,Host"))
	if n := offload.NumDevices(); n != 2 {
		t.Errorf("HOST:1,Host: %d devices, want 2", n)
	}
}

// TestTCPPortMalformed: a tcp:// item whose port is out of range, negative
// or empty is an error at Start naming the item and what a port is, under
// the default policy too, where it was an unavailable device (the program
// ran on the host, silently).
func TestTCPPortMalformed(t *testing.T) {
	t.Setenv("GOFFLOAD_SECRET", "a secret of more than sixteen bytes")
	t.Setenv("OMP_TARGET_OFFLOAD", "")
	cases := []struct{ devices, want string }{
		{"tcp://127.0.0.1:99999", `item "tcp://127.0.0.1:99999": malformed device spec: the port of tcp://127.0.0.1:99999 is "99999"; want tcp://HOST:PORT with PORT a number from 1 to 65535`},
		{"tcp://127.0.0.1:-1", `item "tcp://127.0.0.1:-1": malformed device spec: the port of tcp://127.0.0.1:-1 is "-1"; want`},
		{"tcp://127.0.0.1:", `item "tcp://127.0.0.1:": malformed device spec: the port of tcp://127.0.0.1: is ""; want`},
	}
	for _, c := range cases {
		err := offload.Start(offload.WithDevices(c.devices))
		if err == nil {
			offload.Stop()
			t.Errorf("Start with devices %q succeeded", c.devices)
			continue
		}
		if !errors.Is(err, offload.ErrConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("devices %q: %v; want ErrConfig saying %q", c.devices, err, c.want)
		}
	}
}

// TestTCPWithoutSecret: a tcp:// item without GOFFLOAD_SECRET says the
// secret is missing and how to give it, and shows the item as written.
func TestTCPWithoutSecret(t *testing.T) {
	t.Setenv("GOFFLOAD_SECRET", "")
	err := offload.Start(offload.WithDevices("tcp://127.0.0.1:1"))
	if err == nil {
		offload.Stop()
		t.Fatal("Start succeeded")
	}
	msg := err.Error()
	if !errors.Is(err, offload.ErrConfig) || !strings.Contains(msg, `"tcp://127.0.0.1:1"`) || !strings.Contains(msg, "secret is missing") ||
		!strings.Contains(msg, "set GOFFLOAD_SECRET") || strings.Contains(msg, "malformed") {
		t.Errorf("got %v; want ErrConfig naming tcp://127.0.0.1:1, saying the secret is missing and how to set it", err)
	}
}

// TestNilGroupWait: Wait on a nil *Group is an error, not a panic.
func TestNilGroupWait(t *testing.T) {
	var g *offload.Group
	if err := g.Wait(context.Background()); !errors.Is(err, offload.ErrBadArgument) || !strings.Contains(err.Error(), "nil *Group") {
		t.Errorf("got %v, want ErrBadArgument naming the nil *Group", err)
	}
}
