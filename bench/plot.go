package main

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// -plot DIR: after the suites ran, bench draws what they reported as PNG
// files in DIR, each from the rows of one suite, and says in comments
// which files it wrote and, for each plot it did not, why (the suite was
// skipped, not asked for, or reported none of the plot's rows). The rows
// are the printed ones: every point of a plot is a line of the tsv.

// plotSpec is one PNG file of -plot: the suite whose rows it draws and how.
type plotSpec struct {
	file  string
	suite string
	draw  func(rows []Result, machine string) (*plot.Plot, error)
}

// plotSpecs are the plots -plot can write, in the order it writes them.
var plotSpecs = []plotSpec{
	{"remote_latency.png", "remote", remoteLatencyPlot(remoteShmSweep)},
	{"remote_bandwidth.png", "remote", remoteBandwidthPlot(remoteShmSweep)},
	{"remote_socket_latency.png", "remote-socket", remoteLatencyPlot(remoteSocketSweep)},
	{"remote_socket_bandwidth.png", "remote-socket", remoteBandwidthPlot(remoteSocketSweep)},
	{"peer_ratios.png", "peer", func(rows []Result, machine string) (*plot.Plot, error) {
		return ratioPlot(rows, "peer.", "goffload host device ÷ LLVM 22 host plugin (lower is better)", "goffload time ÷ LLVM time", machine)
	}},
	{"apps_ratios.png", "apps", func(rows []Result, machine string) (*plot.Plot, error) {
		return ratioPlot(rows, "apps.", "apps on device processes (local:2; cg: local:1 vs host device): goffload ÷ baseline (lower is better)", "goffload time ÷ baseline time", machine)
	}},
}

// Size of the PNG files.
const (
	plotWidth  = 9 * vg.Inch
	plotHeight = 5.5 * vg.Inch
)

// plotDPI is the PNG files' resolution: 1296×792 pixels. Tests lower it,
// since encoding the pixels is most of the cost under the race detector.
var plotDPI = 144

// writePlots writes into dir (which must exist) the plots of plotSpecs
// whose suite is in ran, from env's results; skipped gives the reason of
// each suite that -suite all skipped. It says in env's comments what it
// wrote and why it wrote no more.
func writePlots(env *Env, dir string, ran []string, skipped map[string]string) error {
	machine := machineLine()
	for _, s := range plotSpecs {
		if !slices.Contains(ran, s.suite) {
			why := "suite " + s.suite + " did not run (not in -suite)"
			if r, ok := skipped[s.suite]; ok {
				why = "suite " + s.suite + " skipped: " + r
			}
			env.Comment("plot %s: not written, %s", s.file, why)
			continue
		}
		p, err := s.draw(env.results, machine)
		if errors.Is(err, errNoRows) {
			env.Comment("plot %s: not written, suite %s reported none of its rows", s.file, s.suite)
			continue
		}
		if err != nil {
			return fmt.Errorf("plot %s: %w", s.file, err)
		}
		path := filepath.Join(dir, s.file)
		if err := savePNG(p, path); err != nil {
			return fmt.Errorf("plot %s: %w", s.file, err)
		}
		env.Comment("plot %s: wrote %s", s.file, path)
	}
	return nil
}

// errNoRows says that a plot has nothing to draw.
var errNoRows = errors.New("no rows to plot")

// savePNG draws p at plotWidth × plotHeight and plotDPI into a PNG file.
func savePNG(p *plot.Plot, path string) (err error) {
	c := vgimg.NewWith(vgimg.UseWH(plotWidth, plotHeight), vgimg.UseDPI(plotDPI))
	p.Draw(draw.New(c))
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("creating the PNG file: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("closing %s: %w", path, cerr)
		}
	}()
	if _, err := (vgimg.PngCanvas{Canvas: c}).WriteTo(f); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

// machineLine says where and when the figures were measured, for the plots'
// titles: CPU model, CPUs, Go version and platform, date.
func machineLine() string {
	parts := []string{}
	if m := cpuModel(); m != "" {
		parts = append(parts, m)
	}
	parts = append(parts, fmt.Sprintf("%d CPUs", runtime.NumCPU()), runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH, time.Now().Format("2006-01-02"))
	return strings.Join(parts, ", ")
}

// cpuModel is the first "model name" of /proc/cpuinfo, or "".
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return ""
}

// newPlot is a plot titled title, with the machine line under it.
func newPlot(title, machine string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title + "\n" + machine
	p.Title.Padding = vg.Points(6)
	p.Legend.Top, p.Legend.Left = true, true
	p.Add(plotter.NewGrid())
	return p
}

// sweepPlot says which suite's sweep a plot draws: the rows whose metrics
// start with prefix, and what the title and the legend call the link and
// the raw baseline. Suite remote's local device and spinning raw baseline
// go over shared memory (by default); suite remote-socket's over Unix
// sockets.
type sweepPlot struct {
	prefix string // "remote.", "remote_socket."
	link   string // in the title
	raw    string // in the legend
}

var (
	remoteShmSweep    = sweepPlot{"remote.", "suite remote: local device process over shared memory", "raw shared-memory rings"}
	remoteSocketSweep = sweepPlot{"remote_socket.", "suite remote-socket: local device process over its Unix socket", "raw socket"}
)

// sweepRows are the rows of the sweep whose metrics are prefix and a size
// ("remote.submit_" and "64MiB"), by size.
func sweepRows(rows []Result, prefix string) []Result {
	var out []Result
	for _, r := range rows {
		if r.Metric == prefix+sizeName(r.Bytes) && r.Bytes > 0 && r.HasBaseline() && r.Goffload > 0 && r.Baseline > 0 {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b Result) int { return cmp.Compare(a.Bytes, b.Bytes) })
	return out
}

// sweepLines adds to p the four curves of sw's sweep, goffload and raw for
// submit and retrieve, y(size, ns per op) each, and returns the sizes.
func sweepLines(p *plot.Plot, rows []Result, sw sweepPlot, y func(bytes int64, ns float64) float64) ([]int64, error) {
	var sizes []int64
	i := 0
	for _, dir := range []struct{ prefix, name string }{{sw.prefix + "submit_", "host→device"}, {sw.prefix + "retrieve_", "device→host"}} {
		rs := sweepRows(rows, dir.prefix)
		if len(rs) == 0 {
			continue
		}
		for _, c := range []struct {
			who  string
			ns   func(Result) float64
			dash bool
		}{{"goffload", func(r Result) float64 { return r.Goffload }, false}, {sw.raw, func(r Result) float64 { return r.Baseline }, true}} {
			xys := make(plotter.XYs, len(rs))
			for k, r := range rs {
				xys[k] = plotter.XY{X: float64(r.Bytes), Y: y(r.Bytes, c.ns(r))}
			}
			l, pts, err := plotter.NewLinePoints(xys)
			if err != nil {
				return nil, fmt.Errorf("%s %s: %w", dir.name, c.who, err)
			}
			col := plotutil.Color(i / 2)
			l.Color, pts.Color = col, col
			l.Width = vg.Points(1.5)
			pts.Shape = plotutil.Shape(i / 2)
			if c.dash {
				l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
				pts.Shape = draw.CircleGlyph{}
			}
			p.Add(l, pts)
			p.Legend.Add(dir.name+", "+c.who, l, pts)
			i++
		}
		for _, r := range rs {
			if !slices.Contains(sizes, r.Bytes) {
				sizes = append(sizes, r.Bytes)
			}
		}
	}
	if len(sizes) == 0 {
		return nil, errNoRows
	}
	slices.Sort(sizes)
	p.X.Label.Text = "message size"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = sizeTicks(sizes)
	return sizes, nil
}

// remoteLatencyPlot: time per operation of sw's submit_SIZE and
// retrieve_SIZE rows against message size, goffload and the raw
// baseline, log-log.
func remoteLatencyPlot(sw sweepPlot) func(rows []Result, machine string) (*plot.Plot, error) {
	return func(rows []Result, machine string) (*plot.Plot, error) {
		p := newPlot(sw.link+": synchronous copy vs the same bytes raw", machine)
		if _, err := sweepLines(p, rows, sw, func(_ int64, ns float64) float64 { return ns }); err != nil {
			return nil, err
		}
		p.Y.Label.Text = "time per copy"
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.TickerFunc(timeTicks)
		return p, nil
	}
}

// remoteBandwidthPlot: bytes per second of the same rows, GB/s against
// message size (log).
func remoteBandwidthPlot(sw sweepPlot) func(rows []Result, machine string) (*plot.Plot, error) {
	return func(rows []Result, machine string) (*plot.Plot, error) {
		p := newPlot(sw.link+": bandwidth of synchronous copies vs the same bytes raw", machine)
		if _, err := sweepLines(p, rows, sw, func(b int64, ns float64) float64 { return float64(b) / ns }); err != nil {
			return nil, err
		}
		p.Y.Label.Text = "GB/s (10^9 bytes per second)"
		p.Y.Min = 0
		return p, nil
	}
}

// goalRE finds a goal in a row's note: "(goal ≤ 0.59)".
var goalRE = regexp.MustCompile(`goal ≤ ([0-9]+(?:\.[0-9]+)?)`)

// ratioPlot: horizontal bars of goffload ÷ baseline of the rows whose
// metric starts with prefix, each labelled with the ratio and both times,
// a line at 1 and a mark at each goal a row's note states.
func ratioPlot(rows []Result, prefix, title, xlabel, machine string) (*plot.Plot, error) {
	var rs []Result
	for _, r := range rows {
		if strings.HasPrefix(r.Metric, prefix) && !math.IsNaN(r.Ratio()) {
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		return nil, errNoRows
	}
	slices.Reverse(rs) // the first row on top
	p := newPlot(title, machine)
	p.Legend.Top, p.Legend.Left = false, false
	n := len(rs)
	vals := make(plotter.Values, n)
	names := make([]string, n)
	labels := plotter.XYLabels{XYs: make(plotter.XYs, n), Labels: make([]string, n)}
	var goals plotter.XYs
	top := 1.0
	for i, r := range rs {
		q := r.Ratio()
		vals[i], names[i] = q, strings.TrimPrefix(r.Metric, prefix)
		labels.XYs[i] = plotter.XY{X: q, Y: float64(i)}
		labels.Labels[i] = fmt.Sprintf("%s = %s ÷ %s", strconv.FormatFloat(q, 'f', 3, 64), human(r.Goffload), human(r.Baseline))
		top = max(top, q)
		if m := goalRE.FindStringSubmatch(r.Note); m != nil {
			if g, err := strconv.ParseFloat(m[1], 64); err == nil {
				goals = append(goals, plotter.XY{X: g, Y: float64(i)})
				top = max(top, g)
			}
		}
	}
	bars, err := plotter.NewBarChart(vals, vg.Points(min(40, 220/float64(n))))
	if err != nil {
		return nil, fmt.Errorf("bars: %w", err)
	}
	bars.Horizontal = true
	bars.Color = plotutil.Color(0)
	bars.LineStyle.Width = 0
	p.Add(bars)
	one, err := plotter.NewLine(plotter.XYs{{X: 1, Y: -0.6}, {X: 1, Y: float64(n) - 0.4}})
	if err != nil {
		return nil, fmt.Errorf("line at 1: %w", err)
	}
	one.Color = color.RGBA{R: 200, A: 255}
	one.Width = vg.Points(1.5)
	one.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
	p.Add(one)
	p.Legend.Add("1 = as fast as the baseline", one)
	if len(goals) > 0 {
		g, err := plotter.NewScatter(goals)
		if err != nil {
			return nil, fmt.Errorf("goals: %w", err)
		}
		g.Shape = draw.PyramidGlyph{}
		g.Color = color.RGBA{G: 140, A: 255}
		g.Radius = vg.Points(5)
		p.Add(g)
		p.Legend.Add("goal", g)
	}
	l, err := plotter.NewLabels(labels)
	if err != nil {
		return nil, fmt.Errorf("labels: %w", err)
	}
	for i := range l.TextStyle {
		l.TextStyle[i].YAlign = draw.YCenter
	}
	l.Offset = vg.Point{X: vg.Points(4)}
	p.Add(l)
	p.NominalY(names...)
	p.X.Label.Text = xlabel
	p.X.Min = 0
	p.X.Max = top * 1.8 // room for the labels right of the bars
	return p, nil
}

// sizeTicks labels the sizes of the sweep (8B, 4KiB, 64MiB) and puts
// minor ticks at the powers of 2 between.
func sizeTicks(sizes []int64) plot.Ticker {
	return plot.TickerFunc(func(lo, hi float64) []plot.Tick {
		var ts []plot.Tick
		for v := 1.0; v <= hi*1.0001; v *= 2 {
			if v < lo*0.9999 {
				continue
			}
			t := plot.Tick{Value: v}
			if slices.Contains(sizes, int64(v)) {
				t.Label = sizeName(int64(v))
			}
			ts = append(ts, t)
		}
		for _, s := range sizes {
			if s&(s-1) != 0 { // not a power of 2: not ticked above
				ts = append(ts, plot.Tick{Value: float64(s), Label: sizeName(s)})
			}
		}
		return ts
	})
}

// timeTicks marks nanosecond values on a log axis: a labelled tick at each
// power of 10 (10 µs, 1 ms) and minor ones between; with fewer than two
// powers of 10 in range, 2× and 5× are labelled too.
func timeTicks(lo, hi float64) []plot.Tick {
	var ts []plot.Tick
	labelled := 0
	for dec := math.Pow10(int(math.Floor(math.Log10(lo)))); dec <= hi; dec *= 10 {
		for i := 1; i < 10; i++ {
			v := dec * float64(i)
			if v < lo*0.9999 || v > hi*1.0001 {
				continue
			}
			t := plot.Tick{Value: v}
			if i == 1 {
				t.Label = timeLabel(v)
				labelled++
			}
			ts = append(ts, t)
		}
	}
	if labelled < 2 {
		for i := range ts {
			if m := ts[i].Value / math.Pow10(int(math.Floor(math.Log10(ts[i].Value)+1e-9))); math.Abs(m-2) < 1e-6 || math.Abs(m-5) < 1e-6 {
				ts[i].Label = timeLabel(ts[i].Value)
			}
		}
	}
	return ts
}

// timeLabel writes nanoseconds with a unit and no needless digits: 10 µs,
// 2 ms.
func timeLabel(ns float64) string {
	unit, div := "ns", 1.0
	switch {
	case ns >= 1e9*0.9999:
		unit, div = "s", 1e9
	case ns >= 1e6*0.9999:
		unit, div = "ms", 1e6
	case ns >= 1e3*0.9999:
		unit, div = "µs", 1e3
	}
	return strconv.FormatFloat(ns/div, 'g', 3, 64) + " " + unit
}
