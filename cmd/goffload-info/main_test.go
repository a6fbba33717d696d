package main

import (
	"fmt"
	"os"
	"strings"
	"testing"
)

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
