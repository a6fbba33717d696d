package main

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/goffload/offload/role"
)

// The device processes a test starts are this test binary.
func TestMain(m *testing.M) {
	role.ServeDevice()
	os.Exit(m.Run())
}

func TestListsDevices(t *testing.T) {
	t.Setenv("GOFFLOAD_DEVICES", "host:2")
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if !strings.Contains(s, "2 device(s), default device 0, initial device 2") {
		t.Errorf("header missing:\n%s", s)
	}
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) != 6 { // header, blank, column titles, 2 devices, initial
		t.Fatalf("got %d lines, want 6:\n%s", len(lines), s)
	}
	for i, kind := range []string{"host", "host", "initial"} {
		f := strings.Fields(lines[3+i])
		if f[0] != fmt.Sprint(i) || f[1] != kind || !strings.Contains(lines[3+i], fmt.Sprint(os.Getpid())) {
			t.Errorf("device line %d = %q, want number %d, kind %s and this pid", i, lines[3+i], i, kind)
		}
	}
}

// TestListsRemoteDevices lists two device processes with their pids and
// host name.
func TestListsRemoteDevices(t *testing.T) {
	t.Setenv("GOFFLOAD_DEVICES", "local:2")
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 6 {
		t.Fatalf("got %d lines, want 6:\n%s", len(lines), out.String())
	}
	pids := map[string]bool{}
	for i := 0; i < 2; i++ {
		f := strings.Fields(lines[3+i])
		if f[1] != "local" || !strings.Contains(lines[3+i], host) || !strings.Contains(lines[3+i], "local:2") {
			t.Errorf("device line %q", lines[3+i])
		}
		pid := f[len(f)-2]
		if pid == fmt.Sprint(os.Getpid()) || pids[pid] {
			t.Errorf("device %d has pid %s, want a process of its own", i, pid)
		}
		pids[pid] = true
	}
}

// TestListsProxiedDevices: a device process serving a device of another
// kind is listed with the kind it serves and its own pid.
func TestListsProxiedDevices(t *testing.T) {
	t.Setenv("GOFFLOAD_DEVICES", "local:1[host]")
	var out strings.Builder
	if err := run(&out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 5 {
		t.Fatalf("got %d lines, want 5:\n%s", len(lines), out.String())
	}
	f := strings.Fields(lines[3])
	if f[1] != "local[host]" || f[len(f)-2] == fmt.Sprint(os.Getpid()) || f[len(f)-1] != "local:1[host]" {
		t.Errorf("device line %q, want kind local[host], another pid and its spec", lines[3])
	}
}
