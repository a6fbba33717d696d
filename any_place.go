package offload

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/goffload/offload/internal/core"
	"github.com/goffload/offload/internal/mapping"
	"github.com/goffload/offload/internal/placement"
	"github.com/goffload/offload/plugin"
)

// usable reports whether device d can take Any-tasks: opened and not lost.
func (s *anySched) usable(d int) bool {
	cd := s.rt.Devices[d]
	return cd.Unavailable == nil && cd.Lost() == nil
}

// canRun reports whether device d can run kernel k's tasks: usable, and
// with code for k where it needs its own (plugin.KernelChecker).
func (s *anySched) canRun(d int, k *Kernel) bool {
	if !s.usable(d) {
		return false
	}
	kc, ok := s.rt.Devices[d].Dev.(plugin.KernelChecker)
	return !ok || kc.CanLaunch(k.k) == nil
}

// copyCost is what a placement on d costs in copies, by the model's link
// figures.
func (s *anySched) copyCost(from, to int, b placement.Buf) float64 {
	return float64(s.model.CopyCost(from, to, int64(b.Size)))
}

// place chooses the device of a task of k with args kargs (accessing acc,
// whose slices are bufs) and makes its copies and the task. A device found
// lost while it does (its memory or a copy from it refused) is left out
// and the task placed again.
func (s *anySched) place(a Async, k *Kernel, o launchOpts, args []any, kargs []core.KernelArg, acc []placement.Access, bufs []anyBuf, argOf []int, size int64, geo plugin.Geometry, fail func(error) *Task) *Task {
	s.mu.Lock()
	defer s.mu.Unlock()
	for try := 0; ; try++ {
		s.noteLost()
		t, lost := s.placeOnce(a, k, o, args, kargs, acc, bufs, argOf, size, geo, fail)
		if !lost || try == maxRerunTries {
			return t
		}
	}
}

// placeOnce is one try of place, with s.mu held; lost says that a device
// it chose, or copies from, was lost meanwhile (and it made no task).
func (s *anySched) placeOnce(a Async, k *Kernel, o launchOpts, args []any, kargs []core.KernelArg, acc []placement.Access, bufs []anyBuf, argOf []int, size int64, geo plugin.Geometry, fail func(error) *Task) (_ *Task, lost bool) {
	name, class := k.k.Name(), placement.SizeClass(size)

	// The plan of each device the model asks the cost of, kept for the
	// one it chooses.
	type plan struct {
		copies []placement.Copy
		bufs   []placement.Buf // the regions the device has no memory for
		err    error
		made   bool
	}
	plans := make([]plan, len(s.rt.Devices))
	planOn := func(d int) *plan {
		if p := &plans[d]; !p.made {
			p.copies, p.bufs, p.err = s.table.Plan(d, acc, s.copyCost)
			p.made = true
		}
		return &plans[d]
	}
	// Who wrote each part of its inputs last: its lineage (entry), and
	// the tasks the model expects its inputs from.
	reads := make([][]placement.Piece, len(acc))
	for i, ac := range acc {
		if ac.Read {
			reads[i] = s.table.Writers(ac.Buf)
		}
	}
	now := time.Now()
	s.mmu.Lock()
	choice := s.model.ChooseReady(now, name, class, func(d int) (time.Time, time.Duration) {
		return s.model.Ready(now, reads, planOn(d).copies)
	}, func(d int) bool { return s.canRun(d, k) })
	var p *plan
	if choice.Dev >= 0 {
		p = planOn(choice.Dev) // a trial's was not made: the model's copy costs under s.mmu
	}
	s.mmu.Unlock()
	if choice.Dev < 0 {
		return fail(fmt.Errorf("%w: no device can run it: every device is lost, unavailable, or has no code for the kernel (PTX, OpenCL C)", ErrNoDevice)), false
	}
	copies, alloc, err := p.copies, p.bufs, p.err
	if errors.Is(err, placement.ErrOverlap) {
		return fail(fmt.Errorf("%w: %w: name the whole buffer first with Any().EnterData(To(x)), or call Taskwait, which gives Any-tasks' buffers back, before using another section", ErrBadMap, err)), false
	}
	if err != nil {
		return fail(fmt.Errorf("%w: %w", ErrBadMap, err)), false
	}
	d := choice.Dev
	dev := On(d)
	cd := s.rt.Devices[d]
	regions := make([]placement.Buf, len(acc))
	for i := range acc {
		regions[i] = s.table.Region(acc[i].Buf)
	}
	for i, b := range bufs {
		if rb, ok := s.bufs[regions[i]]; !ok { // a new region: this slice
			s.bufs[regions[i]] = b
			// Its first version, for re-runs, if this task reads it: a
			// region that its first task only writes (the first use
			// is the whole region) is never read as the program left it.
			if s.rr.on && s.readsRegion(acc, regions, regions[i]) {
				s.snapshotTask(regions[i], b.v)
			}
		} else if rb.first && s.rr.on && s.readsFirst(reads, regions, regions[i]) {
			rb.first = false
			s.bufs[regions[i]] = rb
			s.snapshotTask(regions[i], rb.v)
		}
	}
	// Memory on d for the regions it has none for: mapped (alloc) until
	// Taskwait gives the buffers back.
	for _, b := range alloc {
		x, name, err := s.section(b, b)
		if err != nil {
			return fail(err), false
		}
		m := Alloc(x).Named(name)
		m.byAny = true
		err = dev.enterData([]Map{m})
		for err != nil && isOutOfMemory(err) {
			// Make room: free a copy on d that no task needs any more,
			// valid somewhere else too.
			if !s.evict(d, regions) {
				break
			}
			err = dev.enterData([]Map{m})
		}
		if err != nil {
			if isLost(err) && !s.usable(d) {
				return nil, true
			}
			return fail(err), false
		}
	}
	// The copies its inputs need, each a task ordered after the last
	// writer of the section, the copy that made the source valid (a copy
	// back, where the source is the host), and
	// the tasks that use d's copy now.
	var why strings.Builder
	for _, c := range copies {
		x, name, err := s.section(c.Region, c.Buf)
		if err != nil {
			return fail(err), false
		}
		deps := []Dep{DependIn(x), DependOut(s.token(c.Region, d, c.Buf)), DependIn(s.token(c.Region, c.From, c.Buf))}
		nw := dev.Nowait(deps...)
		from, n, made := c.From, int64(c.Buf.Size), time.Now()
		var pieces []placement.Piece // what the copy brings, for re-runs
		var h anyHeld
		if s.rr.on {
			to, b := anyDest{d, x}, c.Buf
			pieces, h = s.table.Writers(c.Buf), s.placed(c.Region, d, c.Buf)
			nw.recover = func(err error, used bool) error { return s.recoverCopy(to, from, b, pieces, err, used) }
		}
		nw.done = func(err error, ready time.Time) {
			if err == nil {
				s.mmu.Lock()
				s.model.Copied(from, d, n, made, ready, time.Now())
				s.mmu.Unlock()
				if pieces != nil {
					s.heldBy(pieces, h)
				}
			}
		}
		if c.From == placement.Host {
			m := To(x).Named(name)
			m.byAny = true
			nw.Update(m)
		} else {
			dp, err := dev.mappedPtr(x)
			if err == nil {
				var sp DevicePtr
				if sp, err = On(c.From).mappedPtr(x); err == nil {
					nw.Memcpy(dp, sp, int64(c.Buf.Size))
				}
			}
			if err != nil {
				if isLost(err) && !(s.usable(d) && s.usable(c.From)) {
					return nil, true
				}
				return fail(err), false
			}
		}
		fmt.Fprintf(&why, "; copies %q (%d bytes at %#x) from %s", name, c.Buf.Size, c.Buf.Addr, placeName(c.From))
	}
	// The task: its own depend clauses, its buffers' as its parameters
	// say, and d's copies'.
	deps := append([]Dep(nil), a.deps...)
	for i, ac := range acc {
		x := bufs[i].v.Interface()
		if ac.Write {
			deps = append(deps, DependInOut(x), DependInOut(s.token(regions[i], d, ac.Buf)))
		} else {
			deps = append(deps, DependIn(x), DependIn(s.token(regions[i], d, ac.Buf)))
		}
	}
	present := make([]core.KernelArg, len(kargs))
	copy(present, kargs)
	for i := range present {
		if present[i].Slice.IsValid() && !present[i].DevPtr {
			present[i].Map.Type = mapping.MapType(0) // present: the copies are the tasks above
		}
	}
	op := core.TargetOpWith(k.k, present, geo)
	e := s.entry(k, a.dev, o, args, kargs, acc, argOf, size, reads)
	if e != nil && !k.once {
		outs := make([]any, len(bufs))
		for i, b := range bufs {
			outs[i] = b.v.Interface()
		}
		op.Recover = func(err error, _ bool) error { return s.recoverTask(e, d, outs, err) }
	}
	id := s.rr.next  // s.entry numbered it, for the table (Commit) and the model
	var hs []anyHeld // d's copies of what it writes, once it ran well
	if s.rr.on {     // counted whether or not it can run again: it overwrites d's copies
		for i, ac := range acc {
			if ac.Write {
				hs = append(hs, s.placed(regions[i], d, ac.Buf))
			}
		}
	}
	placed := time.Now()
	var tid atomic.Uint64 // its task's number, once made: the device's time of it (any_times.go)
	op.Done = func(err error, ready time.Time) {
		took := s.took(tid.Load())
		if took > 0 {
			s.devTimed.Add(1)
		}
		s.mmu.Lock()
		s.model.Ran(name, d, class, placed, ready, time.Now(), took)
		s.model.Forget(id)
		s.mmu.Unlock()
		if err == nil && e != nil {
			s.held(e, hs)
		}
	}
	s.mmu.Lock()
	s.model.Placed(now, choice)
	s.model.Expect(id, now, choice)
	s.mmu.Unlock()
	var writes []placement.Buf
	for _, ac := range acc {
		if ac.Write {
			writes = append(writes, ac.Buf)
		}
	}
	t := Async{dev: dev, deps: deps, group: a.group}.start(func(rt *core.Runtime, deps []core.Dep) (*core.Task, error) {
		return rt.Spawn(cd, op, deps, false), nil
	})
	if t.t == nil { // not made: the model must not wait for it
		op.Done(t.err, time.Time{})
		return t, false
	}
	s.launching(t.t.ID)
	tid.Store(t.t.ID)
	select {
	case <-t.t.Done(): // ended before: its Done may have found no number
		s.took(t.t.ID)
	default: // its Done, after, finds the number
	}
	s.table.Commit(d, acc, id)
	s.tracked.Store(int64(s.table.Len()))
	t.anyWrites, t.any = writes, s
	s.rt.Log.Taskf(core.InfoPlacement, d, t.t.ID, "Any(): %s on %s: %v%s", name, cd.Label(), choice, why.String())
	s.rt.Note(t.t.ID, fmt.Sprintf("Any(): on %s: %v%s", cd.Label(), choice, why.String()))
	if e != nil {
		e.task.Store(t.t.ID)
	}
	return t, false
}

// readsRegion reports whether any of accesses acc (in regions) reads
// region r.
func (s *anySched) readsRegion(acc []placement.Access, regions []placement.Buf, r placement.Buf) bool {
	for i, a := range acc {
		if a.Read && regions[i] == r {
			return true
		}
	}
	return false
}

// readsFirst reports whether a task reads a part of region r (its
// accesses in regions, reads their writers) that no task wrote.
func (s *anySched) readsFirst(reads [][]placement.Piece, regions []placement.Buf, r placement.Buf) bool {
	for i, ps := range reads {
		if regions[i] == r && slices.ContainsFunc(ps, func(p placement.Piece) bool { return p.Writer == 0 }) {
			return true
		}
	}
	return false
}

// isOutOfMemory reports whether err says a device's memory is full.
func isOutOfMemory(err error) bool {
	return errors.Is(err, plugin.ErrOutOfMemory) || errors.Is(err, ErrOutOfMemory)
}

// evict frees the memory on device d of the largest region that d's copy
// of no longer matters (its parts are valid elsewhere too), but for keep,
// once the tasks and copies that use that copy are done; it reports
// whether it freed one. s.mu is held: placements wait meanwhile.
func (s *anySched) evict(d int, keep []placement.Buf) bool {
	for _, b := range s.table.Evictable(d, keep) {
		x, name, err := s.section(b, b)
		if err != nil {
			continue
		}
		m := Delete(x).Named(name)
		m.byAny = true
		// After every task and copy that uses d's copy (each depends on
		// its token); copies into d made later come after it.
		s.rr.evicts.Add(1) // before it is freed: reads of it in flight fail their check
		t := On(d).Nowait(DependInOut(s.token(b, d, b))).ExitData(m)
		if err := t.Wait(); err != nil {
			s.rt.Log.Printf(core.InfoPlacement, d, "Any(): freeing %q (%d bytes) on device %d to make room failed: %v", name, b.Size, d, err)
			return false
		}
		s.table.Drop(d, b)
		s.rt.Log.Printf(core.InfoPlacement, d, "Any(): device %d's memory is full: freed its copy of %q (%d bytes at %#x), valid elsewhere too", d, name, b.Size, b.Addr)
		return true
	}
	return false
}

// isLost reports whether err says a device was lost.
func isLost(err error) bool {
	return errors.Is(err, plugin.ErrDeviceLost) || errors.Is(err, ErrDeviceLost)
}

func placeName(p int) string {
	if p == placement.Host {
		return "the host"
	}
	return fmt.Sprintf("device %d", p)
}
