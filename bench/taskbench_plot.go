package main

import (
	"fmt"
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// tbPlotSpec is the -plot file of one pattern of a suite that measures
// Task Bench (taskbench, or mpi with its device ranks): efficiency against
// granularity (log), one line per kind, the 50% line and each kind's METG
// marked. Its points are the sweeps that the suite printed as comment
// lines (taskbench.PATTERN.KIND sweep), kept in tbSweeps.
func tbPlotSpec(suite, pattern string) plotSpec {
	file := "taskbench_" + pattern + ".png"
	if suite != "taskbench" {
		file = "taskbench_" + suite + "_" + pattern + ".png"
	}
	return plotSpec{file: file, suite: suite, draw: func(_ []Result, machine string) (*plot.Plot, error) {
		return tbPlot(suite, pattern, tbSweeps[suite], machine)
	}}
}

// tbPlot draws the sweeps of pattern (its name in metrics).
func tbPlot(suite, pattern string, sweeps []tbSweep, machine string) (*plot.Plot, error) {
	effs, peaks := tbEfficiency(sweeps)
	peak := 0.0
	for i, s := range sweeps {
		if s.Req == pattern && !s.OwnPeak {
			peak = peaks[i]
		}
	}
	p := newPlot(fmt.Sprintf("suite %s: Task Bench %s, compute_bound: efficiency against task granularity (peak %.3g GFLOP/s)", suite, pattern, peak/1e9), machine)
	lo, hi, top := math.Inf(1), 0.0, 100.0
	n := 0
	for i, s := range sweeps {
		if s.Req != pattern || len(s.Points) == 0 {
			continue
		}
		xys := make(plotter.XYs, len(s.Points))
		gran := make([]float64, len(s.Points))
		for j, pt := range s.Points {
			gran[j] = pt.Granularity()
			xys[j] = plotter.XY{X: gran[j], Y: 100 * effs[i][j]}
			lo, hi, top = min(lo, gran[j]), max(hi, gran[j]), max(top, xys[j].Y)
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Kind, err)
		}
		col := plotutil.Color(n)
		l.Color, pts.Color = col, col
		l.Width = vg.Points(1.5)
		pts.Shape = plotutil.Shape(n)
		p.Add(l, pts)
		label := fmt.Sprintf("%s (width %d)", s.Kind, s.Width)
		if m, below, ok := tbMETG(gran, effs[i], 0.5); ok {
			sign := ""
			if below {
				sign = "≤ "
			}
			label += ": METG " + sign + human(m)
		}
		p.Legend.Add(label, l, pts)
		n++
	}
	if n == 0 {
		return nil, errNoRows
	}
	half, err := plotter.NewLine(plotter.XYs{{X: lo, Y: 50}, {X: hi, Y: 50}})
	if err != nil {
		return nil, err
	}
	half.Color = color.RGBA{R: 200, A: 255}
	half.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
	p.Add(half)
	p.Legend.Add("50% efficiency", half)
	p.Legend.Top, p.Legend.Left = false, false // bottom right: large tasks are efficient, that corner empty
	p.X.Label.Text = "task granularity: wall × cores ÷ tasks"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.TickerFunc(timeTicks)
	p.Y.Label.Text = "efficiency: FLOP/s ÷ peak (%)"
	p.Y.Min, p.Y.Max = 0, top*1.05 // above 100%: a point luckier than the plateau
	return p, nil
}
