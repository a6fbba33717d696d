package main

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Task Bench's task graphs (Slaughter et al., "Task Bench: A Parameterized
// Benchmark for Evaluating Parallel Runtime Performance", SC'20;
// github.com/StanfordLegion/task-bench, core/core.cc): a graph is W points
// (columns) by T timesteps (rows); task (t, p) reads the outputs of the
// tasks (t-1, q) for q in its dependencies and writes an output of its own.
// The functions here are Task Bench's TaskGraph::dependencies,
// reverse_dependencies, dependence_set_at_timestep and max_dependence_sets
// for the patterns this suite runs, transcribed as plain functions of
// (pattern, width, dset, point) and tested by hand-worked cases
// (taskbench_test.go). Every pattern here has offset 0 and width W at every
// timestep (Task Bench's offset_at_timestep and width_at_timestep for
// them), and no inputs at timestep 0.

// tbPattern is a dependence pattern with its parameters.
type tbPattern struct {
	Kind   tbPatternKind
	Radix  int // nearest, spread: Task Bench's -radix
	Period int // spread: Task Bench's -period (dependence sets); 0 elsewhere
}

// tbPatternKind numbers Task Bench's dependence types that this suite has;
// the numbers travel to the devices in the kernels' arguments.
type tbPatternKind int64

const (
	tbTrivial tbPatternKind = iota
	tbNoComm
	tbStencil1D
	tbNearest
	tbSpread
	tbAllToAll
)

var tbPatternNames = map[tbPatternKind]string{
	tbTrivial:   "trivial",
	tbNoComm:    "no_comm",
	tbStencil1D: "stencil_1d",
	tbNearest:   "nearest",
	tbSpread:    "spread",
	tbAllToAll:  "all_to_all",
}

// Name is the pattern's name in metrics: Task Bench's type, with the radix
// for nearest ("nearest_r5") and spread ("spread_r2").
func (g tbPattern) Name() string {
	n := tbPatternNames[g.Kind]
	if g.Kind == tbNearest || g.Kind == tbSpread {
		n += "_r" + strconv.Itoa(g.Radix)
	}
	return n
}

// parseTBPattern reads a pattern as -taskbench-patterns names it: trivial,
// no_comm, stencil_1d, all_to_all, nearest_rR, spread_rR (radix R; spread's
// period is chosen for the width by tbForWidth).
func parseTBPattern(s string) (tbPattern, error) {
	for k, n := range tbPatternNames {
		if s == n && k != tbNearest && k != tbSpread {
			return tbPattern{Kind: k}, nil
		}
		if rest, ok := strings.CutPrefix(s, n+"_r"); ok && (k == tbNearest || k == tbSpread) {
			r, err := strconv.Atoi(rest)
			if err != nil || r < 1 {
				return tbPattern{}, fmt.Errorf("pattern %q: want a radix of at least 1 after _r", s)
			}
			return tbPattern{Kind: k, Radix: r}, nil
		}
	}
	return tbPattern{}, fmt.Errorf("unknown pattern %q: want trivial, no_comm, stencil_1d, nearest_rR, spread_rR or all_to_all", s)
}

// tbForWidth is g as Task Bench would accept it at width w. Task Bench
// refuses a spread whose radix exceeds the width (its dependencies would
// repeat a point) or whose period exceeds ceil(w/radix) (its dependence
// sets would wrap around); its defaults are radix 3 and period 3. Here the
// radix is lowered to w and the period set to min(3, ceil(w/radix)), so
// that a spread runs at any width; at width 2 that is radix 2, period 1.
func tbForWidth(g tbPattern, w int) tbPattern {
	if g.Kind == tbSpread {
		g.Radix = min(g.Radix, w)
		g.Period = min(3, (w+g.Radix-1)/g.Radix)
	}
	return g
}

// check says what Task Bench's App::check would refuse of g at width w.
func (g tbPattern) check(w int) error {
	if w < 1 {
		return fmt.Errorf("%s: width %d, want at least 1", g.Name(), w)
	}
	switch g.Kind {
	case tbNearest:
		if g.Radix < 0 {
			return fmt.Errorf("%s: negative radix", g.Name())
		}
	case tbSpread:
		if g.Radix < 1 || g.Radix > w {
			return fmt.Errorf("%s at width %d: radix %d, want 1 to the width (more would repeat a point)", g.Name(), w, g.Radix)
		}
		if spread := (w + g.Radix - 1) / g.Radix; g.Period < 1 || g.Period > spread {
			return fmt.Errorf("%s at width %d: period %d, want 1 to %d (Task Bench: at most ceil(width/radix))", g.Name(), w, g.Period, spread)
		}
	}
	return nil
}

// dsets is Task Bench's max_dependence_sets: how many dependence sets the
// pattern cycles through (its period for spread, 1 for the others here).
func (g tbPattern) dsets() int { return tbDsets(g) }

// dset is Task Bench's dependence_set_at_timestep: t mod dsets.
func (g tbPattern) dset(t int) int { return tbDset(g, t) }

// deps appends to buf the points of timestep t-1 that point p of width w
// reads in dependence set dset, in Task Bench's order (a range in
// increasing order; spread's in the order of i), and returns it. Task Bench
// returns ranges (first, last); here they are expanded into points.
func (g tbPattern) deps(buf []int, w, dset, p int) []int {
	for k := range tbDepCount(g, w, dset, p) {
		buf = append(buf, tbDep(g, w, dset, p, k))
	}
	return buf
}

// The dependencies as the kernels compute them (in the subset that
// goffload-gen translates: no methods, no append): tbDepCount points,
// tbDep(…, k) the k-th, in deps's order.

// tbDsets is g.dsets().
func tbDsets(g tbPattern) int {
	if g.Kind == tbSpread {
		return g.Period
	}
	return 1
}

// tbDset is g.dset(t).
func tbDset(g tbPattern, t int) int { return t % tbDsets(g) }

// tbFirstDep is the first point of the range that point p of width w
// reads, for the patterns whose dependencies are a range (no_comm,
// stencil_1d, nearest, all_to_all); tbLastDep is its last.
func tbFirstDep(g tbPattern, p int) int {
	switch g.Kind {
	case tbStencil1D:
		return max(0, p-1)
	case tbNearest:
		return max(0, p-g.Radix/2)
	case tbAllToAll:
		return 0
	}
	return p
}

// tbLastDep: see tbFirstDep.
func tbLastDep(g tbPattern, w, p int) int {
	switch g.Kind {
	case tbStencil1D:
		return min(p+1, w-1)
	case tbNearest:
		return min(p+(g.Radix-1)/2, w-1)
	case tbAllToAll:
		return w - 1
	}
	return p
}

// tbDepCount is how many points of timestep t-1 point p of width w reads
// in dependence set dset.
func tbDepCount(g tbPattern, w, dset, p int) int {
	switch g.Kind {
	case tbTrivial:
		return 0
	case tbSpread:
		return g.Radix
	case tbNearest:
		if g.Radix <= 0 {
			return 0
		}
	}
	return max(0, tbLastDep(g, w, p)-tbFirstDep(g, p)+1)
}

// tbDep is the k-th of them (0 ≤ k < tbDepCount).
func tbDep(g tbPattern, w, dset, p, k int) int {
	if g.Kind == tbSpread {
		q := p + k*w/g.Radix
		if k > 0 {
			q += dset
		}
		return q % w
	}
	return tbFirstDep(g, p) + k
}

// rdeps appends to buf the points of timestep t+1 that read point p in
// dependence set dset (Task Bench's reverse_dependencies: dset is the set
// of timestep t+1), and returns it.
func (g tbPattern) rdeps(buf []int, w, dset, p int) []int {
	switch g.Kind {
	case tbTrivial:
	case tbNoComm:
		buf = append(buf, p)
	case tbStencil1D:
		for q := max(0, p-1); q <= min(p+1, w-1); q++ {
			buf = append(buf, q)
		}
	case tbNearest:
		if g.Radix > 0 {
			for q := max(0, p-(g.Radix-1)/2); q <= min(p+g.Radix/2, w-1); q++ {
				buf = append(buf, q)
			}
		}
	case tbSpread:
		for i := range g.Radix {
			q := p - i*w/g.Radix
			if i > 0 {
				q -= dset
			}
			q %= w
			if q < 0 {
				q += w
			}
			buf = append(buf, q)
		}
	case tbAllToAll:
		for q := range w {
			buf = append(buf, q)
		}
	}
	return buf
}

// inputs appends to buf the points whose outputs task (t, p) reads (none
// at timestep 0) and returns it.
func (g tbPattern) inputs(buf []int, w, t, p int) []int {
	if t == 0 {
		return buf
	}
	return g.deps(buf, w, g.dset(t), p)
}

// The kernels' FLOP count, as Task Bench's count_flops_per_task counts its
// compute_bound kernel: 2·64 per iteration and 64.
func tbFlopsPerTask(iters int64) float64 { return float64(2*64*iters + 64) }

// tbPoint is one run of a sweep: a kind's wall time for a graph at one
// kernel size.
type tbPoint struct {
	Iters int64   // compute_bound iterations per task
	Tasks int     // tasks run (timesteps × width)
	Wall  float64 // nanoseconds, the fastest of the repetitions
	Cores int     // cores of the machine: granularity's factor
}

// Granularity is Task Bench's time per task: wall × cores ÷ tasks, in
// nanoseconds.
func (p tbPoint) Granularity() float64 { return p.Wall * float64(p.Cores) / float64(p.Tasks) }

// FlopRate is the FLOP/s the run achieved.
func (p tbPoint) FlopRate() float64 {
	return tbFlopsPerTask(p.Iters) * float64(p.Tasks) / (p.Wall * 1e-9)
}

// tbMETG is the minimum effective task granularity at efficiency threshold
// (0.5 for METG(50%)) from the points (granularity, efficiency) of one
// sweep, in any order: the smallest granularity at which the efficiency is
// at least the threshold, interpolated between that point and the next
// smaller one (whose efficiency is below the threshold) linearly in the
// efficiency and logarithmically in the granularity (Task Bench's
// chart_metg.py interpolates linearly in both; on a sweep that doubles the
// granularity the two differ by at most a few per cent). below reports that
// the sweep's smallest granularity was already efficient enough, so that
// the METG is at most the value returned; ok is false when no point
// reaches the threshold.
func tbMETG(gran, eff []float64, threshold float64) (metg float64, below, ok bool) {
	best := -1
	for i := range gran {
		if eff[i] >= threshold && (best < 0 || gran[i] < gran[best]) {
			best = i
		}
	}
	if best < 0 {
		return 0, false, false
	}
	// The next smaller granularity than best's: below the threshold, or
	// best would be it.
	next := -1
	for i := range gran {
		if gran[i] < gran[best] && (next < 0 || gran[i] > gran[next]) {
			next = i
		}
	}
	if next < 0 {
		return gran[best], true, true
	}
	e0, e1 := eff[next], eff[best]
	l0, l1 := math.Log(gran[next]), math.Log(gran[best])
	if e1 == e0 {
		return gran[best], false, true
	}
	f := (threshold - e0) / (e1 - e0)
	return math.Exp(l0 + f*(l1-l0)), false, true
}
