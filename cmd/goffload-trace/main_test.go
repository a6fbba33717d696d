package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/goffload/offload"
)

var addOne = offload.MustKernel("trace.addone", func(x []int64) {
	for i := range x {
		x[i]++
	}
})

// TestSummary traces a known run — a chain of 20 tasks alternating between
// two devices, each copying its buffer in and out — and checks what the
// summary says of it.
func TestSummary(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.json")
	t.Setenv("GOFFLOAD_PROFILE", path)
	if err := offload.Start(offload.WithDevices("host:2")); err != nil {
		t.Fatal(err)
	}
	x := make([]int64, 1024)
	// The chain is held back until all of it is enqueued, so that every task
	// waits for the one before it (a task that finished before the next is
	// created is no dependency).
	release := make(chan struct{})
	offload.Nowait(offload.DependOut(x)).Go("gate", func() error { <-release; return nil })
	for i := range 20 {
		offload.On(i%2).Nowait(offload.DependInOut(x)).Run(addOne, offload.ToFrom(x).Named("x"))
	}
	close(release)
	if err := offload.Taskwait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := offload.Stop(); err != nil {
		t.Fatal(err)
	}
	if x[7] != 20 {
		t.Fatalf("x[7] = %d, want 20", x[7])
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out bytes.Buffer
	if err := summarize(f, &out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	for _, re := range []string{
		`(?m)^21 tasks, \d+ device operations$`,
		`(?m)^\s*trace\.addone\s+20\s`,
		`(?m)^\s*copy to device\s+20\s+0\.16\s`,
		`(?m)^\s*copy from device\s+20\s+0\.16\s`,
		`(?m)^\s*across devices\s+20\s`, // the gate (the initial device) to the first, and each task to the next
		`(?m)^\s*0\s+queue \d+\s+\d+\s`,
		`device 1: device 1 \(host\)`,
	} {
		if !regexp.MustCompile(re).MatchString(got) {
			t.Errorf("summary lacks %s:\n%s", re, got)
		}
	}
}

// TestNotATrace: what is not a trace is an error, not a panic.
func TestNotATrace(t *testing.T) {
	for _, in := range []string{"", "not json", `{"traceEvents": 3}`, `{"traceEvents": []}`, `{"traceEvents": [{"ph": "s", "id": 1}, {"ph": "s", "id": 1}]}`} {
		var out bytes.Buffer
		if err := summarize(strings.NewReader(in), &out); err == nil {
			t.Errorf("%q: no error; summary:\n%s", in, out.String())
		}
	}
}

// TestUsage (issue 34): -h prints the usage and exits 0, no arguments or a
// stray flag print it and exit 2; none of them tries to open a file named
// like the flag ("open -h: no such file or directory").
func TestUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
	}{{[]string{"-h"}, 0}, {[]string{"--help"}, 0}, {nil, 2}, {[]string{"-x"}, 2}, {[]string{"a.json", "b.json"}, 2}} {
		var out, errOut strings.Builder
		code := run(c.args, &out, &errOut)
		if code != c.code || !strings.Contains(errOut.String(), "usage: goffload-trace") || strings.Contains(errOut.String(), "no such file") {
			t.Errorf("goffload-trace %q: exit %d, want %d; stderr %q", c.args, code, c.code, errOut.String())
		}
	}
}
