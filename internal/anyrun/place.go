package anyrun

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"time"

	"github.com/goffload/offload/internal/config"
	"github.com/goffload/offload/internal/core"
	"github.com/goffload/offload/internal/mapping"
	"github.com/goffload/offload/internal/placement"
	"github.com/goffload/offload/plugin"
)

// anyTask is an Any-task being placed: its launch and its accesses acc. The
// accesses' slices are bufs, each of the argument argOf names. size is the
// bytes they span (the model's size class).
type anyTask struct {
	AnyLaunch
	acc   []placement.Access
	bufs  []anyBuf
	argOf []int
	size  int64
	rec   *core.Graph // the graph being recorded it is a node of, or nil
}

// errAnyLost says that a device a placement chose, or copies from, was
// lost meanwhile: it made no task.
var errAnyLost = errors.New("a device was lost while the task was placed")

// usable reports whether device d can take Any-tasks: opened and not lost.
func (s *anySched) usable(d int) bool {
	cd := s.rt.Devices[d]
	return cd.Unavailable == nil && cd.Lost() == nil
}

// canRun reports whether device d can run tasks of t's kernel. d must be
// usable, with code for it where it needs its own (plugin.KernelChecker).
func (s *anySched) canRun(d int, t *AnyLaunch) bool {
	if !s.usable(d) {
		return false
	}
	kc, ok := s.rt.Devices[d].Dev.(plugin.KernelChecker)
	return !ok || kc.CanLaunch(t.Kernel) == nil
}

// place chooses t's device and makes its copies and its task. A device may be
// found lost meanwhile: its memory or a copy from it refused. It is then left
// out and the task placed again.
func (s *anySched) place(t *anyTask) (*core.Task, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for try := 0; ; try++ {
		s.noteLost()
		task, err := s.placeOnce(t)
		if err != errAnyLost {
			return task, err
		}
		if try == maxRerunTries {
			return nil, fmt.Errorf("%w: %w, %d times", plugin.ErrDeviceLost, err, try+1)
		}
	}
}

// placeOnce is one try of place, with s.mu held.
func (s *anySched) placeOnce(t *anyTask) (*core.Task, error) {
	if t.rec != nil {
		recordStart(t.rec, s)
	}
	now := time.Now()
	s.mmu.Lock()
	p, err := placement.Place(s.table, s.model, now, t.Kernel.Name(), t.size, t.acc, func(d int) bool { return s.canRun(d, &t.AnyLaunch) })
	s.mmu.Unlock()
	if p.Choice.Dev < 0 {
		return nil, fmt.Errorf("%w: no device can run it: every device is lost, unavailable, or has no code for the kernel (PTX, OpenCL C)", core.ErrNoDevice)
	}
	if errors.Is(err, placement.ErrOverlap) {
		return nil, fmt.Errorf("%w: %w: name the whole buffer first with Any().EnterData(To(x)), or call Taskwait, which gives Any-tasks' buffers back, before using another section", core.ErrBadMap, err)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", core.ErrBadMap, err)
	}
	s.keepFirst(t, p)
	d := p.Choice.Dev
	if err := s.allocate(d, p.Alloc, p.Regions); err != nil {
		return nil, err
	}
	why, err := s.copyIn(d, p.Copies, t.rec)
	if err != nil {
		return nil, err
	}
	return s.spawn(t, p, now, why)
}

// keepFirst records the regions of t's accesses that the runtime did not hold
// yet. It keeps the first versions t's re-runs would read.
func (s *anySched) keepFirst(t *anyTask, p placement.Plan) {
	var keep []placement.Buf
	if s.rr.on {
		keep = placement.FirstVersions(t.acc, p, func(r placement.Buf) (bool, bool) {
			b, ok := s.bufs[r]
			return ok, b.first
		})
	}
	for i, b := range t.bufs {
		if _, ok := s.bufs[p.Regions[i]]; !ok { // a new region: this slice
			s.bufs[p.Regions[i]] = b
		}
	}
	for _, r := range keep {
		rb := s.bufs[r]
		rb.first = false
		s.bufs[r] = rb
		s.snapshotTask(r, rb.v)
	}
}

// allocate maps memory on d for the regions alloc, which d has none for. The
// memory stays until Taskwait gives the buffers back. Where d's memory is
// full, it first frees copies no task needs any more, but for keep's.
func (s *anySched) allocate(d int, alloc, keep []placement.Buf) error {
	cd := s.rt.Devices[d]
	for _, b := range alloc {
		x, name, err := s.section(b, b)
		if err != nil {
			return err
		}
		m := []core.MapItem{{Buf: sliceBuf(x, name)}}
		err = cd.EnterData(context.Background(), m)
		for err != nil && errors.Is(err, plugin.ErrOutOfMemory) {
			if !s.evict(d, keep) {
				break
			}
			err = cd.EnterData(context.Background(), m)
		}
		if err != nil {
			if isLost(err) && !s.usable(d) {
				return errAnyLost
			}
			return err
		}
	}
	return nil
}

// copyIn makes the copies to d that a task's inputs need. Each is a task
// ordered after three things: the last writer of the section, and the copy
// that made the source valid. That copy is a copy back where the source is the
// host. The third is the tasks that use d's copy now. It returns what the
// trace says of them. Where rec is not nil, each copy is a node of that graph
// too.
func (s *anySched) copyIn(d int, copies []placement.Copy, rec *core.Graph) (string, error) {
	var why strings.Builder
	cd := s.rt.Devices[d]
	for _, c := range copies {
		x, name, err := s.section(c.Region, c.Buf)
		if err != nil {
			return "", err
		}
		deps := []core.Dep{sliceDep(core.DepIn, x), tokDep(core.DepOut, s.token(c.Region, d, c.Buf)), tokDep(core.DepIn, s.token(c.Region, c.From, c.Buf))}
		from, n, made := c.From, int64(c.Buf.Size), time.Now()
		var pieces []placement.Piece // what the copy brings, for re-runs
		var h anyHeld
		var op core.Op
		var on *core.Device
		var dst, src core.Loc
		buf := sliceBuf(x, name)
		if c.From == placement.Host {
			on, op = cd, core.UpdateOp([]core.MapItem{{Buf: buf, Type: mapping.MapTo}})
		} else {
			dp, err := cd.MappedPtr(buf)
			if err == nil {
				var sp plugin.Ptr
				if sp, err = s.rt.Devices[c.From].MappedPtr(buf); err == nil {
					dst, src = core.Loc{Dev: cd, Ptr: dp}, core.Loc{Dev: s.rt.Devices[c.From], Ptr: sp}
					on, op = core.MemcpyOp(dst, src, n)
				}
			}
			if err != nil {
				if isLost(err) && !(s.usable(d) && s.usable(c.From)) {
					return "", errAnyLost
				}
				return "", err
			}
		}
		if s.rr.on {
			to, b := anyDest{d, x}, c.Buf
			pieces, h = s.table.Writers(c.Buf), s.placed(c.Region, d, c.Buf)
			op.Recover = func(err error, used bool) error { return s.recoverCopy(to, from, b, pieces, err, used) }
		}
		op.Done = func(err error, ready time.Time) {
			if err == nil {
				s.mmu.Lock()
				s.model.Copied(from, d, n, made, ready, time.Now())
				s.mmu.Unlock()
				if pieces != nil {
					s.heldBy(pieces, h)
				}
			}
		}
		if rec != nil {
			rec.NoteAny(recordCopy(rec, cd, c, buf, dst, src, deps))
		}
		s.rt.Spawn(on, op, deps, false)
		fmt.Fprintf(&why, "; copies %q (%d bytes at %#x) from %s", name, c.Buf.Size, c.Buf.Addr, placeName(c.From))
	}
	return why.String(), nil
}

// spawn makes t's task on the device p chose. Its depend clauses are its own,
// its buffers' as its parameters say, and the device's copies'.
func (s *anySched) spawn(t *anyTask, p placement.Plan, now time.Time, why string) (*core.Task, error) {
	d, choice := p.Choice.Dev, p.Choice
	cd := s.rt.Devices[d]
	deps := append([]core.Dep(nil), t.Deps...)
	for i, ac := range t.acc {
		if ac.Write {
			deps = append(deps, sliceDep(core.DepInOut, t.bufs[i].v), tokDep(core.DepInOut, s.token(p.Regions[i], d, ac.Buf)))
		} else {
			deps = append(deps, sliceDep(core.DepIn, t.bufs[i].v), tokDep(core.DepIn, s.token(p.Regions[i], d, ac.Buf)))
		}
	}
	present := make([]core.KernelArg, len(t.Args))
	copy(present, t.Args)
	for i := range present {
		if present[i].Slice.IsValid() && !present[i].DevPtr {
			present[i].Map.Type = mapping.MapType(0) // present: the copies are the tasks above
		}
	}
	op := core.TargetOpWith(t.Kernel, present, t.Geo)
	e := s.entry(t, p.Reads)
	if e != nil && !t.Once {
		outs := make([]reflect.Value, len(t.bufs))
		for i, b := range t.bufs {
			outs[i] = b.v
		}
		op.Recover = func(err error, _ bool) error { return s.recoverTask(e, d, outs, err) }
	}
	id := s.rr.next  // s.entry numbered it, for the table (Commit) and the model
	var hs []anyHeld // d's copies of what it writes, once it ran well
	if s.rr.on {     // counted whether or not it can run again: it overwrites d's copies
		for i, ac := range t.acc {
			if ac.Write {
				hs = append(hs, s.placed(p.Regions[i], d, ac.Buf))
			}
		}
	}
	name, class := t.Kernel.Name(), placement.SizeClass(t.size)
	placed := time.Now()
	var tid atomic.Uint64 // its task's number, once made: the device's time of it (times.go)
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
	for _, ac := range t.acc {
		if ac.Write {
			writes = append(writes, ac.Buf)
		}
	}
	if t.rec != nil {
		t.rec.NoteAny(recordLaunch(t.rec, t, d, present, deps))
	}
	task := s.rt.Spawn(cd, op, deps, false)
	s.launching(task.ID)
	tid.Store(task.ID)
	select {
	case <-task.Done(): // ended before: its Done may have found no number
		s.took(task.ID)
	default: // its Done, after, finds the number
	}
	s.table.Commit(d, t.acc, id)
	s.tracked.Store(int64(s.table.Len()))
	if len(writes) > 0 {
		s.wmu.Lock()
		s.writes[task.ID] = writes
		s.wmu.Unlock()
	}
	s.rt.Log.Taskf(config.InfoPlacement, d, task.ID, "Any(): %s on %s: %v%s", name, cd.Label(), choice, why)
	s.rt.Note(task.ID, fmt.Sprintf("Any(): on %s: %v%s", cd.Label(), choice, why))
	if e != nil {
		e.task.Store(task.ID)
	}
	return task, nil
}

// evict frees the memory on device d of one region, but for keep. It picks the
// largest region whose copy on d no longer matters: its parts are valid
// elsewhere too. It frees it once the tasks and copies that use that copy are
// done. It reports whether it freed one. s.mu is held: placements wait
// meanwhile.
func (s *anySched) evict(d int, keep []placement.Buf) bool {
	for _, b := range s.table.Evictable(d, keep) {
		x, name, err := s.section(b, b)
		if err != nil {
			continue
		}
		// After every task and copy that uses d's copy (each depends on
		// its token); copies into d made later come after it.
		s.rr.evicts.Add(1) // before it is freed: reads of it in flight fail their check
		op := core.ExitDataOp([]core.MapItem{{Buf: sliceBuf(x, name), Type: mapping.MapDelete}})
		t := s.rt.Spawn(s.rt.Devices[d], op, []core.Dep{tokDep(core.DepInOut, s.token(b, d, b))}, false)
		if err := t.Wait(context.Background()); err != nil {
			s.rt.Log.Printf(config.InfoPlacement, d, "Any(): freeing %q (%d bytes) on device %d to make room failed: %v", name, b.Size, d, err)
			return false
		}
		s.table.Drop(d, b)
		s.rt.Log.Printf(config.InfoPlacement, d, "Any(): device %d's memory is full: freed its copy of %q (%d bytes at %#x), valid elsewhere too", d, name, b.Size, b.Addr)
		return true
	}
	return false
}

// isLost reports whether err says a device was lost.
func isLost(err error) bool { return errors.Is(err, plugin.ErrDeviceLost) }

func placeName(p int) string {
	if p == placement.Host {
		return "the host"
	}
	return fmt.Sprintf("device %d", p)
}
