package main

import (
	"errors"
	"math/rand/v2"

	"github.com/goffload/offload"
)

// rec is a task a worker created and has not waited for yet.
type rec struct {
	t      *offload.Task
	writes []int   // shared buffers it adds v to
	v      int64   // what it adds
	out    []int64 // the kernel's or host function's finding: -1 until it ran
	ep     *epoch  // the enter/exit sequence it belongs to, if any
}

// private is a buffer one worker alone uses, for enter data / update / exit
// data sequences (a mapping that outlives a task would hide other
// goroutines' updates of a shared buffer). lo and hi bound its value.
type private struct {
	owner  int
	buf    []int64
	lo, hi int64
}

// epoch is one sequence on a private buffer: enter data, kernels that find
// it present, maybe update from / host add / update to, exit data.
type epoch struct {
	p    *private
	left int   // its tasks not waited for yet
	sum  int64 // what its tasks add in all
	fail bool
}

type worker struct {
	s      *state
	id     int
	rng    *rand.Rand
	window []rec
	priv   *private
}

func (s *state) worker(id int, rng *rand.Rand) {
	w := &worker{s: s, id: id, rng: rng}
	w.newPrivate(s.init[0])
	for s.ctx.Err() == nil {
		switch r := rng.Float64(); {
		case r < s.cfg.Epochs:
			if !s.claim(6) {
				if !s.claim(1) {
					break
				}
				w.task()
				continue
			}
			w.epoch()
			continue
		default:
			if !s.claim(1) {
				break
			}
			w.task()
			continue
		}
		break
	}
	for len(w.window) > 0 && w.waitOldest() {
	}
	// Past the deadline: a task that did not complete may still apply its
	// update, so it bounds its buffers from above like a failed one.
	for _, r := range w.window {
		if isDone(r.t) {
			w.account(r, r.t.Wait())
		} else {
			s.hang.Add(1)
			w.account(r, errHung)
		}
	}
	w.window = nil
}

// errHung stands for the outcome of a task that did not complete in time.
var errHung = errors.New("did not complete before the run's deadline")

func (w *worker) newPrivate(v int64) {
	p := &private{owner: w.id, buf: filled(w.s.cfg.Len, v), lo: v, hi: v}
	w.s.privMu.Lock()
	w.s.privs = append(w.s.privs, p)
	w.s.privMu.Unlock()
	w.priv = p
}

// device picks a device among every device and the initial one; a device
// this run killed is picked a tenth as often.
func (w *worker) device() offload.Device {
	n := offload.NumDevices()
	d := w.rng.IntN(n + 1)
	if w.s.dead[d].Load() && w.rng.IntN(10) != 0 {
		d = w.rng.IntN(n + 1)
	}
	return offload.On(d)
}

// task creates one task on 1 to 3 distinct shared buffers, each written
// (inout or out) or read (in): a kernel on a device or host work.
func (w *worker) task() {
	s := w.s
	k := 1 + w.rng.IntN(3)
	idx := make([]int, 0, 3)
	for len(idx) < k {
		b := w.rng.IntN(s.cfg.Buffers)
		dup := false
		for _, x := range idx {
			dup = dup || x == b
		}
		if !dup {
			idx = append(idx, b)
		}
	}
	var mask int64
	var writes []int
	deps := make([]offload.Dep, k)
	for i, b := range idx {
		switch r := w.rng.IntN(8); {
		case r < 3:
			mask |= 1 << i
			writes = append(writes, b)
			deps[i] = offload.DependInOut(s.bufs[b])
		case r < 4:
			mask |= 1 << i
			writes = append(writes, b)
			deps[i] = offload.DependOut(s.bufs[b])
		default:
			deps[i] = offload.DependIn(s.bufs[b])
		}
	}
	v := 1 + int64(w.rng.IntN(3))
	out := []int64{-1}
	var t *offload.Task
	if w.rng.IntN(5) == 0 {
		bufs := make([][]int64, k)
		for i, b := range idx {
			bufs[i] = s.bufs[b]
		}
		t = offload.Nowait(deps...).Go("stress.host", func() error {
			apply(mask, v, out, bufs...)
			return nil
		})
	} else {
		args := []any{mask, v}
		for i, b := range idx {
			switch {
			case mask&(1<<i) == 0:
				args = append(args, offload.To(s.bufs[b]))
			case w.rng.IntN(4) == 0:
				args = append(args, s.bufs[b]) // implicit tofrom
			default:
				args = append(args, offload.ToFrom(s.bufs[b]))
			}
		}
		args = append(args, offload.From(out))
		t = w.device().Nowait(deps...).Run([]*offload.Kernel{K1, K2, K3}[k-1], args...)
	}
	w.push(rec{t: t, writes: writes, v: v, out: out})
}

// epoch creates six tasks on the worker's private buffer, all on one device:
// enter data, a kernel that finds it present, update from, a host add,
// update to, exit data from.
func (w *worker) epoch() {
	p := w.priv
	d := w.device()
	dep := offload.DependInOut(p.buf)
	ep := &epoch{p: p, left: 6}
	add := func(v int64) (int64, []int64) { ep.sum += v; return v, []int64{-1} }

	w.push(rec{t: d.Nowait(dep).EnterData(offload.To(p.buf)), ep: ep})
	v, out := add(1 + int64(w.rng.IntN(3)))
	var m any = p.buf // present: no copy either way
	if w.rng.IntN(2) == 0 {
		m = offload.ToFrom(p.buf)
	}
	w.push(rec{t: d.Nowait(dep).Run(K1, int64(1), v, m, offload.From(out)), out: out, ep: ep})
	w.push(rec{t: d.Nowait(dep).Update(offload.From(p.buf)), ep: ep})
	u, hout := add(1 + int64(w.rng.IntN(3)))
	w.push(rec{t: offload.Nowait(dep).Go("stress.private", func() error {
		apply(1, u, hout, p.buf)
		return nil
	}), out: hout, ep: ep})
	w.push(rec{t: d.Nowait(dep).Update(offload.To(p.buf)), ep: ep})
	w.push(rec{t: d.Nowait(dep).ExitData(offload.From(p.buf)), ep: ep})
}

// push adds r to the window, waiting for the oldest tasks while it is full.
func (w *worker) push(r rec) {
	w.window = append(w.window, r)
	for len(w.window) > w.s.cfg.Window {
		if !w.waitOldest() {
			return
		}
	}
}

// waitOldest waits for the oldest task of the window and accounts for it;
// false if the run's deadline came first.
func (w *worker) waitOldest() bool {
	s := w.s
	r := w.window[0]
	err := r.t.WaitContext(s.ctx)
	if err != nil && s.ctxErr(err) {
		if !isDone(r.t) {
			return false
		}
		err = r.t.Wait() // it completed as the deadline came
	}
	w.window[0] = rec{}
	w.window = w.window[1:]
	if len(w.window) == 0 {
		w.window = nil // let the backing array go
	}
	w.account(r, err)
	return true
}

// account records the outcome of r: err is nil, the task's error, or
// errHung.
func (w *worker) account(r rec, err error) {
	s := w.s
	if err != errHung {
		s.completed()
	}
	switch {
	case err == nil:
		s.ok.Add(1)
		switch {
		case r.out == nil:
		case r.out[0] < 0:
			s.missing.Add(1)
		case r.out[0] > 0:
			s.torn.Add(r.out[0])
		}
		for _, b := range r.writes {
			s.succ[b].Add(r.v)
		}
	default:
		if err != errHung {
			s.failed.Add(1)
			s.errs.add(err, s.cfg.Errs)
		}
		for _, b := range r.writes {
			s.fail[b].Add(r.v)
		}
	}
	if ep := r.ep; ep != nil {
		ep.fail = ep.fail || err != nil
		if ep.left--; ep.left == 0 {
			ep.p.hi += ep.sum
			if !ep.fail {
				ep.p.lo += ep.sum
			} else {
				// Its device copy may be left mapped and stale: go on
				// with a fresh buffer; this one is checked at the end.
				w.newPrivate(s.init[0])
			}
		}
	}
}
