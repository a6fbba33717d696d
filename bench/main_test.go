package main

import (
	"bytes"
	"strconv"
	"strings"
	"testing"
)

// TestHostSuiteTSV runs suite host with a tiny time budget and checks that
// every metric comes out as one well-formed tsv line.
func TestHostSuiteTSV(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := run([]string{"-suite", "host", "-format", "tsv", "-time", "10ms", "-rounds", "1"}, &out, &errOut); err != nil {
		t.Fatalf("run: %v\nstderr:\n%s\nstdout:\n%s", err, errOut.String(), out.String())
	}
	t.Logf("output:\n%s", out.String())

	want := map[string]bool{ // metric -> has a baseline
		"host.empty_region":         false,
		"host.map_tofrom_64MiB":     true,
		"host.present_region_64MiB": false,
		"host.lookup_1e5":           false,
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(strings.TrimRight(out.String(), "\n"), "\n") {
		if strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 4 {
			t.Errorf("line %q: %d tab-separated fields, want 4", line, len(f))
			continue
		}
		metric := f[0]
		hasBase, ok := want[metric]
		if !ok {
			t.Errorf("line %q: unexpected metric %q", line, metric)
			continue
		}
		if seen[metric] {
			t.Errorf("metric %s reported twice", metric)
		}
		seen[metric] = true
		if v, err := strconv.ParseFloat(f[1], 64); err != nil || !(v > 0) {
			t.Errorf("%s: goffload time %q: want a positive number", metric, f[1])
		}
		if !hasBase {
			if f[2] != "-" || f[3] != "-" {
				t.Errorf("%s: baseline %q, ratio %q: want - and -", metric, f[2], f[3])
			}
			continue
		}
		base, err := strconv.ParseFloat(f[2], 64)
		if err != nil || !(base > 0) {
			t.Errorf("%s: baseline time %q: want a positive number", metric, f[2])
			continue
		}
		ratio, err := strconv.ParseFloat(f[3], 64)
		if err != nil || !(ratio > 0) {
			t.Errorf("%s: ratio %q: want a positive number", metric, f[3])
			continue
		}
		if i := strings.IndexByte(f[3], '.'); i < 0 || len(f[3])-i-1 != 3 {
			t.Errorf("%s: ratio %q: want 3 decimals", metric, f[3])
		}
		goff, _ := strconv.ParseFloat(f[1], 64)
		if got := goff / base; got < ratio*0.99-0.001 || got > ratio*1.01+0.001 {
			t.Errorf("%s: ratio %s, but goffload/baseline = %.3f", metric, f[3], got)
		}
	}
	for m := range want {
		if !seen[m] {
			t.Errorf("metric %s missing from the output", m)
		}
	}
}

// TestTableUnits checks the table's time formatting.
func TestTableUnits(t *testing.T) {
	for _, c := range []struct {
		ns   float64
		want string
	}{
		{12.34, "12.3 ns"},
		{999, "999 ns"},
		{2414, "2.41 µs"},
		{45_800, "45.8 µs"},
		{6_559_629, "6.56 ms"},
		{1.5e9, "1.50 s"},
	} {
		if got := human(c.ns); got != c.want {
			t.Errorf("human(%v) = %q, want %q", c.ns, got, c.want)
		}
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"-suite", "nosuch"},
		{"-format", "xml"},
		{"-time", "0s"},
		{"-rounds", "0"},
		{"-suite", ","},
		{"extra"},
	} {
		var out, errOut bytes.Buffer
		if err := run(args, &out, &errOut); err == nil {
			t.Errorf("run(%q) succeeded, want an error", args)
		}
	}
}
