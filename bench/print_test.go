package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMarkdown: -format md writes the comments as a list and the rows after
// them as a markdown table with units, a header for each table, and nothing
// in a cell that breaks the table.
func TestMarkdown(t *testing.T) {
	var b bytes.Buffer
	p := &mdPrinter{w: &b}
	p.start("suites host")
	p.comment("suite host: devices \"host\"")
	p.row(Result{Metric: "host.empty_region", Goffload: 1470, Baseline: math.NaN()})
	p.row(Result{Metric: "host.map_tofrom_64MiB", Goffload: 6.3e6, Baseline: 5.37e6, Note: "a|b <c>"})
	p.comment("suite remote")
	p.row(Result{Metric: "remote.launch_rtt", Goffload: 38e3, Baseline: 38e3})
	got := b.String()
	for _, want := range []string{
		"- suite host: devices \"host\"\n\n| metric | goffload | baseline | ratio | notes |\n|---|---:|---:|---:|---|\n",
		"| `host.empty_region` | 1.47 µs | - | - |  |\n",
		"| `host.map_tofrom_64MiB` | 6.30 ms | 5.37 ms | 1.173 | a\\|b &lt;c&gt; |\n",
		"\n- suite remote\n\n| metric |",
		"| `remote.launch_rtt` | 38.0 µs | 38.0 µs | 1.000 |  |\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("markdown lacks %q:\n%s", want, got)
		}
	}
	if n := strings.Count(got, "| metric |"); n != 2 {
		t.Errorf("%d table headers, want 2:\n%s", n, got)
	}
}

// TestMarkdownAndTSV: -format md with -tsv FILE writes the same run both
// ways, the markdown to the output and the tsv to FILE.
func TestMarkdownAndTSV(t *testing.T) {
	file := filepath.Join(t.TempDir(), "bench.tsv")
	var out, errOut bytes.Buffer
	if err := run([]string{"-suite", "host", "-format", "md", "-tsv", file, "-time", "5ms", "-rounds", "1"}, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	tsv, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"host.empty_region", "host.map_tofrom_64MiB"} {
		if !strings.Contains(out.String(), "| `"+m+"` |") {
			t.Errorf("markdown lacks %s:\n%s", m, out.String())
		}
		if !strings.Contains(string(tsv), "\n"+m+"\t") {
			t.Errorf("tsv lacks %s:\n%s", m, tsv)
		}
	}
}
