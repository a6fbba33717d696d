package placement

import (
	"slices"
	"time"
)

// Plan is where a task goes and what that needs there: the decision of a
// placement, before the runtime makes any copy or task of it.
type Plan struct {
	// Choice is the device and why; Choice.Dev is -1 where no device can
	// run the task (ok was false for every one).
	Choice Choice
	// Copies are the copies its inputs need on Choice.Dev.
	Copies []Copy
	// Alloc are the regions Choice.Dev holds no memory for yet.
	Alloc []Buf
	// Regions holds, per access, the region its buffer lies in.
	Regions []Buf
	// Reads holds, per access that reads, who wrote each part last: the
	// task's lineage, and the tasks the model expects its inputs from.
	Reads [][]Piece
}

// Place plans a task of kernel, whose arguments span size bytes, with
// accesses acc, at now. It picks, of the devices ok says can run the task,
// the one where the model expects it to end first. It counts the copies t
// says the task's inputs need there. Place changes neither t nor m: Commit
// and Model.Placed record a placement once it is made. The error is the
// table's refusal of the chosen device's plan: ErrOverlap, for a section
// that partly overlaps one in use.
func Place(t *Table, m *Model, now time.Time, kernel string, size int64, acc []Access, ok func(d int) bool) (Plan, error) {
	cost := func(from, to int, b Buf) float64 { return float64(m.CopyCost(from, to, int64(b.Size))) }
	type devPlan struct {
		copies []Copy
		alloc  []Buf
		err    error
	}
	plans := map[int]*devPlan{}
	planOn := func(d int) *devPlan {
		p := plans[d]
		if p == nil {
			p = &devPlan{}
			p.copies, p.alloc, p.err = t.Plan(d, acc, cost)
			plans[d] = p
		}
		return p
	}
	var p Plan
	p.Reads = make([][]Piece, len(acc))
	for i, a := range acc {
		if a.Read {
			p.Reads[i] = t.Writers(a.Buf)
		}
	}
	class := SizeClass(size)
	p.Choice = m.ChooseReady(now, kernel, class, func(d int) (time.Time, time.Duration) {
		return m.Ready(now, p.Reads, planOn(d).copies)
	}, ok)
	if p.Choice.Dev < 0 {
		return p, nil
	}
	dp := planOn(p.Choice.Dev)
	if dp.err != nil {
		return p, dp.err
	}
	p.Copies, p.Alloc = dp.copies, dp.alloc
	p.Regions = make([]Buf, len(acc))
	for i := range acc {
		p.Regions[i] = t.Region(acc[i].Buf)
	}
	return p, nil
}

// Known says what the runtime holds of region r. The first result says
// whether it has r's slice: a task used r before, or Any().EnterData named
// it. The second says whether r's first version is still to be kept: r was
// named, and no task read it.
type Known func(r Buf) (known, first bool)

// FirstVersions returns the regions whose first version a task with
// accesses acc, placed by p, must keep for re-runs before it runs.
// They are each new region it reads, and each named region of which it
// reads a part no task wrote. A region it only writes is never read as the
// program left it. Each region comes once.
func FirstVersions(acc []Access, p Plan, known Known) []Buf {
	var keep, seen []Buf
	for i := range acc {
		r := p.Regions[i]
		if slices.Contains(seen, r) {
			continue
		}
		seen = append(seen, r)
		k, first := known(r)
		switch {
		case !k && readsRegion(acc, p.Regions, r):
			keep = append(keep, r)
		case k && first && readsFirst(p.Reads, p.Regions, r):
			keep = append(keep, r)
		}
	}
	return keep
}

// readsRegion reports whether any of accesses acc (in regions) reads
// region r.
func readsRegion(acc []Access, regions []Buf, r Buf) bool {
	for i, a := range acc {
		if a.Read && regions[i] == r {
			return true
		}
	}
	return false
}

// readsFirst reports whether a task reads a part of region r (its
// accesses in regions, reads their writers) that no task wrote.
func readsFirst(reads [][]Piece, regions []Buf, r Buf) bool {
	for i, ps := range reads {
		if regions[i] == r && slices.ContainsFunc(ps, func(p Piece) bool { return p.Writer == 0 }) {
			return true
		}
	}
	return false
}
