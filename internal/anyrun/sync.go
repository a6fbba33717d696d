package anyrun

import (
	"context"
	"errors"

	"github.com/goffload/offload/internal/core"
	"github.com/goffload/offload/internal/mapping"
	"github.com/goffload/offload/internal/placement"
)

// flush makes the host's copies of bufs valid. A buffer whose valid copies are
// on devices only is copied back from one. The copy comes after the last task
// that writes it.
func (s *anySched) flush(ctx context.Context, bufs []placement.Buf) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noteLost()
	var errs []error
	if err := s.waitRestores(ctx, bufs); err != nil {
		errs = append(errs, err)
	}
	for _, c := range s.table.StaleOf(bufs) {
		if err := s.copyBack(ctx, c); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// copyBack copies c.Buf back from device c.From, after the last task that
// writes it. It records that the host's copy is valid; s.mu is held.
func (s *anySched) copyBack(ctx context.Context, c placement.Copy) error {
	t, name, err := s.copyBackTask(c)
	if err != nil {
		return err
	}
	if err := t.Wait(ctx); err != nil {
		return core.Errorf("goffload: Any(): copying %q back from device %d: %w", name, c.From, err)
	}
	s.table.HostValid(c.Buf)
	return nil
}

// copyBackTask makes the task that copies c.Buf back from device c.From. The
// task comes after the last task that writes it and the copy that made
// c.From's copy valid. It comes before the host tasks that read it. It returns
// the section's name too; s.mu is held.
func (s *anySched) copyBackTask(c placement.Copy) (*core.Task, string, error) {
	x, name, err := s.section(c.Region, c.Buf)
	if err != nil {
		return nil, "", err
	}
	op := core.UpdateOp([]core.MapItem{{Buf: sliceBuf(x, name), Type: mapping.MapFrom}})
	deps := []core.Dep{sliceDep(core.DepIn, x), tokDep(core.DepIn, s.token(c.Region, c.From, c.Buf)), tokDep(core.DepOut, s.token(c.Region, placement.Host, c.Buf))}
	if s.rr.on {
		b, from, pieces := c.Buf, c.From, s.table.Writers(c.Buf)
		op.Recover = func(err error, used bool) error {
			return s.recoverCopy(anyDest{placement.Host, x}, from, b, pieces, err, used)
		}
	}
	return s.rt.Spawn(s.rt.Devices[c.From], op, deps, false), name, nil
}

// handback makes every buffer's host copy valid. If release, it also frees the
// device copies and gives the buffers back to the program. That is Taskwait:
// no task uses them any more.
func (s *anySched) handback(ctx context.Context, release bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noteLost()
	var errs []error
	if err := s.waitRestores(ctx, nil); err != nil {
		errs = append(errs, err)
	}
	for _, c := range s.table.Stale() {
		if err := s.copyBack(ctx, c); err != nil {
			errs = append(errs, err)
		}
	}
	if !release {
		return errors.Join(errs...)
	}
	for b, devs := range s.table.Release() {
		x, name, err := s.section(b, b)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, d := range devs {
			m := []core.MapItem{{Buf: sliceBuf(x, name), Type: mapping.MapDelete}}
			if err := s.rt.Devices[d].ExitData(context.Background(), m); err != nil && s.usable(d) {
				errs = append(errs, err)
			}
		}
	}
	clear(s.bufs)
	clear(s.tokens)
	clear(s.mods)
	s.wmu.Lock()
	clear(s.writes)
	s.wmu.Unlock()
	s.rr.mu.Lock()
	clear(s.rr.entries)
	clear(s.rr.snap)
	clear(s.rr.memo)
	clear(s.rr.got)
	s.rr.mu.Unlock()
	s.tracked.Store(0)
	return errors.Join(errs...)
}

// SpawnHostAny is SpawnHost for a host task (Async.Go) whose depend
// clauses may name memory that Any-tasks use. The task runs on the
// program's memory. So the parts it reads are copied back first, from the
// devices that hold the valid copies. What it writes is then valid on the
// host only. An error means no task was made.
func SpawnHostAny(r *core.Runtime, name string, fn func() error, deps []core.Dep) (*core.Task, error) {
	s := loadSched(r)
	if s == nil || s.tracked.Load() == 0 {
		return r.SpawnHost(name, fn, deps), nil
	}
	return s.hostTask(name, fn, deps)
}

// hostTask is SpawnHostAny's task while Any-tasks use some memory.
func (s *anySched) hostTask(name string, fn func() error, deps []core.Dep) (*core.Task, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noteLost()
	var acc []placement.Access
	for _, d := range deps {
		if d.Size == 0 {
			continue
		}
		b := placement.Buf{Addr: d.Addr, Size: d.Size}
		if _, ok := s.table.Tracked(b); !ok {
			continue
		}
		acc = append(acc, placement.Access{Buf: b, Read: d.Kind != core.DepOut, Write: d.Kind != core.DepIn})
	}
	copies, err := s.table.PlanHost(acc)
	if err != nil {
		return nil, core.Errorf("goffload: task %q: %w: %w: call Taskwait, which gives Any-tasks' buffers back, first", name, core.ErrBadMap, err)
	}
	deps = append([]core.Dep(nil), deps...)
	for _, c := range copies {
		if _, _, err := s.copyBackTask(c); err != nil {
			return nil, err
		}
	}
	for _, ac := range acc {
		deps = append(deps, tokDep(core.DepIn, s.token(s.table.Region(ac.Buf), placement.Host, ac.Buf)))
	}
	s.rr.next++
	id := s.rr.next
	run := fn
	if s.rr.on {
		outs := make([][]byte, len(acc))
		for i, ac := range acc {
			if ac.Write {
				x, _, err := s.section(s.table.Region(ac.Buf), ac.Buf)
				if err != nil {
					return nil, err
				}
				outs[i] = sliceBytes(x)
			}
		}
		run = func() error {
			err := fn()
			if err == nil {
				s.keepHostOutputs(id, acc, outs)
			}
			return err
		}
	}
	t := s.rt.SpawnHost(name, run, deps)
	s.table.CommitHost(acc, id)
	return t, nil
}
