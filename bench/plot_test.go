package main

import (
	"bytes"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot/vg"
)

// TestPlots draws every plot of -plot from made-up rows of every suite
// that has plots (the peer suite among them, which needs LLVM to run), and
// says why it writes none for a suite that skipped, was not asked for, or
// reported none of a plot's rows.
func TestPlots(t *testing.T) {
	defer func(dpi int) { plotDPI = dpi }(plotDPI)
	plotDPI = 48
	var out bytes.Buffer
	env := &Env{out: tsvPrinter{w: &out}}
	for i, size := range sweepSizes {
		ns := 20e3 + float64(size)/4 // 20 µs and 4 GB/s
		env.Report(Result{Metric: "remote.submit_" + sizeName(size), Goffload: 2 * ns, Baseline: ns, Bytes: size})
		env.Report(Result{Metric: "remote.retrieve_" + sizeName(size), Goffload: 1.5 * ns, Baseline: ns * (1 + float64(i%2)/10), Bytes: size})
	}
	env.Report(Result{Metric: "remote.launch_rtt", Goffload: 30e3, Baseline: 40e3})
	env.Report(Result{Metric: "remote.submit_64MiB_vs_copy", Goffload: 20e6, Baseline: 15e6, Note: "… (goal ≤ 1.25)"})
	for _, size := range sweepSizes {
		ns := 25e3 + float64(size)/3
		env.Report(Result{Metric: "remote_socket.submit_" + sizeName(size), Goffload: 2 * ns, Baseline: ns, Bytes: size})
		env.Report(Result{Metric: "remote_socket.retrieve_" + sizeName(size), Goffload: 1.5 * ns, Baseline: ns, Bytes: size})
	}
	env.Report(Result{Metric: "peer.empty_region", Goffload: 1.7e3, Baseline: 0.7e3})
	env.Report(Result{Metric: "peer.map_tofrom_64MiB", Goffload: 5e6, Baseline: 200e6})
	env.Report(Result{Metric: "apps.jacobi_2dev_vs_1dev", Goffload: 1.3e9, Baseline: 1.2e9, Note: "… (goal ≤ 0.59)"})
	env.Report(Result{Metric: "apps.cholesky_vs_goroutines", Goffload: 0.2e9, Baseline: 0.07e9, Note: "… (goal ≤ 1.5)"})
	env.Report(Result{Metric: "apps.no_baseline", Goffload: 1, Baseline: math.NaN()})

	dir := t.TempDir()
	if err := writePlots(env, dir, []string{"remote", "remote-socket", "peer", "apps"}, nil); err != nil {
		t.Fatal(err)
	}
	checkPNGs(t, dir, "remote_latency.png", "remote_bandwidth.png", "remote_socket_latency.png", "remote_socket_bandwidth.png", "peer_ratios.png", "apps_ratios.png")
	// The sweep's rows are submit_SIZE and retrieve_SIZE only.
	if rs := sweepRows(env.results, "remote.submit_"); len(rs) != len(sweepSizes) {
		t.Errorf("%d rows of remote.submit_SIZE, want %d", len(rs), len(sweepSizes))
	}

	// Suite peer skipped, apps not asked for, remote ran but reported no
	// sweep: nothing written, and each said.
	out.Reset()
	dir = t.TempDir()
	env.results = env.results[2*len(sweepSizes):]
	if err := writePlots(env, dir, []string{"remote"}, map[string]string{"peer": "no clang-22"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"# plot remote_latency.png: not written, suite remote reported none of its rows\n",
		"# plot remote_socket_latency.png: not written, suite remote-socket did not run (not in -suite)\n",
		"# plot remote_bandwidth.png: not written, suite remote reported none of its rows\n",
		"# plot peer_ratios.png: not written, suite peer skipped: no clang-22\n",
		"# plot apps_ratios.png: not written, suite apps did not run (not in -suite)\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("writePlots said\n%s\nwant a line %q", out.String(), want)
		}
	}
	if names, _ := filepath.Glob(filepath.Join(dir, "*")); len(names) != 0 {
		t.Errorf("writePlots wrote %q, want nothing", names)
	}
}

// checkPNGs checks that each of files is in dir and is a PNG image of the
// size -plot draws.
func checkPNGs(t *testing.T, dir string, files ...string) {
	t.Helper()
	wantW, wantH := int(plotWidth/vg.Inch*vg.Length(plotDPI)), int(plotHeight/vg.Inch*vg.Length(plotDPI))
	for _, name := range files {
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("plot %s: %v", name, err)
			continue
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Errorf("plot %s: %v", name, err)
			continue
		}
		if b := img.Bounds(); b.Dx() != wantW || b.Dy() != wantH {
			t.Errorf("plot %s: %d×%d pixels, want %d×%d", name, b.Dx(), b.Dy(), wantW, wantH)
		}
	}
}

// TestTimeTicks: a log time axis gets labelled ticks in round units, also
// when less than a decade is in range.
func TestTimeTicks(t *testing.T) {
	labels := func(lo, hi float64) []string {
		var l []string
		for _, tk := range timeTicks(lo, hi) {
			if tk.Label != "" {
				l = append(l, tk.Label)
			}
		}
		return l
	}
	if got, want := strings.Join(labels(8e3, 20e6), ","), "10 µs,100 µs,1 ms,10 ms"; got != want {
		t.Errorf("timeTicks(8 µs, 20 ms) labels %s, want %s", got, want)
	}
	if got := labels(1.5e3, 9e3); len(got) < 2 {
		t.Errorf("timeTicks(1.5 µs, 9 µs) labels %q, want at least two", got)
	}
	if got, want := sizeName(8)+","+sizeName(4096)+","+sizeName(64<<20)+","+sizeName(1000), "8B,4KiB,64MiB,1000B"; got != want {
		t.Errorf("sizeName: %s, want %s", got, want)
	}
}
