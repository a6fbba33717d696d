package core

import (
	"slices"
	"sync"
	"unsafe"

	"github.com/google/btree"
)

// DepKind is a depend clause's type.
type DepKind int

// Dependence types of OpenMP's depend clause.
const (
	DepIn DepKind = iota
	DepOut
	DepInOut
)

// Dep is one depend clause: a host address (a buffer's first byte, or any
// address the program names) and its type.
type Dep struct {
	Kind DepKind
	Addr uintptr
	// Size is the bytes the object covers from Addr (at least 1 is
	// assumed): dependencies on objects that overlap are ordered as if they
	// named the same object, whatever their start addresses.
	Size uintptr
	Keep unsafe.Pointer // keeps the object alive while tasks refer to it
}

// depState is the dependence history of one address: the last task that
// wrote it, and the tasks that read it since, each with the end of the
// object it named there. An address is forgotten once no live task names
// it and its history holds no failure still to report.
type depState struct {
	out *Task
	// outEnd is where out's object ends, or beyond: out stands for the
	// readers and writer it replaced too (it waited for them), so it
	// reaches as far as the farthest of them.
	outEnd  uintptr
	ins     []depIn
	refs    int // live tasks that name the address
	pruneAt int // prune finished readers when ins grows this long
	keep    unsafe.Pointer
	// addr and end are the bytes the objects named at addr cover (the
	// largest of them), for the search of overlapping objects.
	addr, end uintptr
}

// depIn is a reader in a history: the task, and where the object it named
// ends.
type depIn struct {
	t   *Task
	end uintptr
	// by holds, for each address other than the history's own where
	// writers waited for t (their objects overlap t's), the latest of
	// them. A writer there that comes after it is after t already, and
	// needs no edge to t.
	// A history with no writer at its own address keeps its readers until
	// they finish. Tasks may be created far ahead of their running. Then
	// every writer would otherwise wait for every reader left there, of
	// every step created before. An example is the rows a stencil's edge
	// task reads, which the tasks on the rows beside it write from other
	// addresses.
	by []depBy
}

// depBy is the latest writer at an address that waited for a reader.
type depBy struct {
	addr uintptr
	t    *Task
}

// after reports whether a writer at addr whose predecessor there is prev
// (the last writer at addr) comes after in's reader through prev.
func (in *depIn) after(addr uintptr, prev *Task) bool {
	for _, b := range in.by {
		if b.addr == addr {
			return prev != nil && b.t == prev
		}
	}
	return false
}

// waited records that writer t at addr waited for in's reader.
func (in *depIn) waited(addr uintptr, t *Task) {
	for i := range in.by {
		if in.by[i].addr == addr {
			in.by[i].t = t
			return
		}
	}
	in.by = append(in.by, depBy{addr, t})
}

// tasks is the runtime's task bookkeeping, all guarded by mu.
type tasks struct {
	mu    sync.Mutex
	graph depGraph
	live  liveTasks
	// failed are the failures not reported yet (a task's own; dependents
	// share their predecessor's).
	failed map[*failure]struct{}
}

// liveTasks are the tasks not completed yet: a list through the tasks'
// own links (livePrev, liveNext), so that a task's registering and its
// completion touch no map (a map's delete took a tenth of a small task's
// CPU, the map holding every task made ahead of the devices).
type liveTasks struct {
	head *Task
	n    int
}

func (l *liveTasks) add(t *Task) {
	t.livePrev, t.liveNext = nil, l.head
	if l.head != nil {
		l.head.livePrev = t
	}
	l.head = t
	l.n++
}

// remove takes t out, if it is in: its links go, so that a completed task
// keeps no other alive.
func (l *liveTasks) remove(t *Task) {
	if t.livePrev == nil && l.head != t {
		return // not in the list
	}
	if t.livePrev != nil {
		t.livePrev.liveNext = t.liveNext
	} else {
		l.head = t.liveNext
	}
	if t.liveNext != nil {
		t.liveNext.livePrev = t.livePrev
	}
	t.livePrev, t.liveNext = nil, nil
	l.n--
}

// len is the number of live tasks.
func (l *liveTasks) len() int { return l.n }

// all yields the live tasks, the newest first.
func (l *liveTasks) all(yield func(*Task) bool) {
	for t := l.head; t != nil; t = t.liveNext {
		if !yield(t) {
			return
		}
	}
}

// depGraph is the dependence history, as plain state that no device
// touches: add gives a new task's predecessors under OpenMP's rules, and
// complete forgets a task that completed. Its user guards it (tasks.mu).
type depGraph struct {
	hist map[uintptr]*depState // by address
	// byAddr orders the histories by address, to find those of objects
	// that overlap a new dependence; maxLen bounds their lengths (it
	// starts again from 0 when no history is left).
	byAddr *btree.BTreeG[*depState]
	maxLen uintptr
	lo, hi depState // the bounds of a search, kept to allocate nothing
	// free holds up to keptHistories removed histories, with their
	// readers' room, for the next new ones: a stencil's tokens come and
	// go with every timestep.
	free []*depState
	// preds is where add collects a new task's predecessors.
	preds [maxReduce]*Task
}

// keptHistories is the most removed histories a graph keeps for reuse.
const keptHistories = 64

func finished(t *Task) bool { return t.fin.Load() }

// holds reports whether a finished task must stay in a history: it failed
// and its failure was not reported yet. Called with tasks.mu held.
func holds(t *Task) bool { return t.err != nil && !t.fail.reported }

// register numbers t and returns its predecessors (see depGraph.add).
func (r *Runtime) register(t *Task, deps []Dep) []*Task {
	ts := &r.tasks
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.failed == nil {
		ts.failed = map[*failure]struct{}{}
	}
	t.ID = r.ids.Add(1)
	t.rt = r
	ts.live.add(t)
	return ts.graph.add(t, deps)
}

// add records t's depend clauses deps and returns its predecessors under
// OpenMP's rules: in after out waits; out and inout wait for the last out
// and every in since. A finished predecessor counts only if it failed and
// its failure was not reported yet: its dependents fail with
// ErrDependency.
func (g *depGraph) add(t *Task, deps []Dep) []*Task {
	if g.hist == nil {
		g.hist = map[uintptr]*depState{}
		g.byAddr = btree.NewG(16, func(a, b *depState) bool { return a.addr < b.addr })
	}
	// The predecessors are collected in the graph's room, and reduced
	// there: a task of a few ends with fewer than it first finds (a
	// stencil's, the readers its write replaces, which its own
	// predecessors wait for already).
	ps := predSet{t: t, list: g.preds[:0]}
	t.addrs = t.addrBuf[:0]
	var covered []*depState // other addresses' histories a write may replace
	for _, d := range deps {
		covered = g.addDep(&ps, d, covered)
	}
	preds := reduce(ps.list)
	switch {
	case len(preds) <= len(t.directBuf):
		preds = append(t.directBuf[:0], preds...)
	case unsafe.SliceData(preds) == &g.preds[0]:
		preds = slices.Clone(preds)
	}
	clear(g.preds[:])
	t.direct = preds
	return preds
}

// predSet collects a new task's predecessors, each once.
type predSet struct {
	t    *Task
	list []*Task
	seen map[*Task]bool // a write after many reads: no quadratic search
}

// add adds p, unless it is the new task, finished (with no failure to
// report), or there already.
func (s *predSet) add(p *Task) {
	if p == nil || p == s.t || (finished(p) && !holds(p)) || s.seen[p] || (s.seen == nil && slices.Contains(s.list, p)) {
		return
	}
	if s.list = append(s.list, p); s.seen == nil && len(s.list) > 16 {
		s.seen = make(map[*Task]bool, 2*len(s.list))
		for _, q := range s.list {
			s.seen[q] = true
		}
	} else if s.seen != nil {
		s.seen[p] = true
	}
}

// addDep records the new task's clause d, and adds its predecessors
// through d to ps. covered is scratch space, returned empty for the next
// clause.
func (g *depGraph) addDep(ps *predSet, d Dep, covered []*depState) []*depState {
	t := ps.t
	t.addrs = append(t.addrs, d.Addr)
	st := g.hist[d.Addr]
	if st == nil {
		st = g.newHistory(d.Addr, d.Keep)
	}
	end := d.Addr + max(d.Size, 1)
	if end < d.Addr { // wrapped
		end = ^uintptr(0)
	}
	st.end = max(st.end, end)
	g.maxLen = max(g.maxLen, st.end-st.addr)
	st.refs++
	// Objects at other addresses that overlap this one, [d.Addr, end):
	// not the largest object named at d.Addr, which would order a task
	// on one row after the tasks on the rows below it that another
	// task named from the same first row (a halo row's copy after the
	// neighbour's band).
	prev := st.out // the last writer here, which t comes after
	g.overlapping(st, end, func(o *depState) {
		if o.outEnd > d.Addr { // o starts before end: they overlap if it reaches d.Addr
			ps.add(o.out)
		}
		if d.Kind != DepIn {
			for i := range o.ins {
				in := &o.ins[i]
				if in.end <= d.Addr {
					continue
				}
				if !in.after(d.Addr, prev) {
					ps.add(in.t)
				}
				in.waited(d.Addr, t)
			}
			if o.addr >= d.Addr { // what t's object covers, t replaces
				covered = append(covered, o)
			}
		}
	})
	// A writer comes after the writers and readers of the objects its
	// own covers, at other addresses too (added above): there, later
	// tasks on those bytes find it, and the ones it replaced are
	// forgotten. Kept, they would order every later task on the bytes
	// after them, which a task made far ahead of the running ones
	// waits for as if they were still to run (a device wait each; across
	// devices, a message).
	for _, o := range covered {
		if o.out != nil && o.outEnd <= end {
			o.out, o.outEnd = nil, o.addr
		}
		o.ins = slices.DeleteFunc(o.ins, func(in depIn) bool { return in.end <= end })
		g.settle(o.addr, o) // gone if no live task names it and it is empty
	}
	covered = covered[:0]
	ps.add(st.out)
	if d.Kind == DepIn {
		if len(st.ins) >= st.pruneAt { // amortized: prune when it doubled
			st.ins = slices.DeleteFunc(st.ins, func(in depIn) bool { return finished(in.t) && !holds(in.t) })
			st.pruneAt = max(8, 2*len(st.ins))
		}
		st.ins = append(st.ins, depIn{t: t, end: end})
		return covered
	}
	g.write(ps, st, d.Addr, end, prev)
	return covered
}

// write makes the new task, a writer of [addr, end) whose last writer
// at addr was prev, the history at addr, and adds the readers there
// that it waits for to ps.
func (g *depGraph) write(ps *predSet, st *depState, addr, end uintptr, prev *Task) {
	// t replaces the history here. The last writer's object may
	// reach past t's: t stands for it there (a later task on those
	// bytes waits for t, which waited for it). A reader whose object
	// reaches past t's stays, marked as waited for from here: a
	// later writer on its far part waits for it, and nothing that
	// only reads or writes those bytes waits for t, which did not
	// touch them (an interior band's read of the rows around it,
	// named from its first row, would otherwise order the next
	// step's write of that row before the next step's interior).
	t := ps.t
	reach := end
	if w := st.out; w != nil && st.outEnd > end && !g.split(w, end, st.outEnd, st.keep) {
		reach = st.outEnd
	}
	kept := st.ins[:0] // in place: the readers' room is kept for the next ones
	for _, in := range st.ins {
		if !in.after(addr, prev) {
			ps.add(in.t)
		}
		if in.end > end && (!finished(in.t) || holds(in.t)) {
			in.waited(addr, t)
			kept = append(kept, in)
		}
	}
	clear(st.ins[len(kept):])
	if cap(kept) > keptReaders && len(kept) < cap(kept)/4 {
		kept = slices.Clone(kept) // many readers once, few now
	}
	st.out, st.outEnd, st.ins, st.pruneAt = t, reach, kept, max(8, 2*len(kept))
}

// complete forgets t, which completed, where it named an address: a
// history no live task names any longer is settled. keep says that t's
// failure stays in the histories until it is reported (forget).
func (g *depGraph) complete(t *Task, keep bool) {
	t.direct = nil
	clear(t.directBuf[:]) // a completed task held by the program keeps no predecessor
	f := t.fail
	for _, addr := range t.addrs {
		st := g.hist[addr]
		if st == nil {
			continue
		}
		st.refs--
		if keep {
			if f.addrs == nil {
				f.addrs = map[uintptr]struct{}{}
			}
			f.addrs[addr] = struct{}{}
		}
		g.settle(addr, st)
	}
}

// forget forgets f, reported, in the histories that held it: new tasks
// on the same objects no longer wait for the tasks it failed.
func (g *depGraph) forget(f *failure) {
	for addr := range f.addrs {
		if st := g.hist[addr]; st != nil {
			g.settle(addr, st)
		}
	}
	f.addrs = nil
}

// split handles w, the last writer at an address whose object reaches to
// until. A new writer at the address does not cover the part [at, until).
// split makes w the last writer of that part, in a history of its own at at.
// So the new writer need not stand for it there. Else tasks on that part would
// wait for the new one, which does not touch it. An example is the fill of a
// band's rows, named from its first row, and the writes of that row step after
// step. split reports false where at has a history already; the new writer
// then stands for w. Called with tasks.mu held.
func (g *depGraph) split(w *Task, at, until uintptr, keep unsafe.Pointer) bool {
	if w.completed {
		return !holds(w) // done: nothing to wait for, unless its failure is
	}
	if g.hist[at] != nil {
		return false
	}
	st := g.newHistory(at, keep)
	st.out, st.outEnd, st.end, st.refs = w, until, until, 1
	g.maxLen = max(g.maxLen, until-at)
	w.addrs = append(w.addrs, at) // its completion forgets it
	return true
}

// reduce drops from preds each task that another of them waits for by
// an edge of its own (direct): t comes after it through that one. A
// predecessor on another device is a wait there, and a message between
// the devices; a task that reads a part copied in waits for the copy,
// which waits for the part's writer already. Only short lists are
// searched (a write after many reads has no such pairs to find).
func reduce(preds []*Task) []*Task {
	if len(preds) < 2 || len(preds) > maxReduce {
		return preds
	}
	var implied uint32 // bit i: preds[i] is implied; found before any is dropped
	for i, p := range preds {
		for _, q := range preds {
			if q != p && slices.Contains(q.direct, p) {
				implied |= 1 << i
				break
			}
		}
	}
	if implied == 0 {
		return preds
	}
	kept := preds[:0] // in place: preds is the new task's own list
	for i, p := range preds {
		if implied&(1<<i) == 0 {
			kept = append(kept, p)
		}
	}
	clear(preds[len(kept):])
	return kept
}

// keptReaders is the most readers' room a history keeps after a write
// that leaves few of them.
const keptReaders = 64

// maxReduce is the most predecessors reduce searches.
const maxReduce = 16

// newHistory starts the empty history of addr, whose objects keep keeps
// alive. Called with tasks.mu held.
func (g *depGraph) newHistory(addr uintptr, keep unsafe.Pointer) *depState {
	var st *depState
	if n := len(g.free); n > 0 {
		st, g.free[n-1], g.free = g.free[n-1], nil, g.free[:n-1]
		*st = depState{ins: st.ins, keep: keep, pruneAt: 8, addr: addr, end: addr}
	} else {
		st = &depState{keep: keep, pruneAt: 8, addr: addr, end: addr}
	}
	g.hist[addr] = st
	g.byAddr.ReplaceOrInsert(st)
	return st
}

// settle forgets what addr's history no longer needs, once no live task
// names the address; an empty history is removed. Called with tasks.mu held.
func (g *depGraph) settle(addr uintptr, st *depState) {
	if st.refs > 0 {
		return
	}
	if st.out != nil && !holds(st.out) {
		st.out = nil
	}
	st.ins = slices.DeleteFunc(st.ins, func(in depIn) bool { return !holds(in.t) })
	if st.out == nil && len(st.ins) == 0 {
		delete(g.hist, addr)
		g.byAddr.Delete(st)
		if len(g.hist) == 0 {
			g.maxLen = 0
		}
		if len(g.free) < keptHistories && cap(st.ins) <= keptReaders {
			st.out, st.keep, st.ins = nil, nil, st.ins[:0]
			g.free = append(g.free, st)
		}
	}
}

// overlapping calls f with every history other than st whose objects may
// overlap [st.addr, end): they start before end and the largest of them
// ends after st.addr (f checks each task's own object). Called with
// tasks.mu held.
func (g *depGraph) overlapping(st *depState, end uintptr, f func(*depState)) {
	lo := uintptr(0)
	if st.addr > g.maxLen {
		lo = st.addr - g.maxLen
	}
	g.lo.addr, g.hi.addr = lo, end
	g.byAddr.AscendRange(&g.lo, &g.hi, func(o *depState) bool {
		if o != st && o.end > st.addr {
			f(o)
		}
		return true
	})
}

// reportLocked marks f reported: Taskwait no longer returns it, and the
// dependence history forgets it, so new tasks on the same objects run.
func (ts *tasks) reportLocked(f *failure) {
	if f.reported {
		return
	}
	f.reported = true
	delete(ts.failed, f)
	ts.graph.forget(f)
}

// DepEntries is the number of addresses the dependence history holds, for
// tests of its bound.
func (r *Runtime) DepEntries() (addrs, failed int) {
	r.tasks.mu.Lock()
	defer r.tasks.mu.Unlock()
	return len(r.tasks.graph.hist), len(r.tasks.failed)
}
