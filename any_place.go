package offload

import (
	"fmt"
	"strings"
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

// copyCost is what a placement on d costs in copies, by the model's link
// figures.
func (s *anySched) copyCost(from, to int, b placement.Buf) float64 {
	return float64(s.model.CopyCost(from, to, int64(b.Size)))
}

// place chooses the device of a task of k with args kargs (accessing acc,
// whose slices are bufs) and makes its copies and the task.
func (s *anySched) place(a Async, k *Kernel, kargs []core.KernelArg, acc []placement.Access, bufs []anyBuf, size int64, geo plugin.Geometry, fail func(error) *Task) *Task {
	s.mu.Lock()
	defer s.mu.Unlock()
	name, class := k.k.Name(), placement.SizeClass(size)

	s.mmu.Lock()
	var planErr error
	choice := s.model.Choose(name, class, func(d int) time.Duration {
		copies, _, err := s.table.Plan(d, acc, s.copyCost)
		if err != nil {
			planErr = err
		}
		var c time.Duration
		for _, cp := range copies {
			c += s.model.CopyCost(cp.From, cp.To, int64(cp.Buf.Size))
		}
		return c
	}, s.usable)
	s.mmu.Unlock()
	if choice.Dev < 0 {
		return fail(fmt.Errorf("%w: every device is lost or unavailable", ErrNoDevice))
	}
	copies, alloc, err := s.table.Plan(choice.Dev, acc, s.copyCost)
	if err == nil {
		err = planErr
	}
	if err != nil {
		return fail(fmt.Errorf("%w: %w: call Taskwait, which gives Any-tasks' buffers back, before using another section", ErrBadMap, err))
	}
	d := choice.Dev
	dev := On(d)
	cd := s.rt.Devices[d]
	byBuf := make(map[placement.Buf]anyBuf, len(bufs))
	for i, b := range bufs {
		byBuf[acc[i].Buf] = b
		if _, ok := s.bufs[acc[i].Buf]; !ok {
			s.bufs[acc[i].Buf] = b
		}
	}
	// Memory on d for the buffers it has none for: mapped (alloc) until
	// Taskwait gives the buffers back.
	for _, b := range alloc {
		v := byBuf[b]
		m := Alloc(v.v.Interface()).Named(v.name)
		m.byAny = true
		if err := dev.enterData([]Map{m}); err != nil {
			return fail(err)
		}
	}
	// The copies its inputs need, each a task ordered after the last
	// writer of the buffer and before the tasks that use d's copy.
	var why strings.Builder
	for _, c := range copies {
		v := byBuf[c.Buf]
		// After the last writer of the buffer, the copy that made the
		// source valid, and the tasks that use d's copy now.
		deps := []Dep{DependIn(v.v.Interface()), DependOut(s.token(c.Buf, d))}
		if c.From != placement.Host {
			deps = append(deps, DependIn(s.token(c.Buf, c.From)))
		}
		nw := dev.Nowait(deps...)
		if c.From == placement.Host {
			m := To(v.v.Interface()).Named(v.name)
			m.byAny = true
			nw.Update(m)
		} else {
			dp, err := dev.mappedPtr(v.v.Interface())
			if err == nil {
				var sp DevicePtr
				if sp, err = On(c.From).mappedPtr(v.v.Interface()); err == nil {
					nw.Memcpy(dp, sp, int64(c.Buf.Size))
				}
			}
			if err != nil {
				return fail(err)
			}
		}
		fmt.Fprintf(&why, "; copies %q (%d bytes) from %s", v.name, c.Buf.Size, placeName(c.From))
	}
	// The task: its own depend clauses, its buffers' as its parameters
	// say, and d's copies'.
	deps := append([]Dep(nil), a.deps...)
	for i, ac := range acc {
		x := bufs[i].v.Interface()
		if ac.Write {
			deps = append(deps, DependInOut(x))
		} else {
			deps = append(deps, DependIn(x))
		}
		deps = append(deps, DependIn(s.token(ac.Buf, d)))
	}
	present := make([]core.KernelArg, len(kargs))
	copy(present, kargs)
	for i := range present {
		if present[i].Slice.IsValid() && !present[i].DevPtr {
			present[i].Map.Type = mapping.MapType(0) // present: the copies are the tasks above
		}
	}
	op := core.TargetOpWith(k.k, present, geo)
	est := choice.Exec
	placed := time.Now()
	op.Done = func(error) {
		s.mmu.Lock()
		s.model.Done(name, d, class, est, placed, time.Now())
		s.mmu.Unlock()
	}
	s.mmu.Lock()
	s.model.Placed(d, est)
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
		op.Done(t.err)
		return t
	}
	s.table.Commit(d, acc)
	s.tracked.Store(int64(s.table.Len()))
	t.anyWrites, t.any = writes, s
	s.rt.Log.Taskf(core.InfoPlacement, d, t.t.ID, "Any(): %s on %s: %v%s", name, cd.Label(), choice, why.String())
	return t
}

func placeName(p int) string {
	if p == placement.Host {
		return "the host"
	}
	return fmt.Sprintf("device %d", p)
}
