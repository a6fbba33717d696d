package offload

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	"github.com/goffload/offload/internal/core"
	"github.com/goffload/offload/internal/mapping"
	"github.com/goffload/offload/internal/placement"
)

// flush makes the host's copies of bufs valid: each whose valid copies are
// on devices only is copied back from one, after the last task that
// writes it.
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
// writes it, and records that the host's copy is valid; s.mu is held.
func (s *anySched) copyBack(ctx context.Context, c placement.Copy) error {
	t, name, err := s.copyBackTask(c)
	if err != nil {
		return err
	}
	if err := t.WaitContext(ctx); err != nil {
		return fmt.Errorf("goffload: Any(): copying %q back from device %d: %w", name, c.From, err)
	}
	s.table.HostValid(c.Buf)
	return nil
}

// copyBackTask makes the task that copies c.Buf back from device c.From:
// after the last task that writes it and the copy that made c.From's copy
// valid, and before the host tasks that read it. It returns the section's
// name too; s.mu is held.
func (s *anySched) copyBackTask(c placement.Copy) (*Task, string, error) {
	x, name, err := s.section(c.Region, c.Buf)
	if err != nil {
		return nil, "", err
	}
	m := From(x).Named(name)
	m.byAny = true
	nw := On(c.From).Nowait(DependIn(x), DependIn(s.token(c.Region, c.From, c.Buf)), DependOut(s.token(c.Region, placement.Host, c.Buf)))
	if s.rr.on {
		b, from, pieces := c.Buf, c.From, s.table.Writers(c.Buf)
		nw.recover = func(err error, used bool) error {
			return s.recoverCopy(anyDest{placement.Host, x}, from, b, pieces, err, used)
		}
	}
	return nw.Update(m), name, nil
}

// handback makes every buffer's host copy valid and, if release, frees the
// device copies and gives the buffers back to the program (Taskwait: no
// task uses them any more).
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
			m := Delete(x).Named(name)
			m.byAny = true
			if err := On(d).exitData([]Map{m}); err != nil && s.usable(d) {
				errs = append(errs, err)
			}
		}
	}
	clear(s.bufs)
	clear(s.tokens)
	clear(s.mods)
	s.rr.mu.Lock()
	clear(s.rr.entries)
	clear(s.rr.snap)
	clear(s.rr.memo)
	clear(s.rr.got)
	s.rr.mu.Unlock()
	s.tracked.Store(0)
	return errors.Join(errs...)
}

// anyUpdate is Any().Update: From clauses make the host's copies valid.
func anyUpdate(maps []Map) error {
	rt, err := runtimeOrErr()
	if err != nil {
		return err
	}
	var bufs []placement.Buf
	for i, m := range maps {
		if m.err != nil {
			return m.err
		}
		if !m.slice.IsValid() || m.item.Type&mapping.MapTo != 0 || m.item.Type&mapping.MapFrom == 0 {
			return fmt.Errorf("goffload: Any(): update: clause %d: %w: Any() takes From clauses only (the runtime copies the inputs of Any-tasks itself)", i, ErrBadMap)
		}
		bufs = append(bufs, placement.Buf{Addr: m.item.Buf.Addr(), Size: uintptr(m.item.Buf.Size)})
	}
	s := anyOf(rt)
	if s == nil {
		return nil
	}
	return s.flush(context.Background(), bufs)
}

// anyInUse refuses a hand-placed construct's map of b while Any-tasks use
// it.
func anyInUse(b mapping.Buf) error {
	s := anyState.Load()
	if s == nil || s.tracked.Load() == 0 || b.Size == 0 {
		return nil
	}
	pb := placement.Buf{Addr: b.Addr(), Size: uintptr(b.Size)}
	s.mu.Lock()
	c, ok := s.table.Tracked(pb)
	s.mu.Unlock()
	if !ok {
		return nil
	}
	return fmt.Errorf("goffload: map of %q (%d bytes at %#x): %w: Any-tasks use [%#x, +%d) until Taskwait gives it back to the program: call offload.Taskwait first, or make this construct an Any-task too",
		b.Name, b.Size, b.Addr(), ErrBadMap, c.Addr, c.Size)
}

// hostTask makes a host task (Async.Go) whose depend clauses name memory
// that Any-tasks use: it runs on the program's memory, so the parts it
// reads are copied back first from the devices that hold the valid copies,
// and what it writes is then valid on the host only.
func (s *anySched) hostTask(a Async, name string, fn func() error) *Task {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noteLost()
	var acc []placement.Access
	for _, d := range a.deps {
		if d.err != nil || d.dep.Size == 0 {
			continue // start refuses it
		}
		b := placement.Buf{Addr: d.dep.Addr, Size: d.dep.Size}
		if _, ok := s.table.Tracked(b); !ok {
			continue
		}
		acc = append(acc, placement.Access{Buf: b, Read: d.dep.Kind != core.DepOut, Write: d.dep.Kind != core.DepIn})
	}
	copies, err := s.table.PlanHost(acc)
	if err != nil {
		return a.failed(fmt.Errorf("goffload: task %q: %w: %w: call Taskwait, which gives Any-tasks' buffers back, first", name, ErrBadMap, err))
	}
	deps := append([]Dep(nil), a.deps...)
	for _, c := range copies {
		if _, _, err := s.copyBackTask(c); err != nil {
			return a.failed(err)
		}
	}
	for _, ac := range acc {
		deps = append(deps, DependIn(s.token(s.table.Region(ac.Buf), placement.Host, ac.Buf)))
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
					return a.failed(err)
				}
				outs[i] = sliceBytes(reflect.ValueOf(x))
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
	t := Async{dev: a.dev, deps: deps, group: a.group}.start(func(rt *core.Runtime, deps []core.Dep) (*core.Task, error) {
		return rt.SpawnHost(name, run, deps), nil
	})
	if t.t != nil {
		s.table.CommitHost(acc, id)
	}
	return t
}
