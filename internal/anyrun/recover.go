package anyrun

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/goffload/offload/internal/config"
	"github.com/goffload/offload/internal/core"
	"github.com/goffload/offload/internal/placement"
	"github.com/goffload/offload/plugin"
)

// A lost device's Any-tasks run again (docs/tasks.md, "When a device is
// lost"). The runtime keeps, until Taskwait gives the buffers back:
//
//   - each region's first version (its snapshot), taken when the first
//     task that uses it is ready to read it;
//   - each Any-task's description (anyEntry): its kernel, its arguments,
//     and for what it reads the task that wrote each part last (the
//     table's Writers: its lineage);
//   - what each host task on those buffers wrote (a host task is not run
//     again: its outputs are kept instead).
//
// A task that fails because a device was lost is not completed (core's
// Op.Recover): once its predecessors are done, its work is done again
// privately, on fresh memory of the program's, on a device that works:
// the tasks that wrote what it reads are re-run first, the same way, back
// to the snapshots, each at most once (anyRerun.memo). Its outputs are then
// put where its dependents look for them: the device it was placed on, if
// that one works, and the copies that were to bring them elsewhere put
// them there from the re-run's memory. Data whose only valid copy was on
// the lost device is recomputed into the program's memory by a host task
// ordered as a copy back would be (restore), and is valid there for the
// tasks placed after.

// anyEntry is an Any-task's description, kept for re-runs.
type anyEntry struct {
	id    int64
	t     *anyTask            // nil: a host task, whose outputs are kept (anyRerun.memo)
	task  atomic.Uint64       // its task's number (Task.ID), for the trace's notes: set once the task is made, which its recovery may race
	reads [][]placement.Piece // per access that reads: who wrote each part last
	// at are the device copies that held what it wrote as it left it,
	// once they did (survive.go); guarded by anyRerun.mu.
	at []anyHeld
}

// anySaved is a part of a buffer as a task left it.
type anySaved struct {
	buf  placement.Buf
	data []byte
}

// anyRerun is what re-runs need. Re-runs take none of anySched.mu, which
// Wait and Taskwait hold while they wait for copies back (that may wait
// for a re-run). Re-runs of different tasks run at once, each on the
// goroutine of the recovery that needed it first (anyRerun.memo).
type anyRerun struct {
	on     bool   // GOFFLOAD_ANY_RERUN is not 0
	onHost bool   // GOFFLOAD_ANY_RERUN_HOST is not 0: re-runs may run on the program's CPU (rerunDevice)
	next   int64  // the last task's id; guarded by anySched.mu
	lost   uint64 // the devices whose loss the table knows; guarded by anySched.mu
	// restores are the restore tasks not waited for yet (see
	// waitRestores); guarded by anySched.mu.
	restores []anyRestore

	mu      sync.Mutex // guards entries, snap, memo and got: a leaf
	entries map[int64]*anyEntry
	snap    map[placement.Buf][]byte // the regions' first versions (written by their snapshot tasks)
	// memo holds, per task, what it wrote: re-run privately (or being
	// re-run), or a host task's own.
	memo map[int64]*anyOutputs
	// got holds, per task, parts of what it wrote read from a device
	// that still held them as it left them (survive.go).
	got map[int64][]anySaved
	// evicts counts the device copies freed to make room: a read of a
	// surviving version checks that none was freed meanwhile.
	evicts atomic.Uint64
	// turns holds a token per recovery running (recovering): as many at
	// once as the program has CPUs.
	turns chan struct{}
}

// anyOutputs is what a task wrote, once done is closed. That is its re-run's
// outputs (or a host task's own), or the error its re-run ended with.
type anyOutputs struct {
	done chan struct{}
	out  []anySaved
	err  error
}

// anyDest is where install puts a buffer's part: the copy on dev (Host:
// the program's memory) of x, the part's own slice.
type anyDest struct {
	dev int
	x   reflect.Value
}

// newRerun is the re-run state of a runtime of ndev devices. It is off where
// there is no other device to re-run on, or GOFFLOAD_ANY_RERUN=0.
func newRerun(ndev int) anyRerun {
	return anyRerun{on: ndev > 1 && os.Getenv("GOFFLOAD_ANY_RERUN") != "0", onHost: os.Getenv("GOFFLOAD_ANY_RERUN_HOST") != "0", entries: map[int64]*anyEntry{},
		snap: map[placement.Buf][]byte{}, memo: map[int64]*anyOutputs{}, got: map[int64][]anySaved{},
		turns: make(chan struct{}, max(2, runtime.GOMAXPROCS(0)))}
}

// recovering runs f, a recovery, once fewer than rr.turns others run. A
// recovery is of a task, a copy, or data only a lost device held. Re-runs
// happen on the recovering goroutines. A loss with many tasks pending would
// otherwise run them all at once, each with its inputs in memory. A recovery
// waits in its turn only for re-runs that other recoveries make in theirs
// (anyRerun.memo). So there is no cycle.
func (s *anySched) recovering(f func() error) error {
	s.rr.turns <- struct{}{}
	defer func() { <-s.rr.turns }()
	return f()
}

// maxRerunTries is how many devices a re-run tries before it gives up.
const maxRerunTries = 3

// sliceBytes is the memory of v, a slice.
func sliceBytes(v reflect.Value) []byte {
	n := uintptr(v.Len()) * v.Type().Elem().Size()
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(v.UnsafePointer()), n)
}

// snapshotTask keeps region's first version once the tasks before it that
// write it are done. It does so before any copy of it from the program's
// memory; the copies wait on the host's token. s.mu is held.
func (s *anySched) snapshotTask(region placement.Buf, v reflect.Value) {
	deps := []core.Dep{sliceDep(core.DepIn, v), tokDep(core.DepOut, s.token(region, placement.Host, region))}
	s.rt.SpawnHost("Any(): snapshot", func() error {
		b := slices.Clone(sliceBytes(v))
		s.rr.mu.Lock()
		s.rr.snap[region] = b
		s.rr.mu.Unlock()
		return nil
	}, deps)
}

// entry records Any-task t; s.mu is held. For its accesses that read, reads
// says what they read (the table's Writers, per access). It returns nil where
// the task cannot be re-run. That is where re-runs are off, or its arguments
// are not one per parameter (a struct holding slices, With clauses).
func (s *anySched) entry(t *anyTask, reads [][]placement.Piece) *anyEntry {
	s.rr.next++
	if !s.rr.on || !t.Plain {
		return nil
	}
	e := &anyEntry{id: s.rr.next, t: t, reads: reads}
	s.rr.mu.Lock()
	s.rr.entries[e.id] = e
	s.rr.mu.Unlock()
	return e
}

// keepHostOutputs records host task id's outputs as it left them. They are the
// parts of the program's memory it wrote (outs, which are acc's writes).
func (s *anySched) keepHostOutputs(id int64, acc []placement.Access, outs [][]byte) {
	var out []anySaved
	for i, a := range acc {
		if a.Write {
			out = append(out, anySaved{buf: a.Buf, data: slices.Clone(outs[i])})
		}
	}
	done := make(chan struct{})
	close(done)
	s.rr.mu.Lock()
	s.rr.memo[id] = &anyOutputs{done: done, out: out}
	s.rr.mu.Unlock()
}

// noteLost tells the table about devices lost since it last looked. It makes
// the restore tasks of the data whose only valid copy they held. s.mu is held.
func (s *anySched) noteLost() {
	if !s.rr.on {
		return
	}
	for d := range s.rt.Devices {
		bit := uint64(1) << d
		if d >= placement.MaxDevices || s.rr.lost&bit != 0 || s.rt.Devices[d].Lost() == nil {
			continue
		}
		s.rr.lost |= bit
		for _, g := range s.table.Lost(d) {
			s.restoreTask(g, d)
		}
	}
}

// restoreTask recomputes g into the program's memory; g's only valid copy was
// on device lost. It runs after the last task that writes g, as a copy back
// would. It records that the host's copy is valid; s.mu is held.
func (s *anySched) restoreTask(g placement.Buf, lost int) {
	region := s.table.Region(g)
	x, name, err := s.section(region, g)
	if err != nil {
		return // not on its elements: no task can read it either
	}
	pieces := s.table.Writers(g)
	deps := []core.Dep{sliceDep(core.DepIn, x), tokDep(core.DepOut, s.token(region, placement.Host, g))}
	rt := s.rt.SpawnHost("Any(): restore "+name, func() error {
		return s.recovering(func() error { return s.install(anyDest{placement.Host, x}, g, pieces) })
	}, deps)
	s.rr.restores = append(s.rr.restores, anyRestore{buf: g, name: name, lost: lost, t: rt})
	s.rt.Note(rt.ID, fmt.Sprintf("Any(): %q (%d bytes at %#x) had its only valid copy on a lost device: recomputed from the tasks that wrote it (last: task %d)", name, g.Size, g.Addr, pieces[len(pieces)-1].Writer))
	s.table.HostValid(g)
	s.rt.Log.Printf(config.InfoPlacement, -1, "Any(): %q (%d bytes at %#x) had its only valid copy on a lost device: recomputed into the program's memory", name, g.Size, g.Addr)
}

// anyRestore is a restore task and the part of a buffer it recomputes: its
// name, and the device that held its only valid copy.
type anyRestore struct {
	buf  placement.Buf
	name string
	lost int
	t    *core.Task
}

// waitRestores waits for the restore tasks made so far of the parts that
// overlap bufs (all where bufs is nil). It returns their errors; s.mu is held.
// The host's copy of what they restore counts as valid from their making on.
// Later tasks are ordered after them. So whatever gives the program its memory
// back waits for them first. That is Wait's copies back, and Taskwait's
// hand-back, which also drops the first versions they read. A device lost just
// before then left them running.
//
// A restore may not run because the task that wrote its data failed (not
// re-run: a Once kernel). It adds no error of its own. That task's failure is
// reported, by its Wait or by Taskwait.
func (s *anySched) waitRestores(ctx context.Context, bufs []placement.Buf) error {
	var errs []error
	left := s.rr.restores[:0]
	for _, r := range s.rr.restores {
		if bufs != nil && !slices.ContainsFunc(bufs, r.buf.Overlaps) {
			left = append(left, r)
			continue
		}
		if err := r.t.Wait(ctx); err != nil {
			if ctx.Err() != nil {
				left = append(left, r)
			}
			if !errors.Is(err, core.ErrDependency) || ctx.Err() != nil {
				errs = append(errs, core.Errorf("goffload: Any(): recomputing %q (%d bytes at %#x), whose only valid copy was on lost device %d: %w", r.name, r.buf.Size, r.buf.Addr, r.lost, err))
			}
		}
	}
	clear(s.rr.restores[len(left):])
	s.rr.restores = left
	return errors.Join(errs...)
}

// install puts the parts pieces name, as their writers left them, into
// b's copy at to, re-running the writers where needed.
func (s *anySched) install(to anyDest, b placement.Buf, pieces []placement.Piece) error {
	data := make([]byte, b.Size)
	for _, p := range pieces {
		src, err := s.version(p, true)
		if err != nil {
			return err
		}
		copy(data[p.Buf.Addr-b.Addr:], src)
	}
	mem := sliceBytes(to.x)
	if len(mem) != len(data) {
		return fmt.Errorf("%w: [%#x, +%d) is not the part of a buffer it was", core.ErrBadMap, b.Addr, b.Size)
	}
	if to.dev == placement.Host {
		copy(mem, data)
		return nil
	}
	cd := s.rt.Devices[to.dev]
	dp, err := cd.MappedPtr(sliceBuf(to.x, ""))
	if err != nil {
		return err
	}
	return core.Memcpy(core.Loc{Dev: cd, Ptr: dp}, core.Loc{Host: data}, int64(b.Size))
}

// version returns p's bytes as its writer left them. If none wrote p, they
// come from the snapshot. Else they come from what the writer's re-run kept
// (or, for a host task, the task itself). Else they come from a device copy
// that still holds them (survivor). Else it re-runs the writer. top says that
// no task that writes p runs before the caller is done with it.
func (s *anySched) version(p placement.Piece, top bool) ([]byte, error) {
	w, held := s.writer(p, top)
	src, hs := placement.SourceOf(p, w, s.usable)
	switch src {
	case placement.FromSnapshot:
		s.rr.mu.Lock()
		defer s.rr.mu.Unlock()
		for r, b := range s.rr.snap {
			if p.Buf.Inside(r) {
				return b[p.Buf.Addr-r.Addr:][:p.Buf.Size], nil
			}
		}
		return nil, fmt.Errorf("%w: [%#x, +%d) was never copied from the program's memory, so no first version of it was kept", plugin.ErrDeviceLost, p.Buf.Addr, p.Buf.Size)
	case placement.FromSaved:
		s.rr.mu.Lock()
		data := savedPart(s.rr.got[p.Writer], p.Buf)
		s.rr.mu.Unlock()
		if data != nil {
			return data, nil
		}
	case placement.FromSurvivor:
		if data := s.survivor(p, hs, held, top); data != nil {
			s.rr.mu.Lock()
			s.rr.got[p.Writer] = append(s.rr.got[p.Writer], anySaved{buf: p.Buf, data: data})
			s.rr.mu.Unlock()
			return data, nil
		}
	}
	out, err := s.outputs(p.Writer, false) // FromMemo, FromRerun, or no survivor could be read
	if err != nil {
		return nil, err
	}
	if data := savedPart(out, p.Buf); data != nil {
		return data, nil
	}
	return nil, fmt.Errorf("%w: task %d's outputs hold no [%#x, +%d)", plugin.ErrDeviceLost, p.Writer, p.Buf.Addr, p.Buf.Size)
}

// writer returns what the runtime holds of p's writer, for placement.SourceOf.
// It also returns its records of the device copies that held its version (the
// holders' Ref). top is as for version.
func (s *anySched) writer(p placement.Piece, top bool) (placement.Writer, []anyHeld) {
	var w placement.Writer
	if p.Writer == 0 {
		return w, nil
	}
	s.rr.mu.Lock()
	defer s.rr.mu.Unlock()
	if s.rr.memo[p.Writer] != nil {
		w.Memo = true
		return w, nil
	}
	for _, sv := range s.rr.got[p.Writer] {
		w.Saved = append(w.Saved, sv.buf)
	}
	e := s.rr.entries[p.Writer]
	if e == nil || e.t == nil {
		return w, nil
	}
	if _, ok := e.part(p.Buf); !ok {
		return w, nil
	}
	held := slices.Clone(e.at)
	for i, h := range held {
		w.Holders = append(w.Holders, placement.Holder{Buf: h.buf, Dev: h.dev, Intact: h.intact(top), Ref: i})
	}
	return w, held
}

// savedPart returns b's bytes from the saved part of saved that holds it
// (elements are appended, never changed), or nil.
func savedPart(saved []anySaved, b placement.Buf) []byte {
	for _, sv := range saved {
		if b.Inside(sv.buf) {
			return sv.data[b.Addr-sv.buf.Addr:][:b.Size]
		}
	}
	return nil
}

// outputs returns what task id wrote. It is kept (a host task's, or its
// re-run's), or it comes from its re-run. outputs makes that re-run unless
// another goroutine is making it; then it waits for that one. top is as for
// rerun. A re-run that failed is forgotten: a later need tries again.
func (s *anySched) outputs(id int64, top bool) ([]anySaved, error) {
	s.rr.mu.Lock()
	o := s.rr.memo[id]
	if o != nil {
		s.rr.mu.Unlock()
		<-o.done // a re-run's waits are on the tasks it reads from: no cycle
		return o.out, o.err
	}
	o = &anyOutputs{done: make(chan struct{})}
	s.rr.memo[id] = o
	s.rr.mu.Unlock()
	o.out, o.err = s.rerun(id, top)
	if o.err != nil {
		s.rr.mu.Lock()
		if s.rr.memo[id] == o {
			delete(s.rr.memo, id)
		}
		s.rr.mu.Unlock()
	}
	close(o.done)
	return o.out, o.err
}

// rerun runs entry id again privately, on fresh memory, on a device that
// works. Its inputs are as their writers left them. It keeps what it writes in
// memo (outputs). top says that the task's own task is not done yet, as in a
// recovery of it. Then no task that writes what it reads runs meanwhile.
func (s *anySched) rerun(id int64, top bool) ([]anySaved, error) {
	s.rr.mu.Lock()
	e := s.rr.entries[id]
	s.rr.mu.Unlock()
	if e == nil || e.t == nil {
		return nil, fmt.Errorf("%w: the task that wrote it (%d) cannot run again (it was not kept: GOFFLOAD_ANY_RERUN=0, a struct argument, With clauses, a host task that failed, or a Taskgraph's replay)", plugin.ErrDeviceLost, id)
	}
	t := e.t
	name := t.Kernel.Name()
	args := slices.Clone(t.Args)
	priv := make([]reflect.Value, len(t.acc))
	for i, a := range t.acc {
		ai := t.argOf[i]
		orig := args[ai].Slice
		p := reflect.MakeSlice(orig.Type(), orig.Len(), orig.Len())
		mem := sliceBytes(p)
		for _, piece := range e.reads[i] {
			src, err := s.version(piece, top)
			if err != nil {
				return nil, fmt.Errorf("task %d (%s): %w", id, name, err)
			}
			copy(mem[piece.Buf.Addr-a.Buf.Addr:], src)
		}
		// Fresh memory of the program's, which no Any-task owns.
		args[ai].Slice, args[ai].Map.Buf = p, sliceBuf(p, args[ai].Map.Buf.Name)
		priv[i] = p
	}
	var tries []error
	tried := map[int]bool{}
	for len(tries) < maxRerunTries {
		d := s.rerunDevice(e, tried)
		if d < 0 {
			break
		}
		tried[d] = true
		cd := s.rt.Initial
		if d < len(s.rt.Devices) {
			cd = s.rt.Devices[d]
		}
		err := cd.Run(context.Background(), core.TargetOpWith(t.Kernel, args, t.Geo), false)
		if err == nil {
			var out []anySaved
			for i, a := range t.acc {
				if a.Write {
					out = append(out, anySaved{buf: a.Buf, data: sliceBytes(priv[i])})
				}
			}
			s.rt.Log.Taskf(config.InfoPlacement, d, e.task.Load(), "Any(): %s ran again on %s, a device having been lost", name, s.rerunPlace(d))
			s.rt.Note(e.task.Load(), fmt.Sprintf("Any(): ran again on %s, a device having been lost", s.rerunPlace(d)))
			return out, nil
		}
		tries = append(tries, fmt.Errorf("on %s: %w", s.rerunPlace(d), err))
		if !errors.Is(err, plugin.ErrDeviceLost) {
			break
		}
	}
	if len(tries) == 0 {
		return nil, fmt.Errorf("%w: task %d (%s): no device left to run it again", core.ErrNoDevice, id, name)
	}
	return nil, fmt.Errorf("task %d (%s) could not run again: %w", id, name, errors.Join(tries...))
}

// rerunDevice is the device a re-run of e goes to. It is chosen from those
// that can run e and were not tried: where the model expects it to end first.
// The program's own CPU is one of them: the initial device, numbered
// NumDevices. A re-run's inputs and outputs are in the program's memory. So
// there it needs no copies and waits behind no queue. The devices left are
// busy with the lost device's share of the work besides their own. Its kernel
// time there is taken to be the fastest learned on a CPU device. Those are
// host, local, tcp and mpi: the same Go code on like cores, lost ones
// included. Where none was timed, the host is chosen only if no device can run
// it. An accelerator's time says nothing of the host's.
func (s *anySched) rerunDevice(e *anyEntry, tried map[int]bool) int {
	name, class := e.t.Kernel.Name(), placement.SizeClass(e.t.size)
	s.mmu.Lock()
	defer s.mmu.Unlock()
	bytes := int64(0)
	for _, a := range e.t.acc {
		bytes += int64(a.Buf.Size)
	}
	c := s.model.Choose(time.Now(), name, class, time.Time{}, func(d int) time.Duration {
		return s.model.CopyCost(placement.Host, d, bytes)
	}, func(d int) bool { return !tried[d] && s.canRun(d, &e.t.AnyLaunch) })
	host := len(s.rt.Devices)
	if tried[host] || !s.rr.onHost {
		return c.Dev
	}
	cpu, timed := time.Duration(0), false
	for d, cd := range s.rt.Devices {
		switch cd.Info.Kind {
		case "host", "local", "tcp", "mpi":
			if cd.Info.Serves != "" && cd.Info.Serves != "host" {
				continue // a device process serving a GPU or an OpenCL device: no CPU's time
			}
			if est, ok := s.model.Estimate(name, d, class); ok && (!timed || est < cpu) {
				cpu, timed = est, true
			}
		}
	}
	if c.Dev < 0 || (timed && (c.Trial || cpu < c.Finish)) {
		return host
	}
	return c.Dev
}

// rerunPlace names where a re-run ran: "device N", or "the host" (the
// initial device).
func (s *anySched) rerunPlace(d int) string {
	if d == len(s.rt.Devices) {
		return "the host"
	}
	return fmt.Sprintf("device %d", d)
}

// recoverTask is the Op.Recover of entry e's task on device d (a kernel). The
// work is done again privately. Its outputs are put in d's copy if d works.
// outs are the slices of e's accesses.
func (s *anySched) recoverTask(e *anyEntry, d int, outs []reflect.Value, cause error) error {
	if s.usable(d) && !errors.Is(cause, plugin.ErrDeviceLost) {
		return cause // not a loss: it failed by itself
	}
	return s.recovering(func() error { return s.recoverTaskNow(e, d, outs, cause) })
}

// recoverTaskNow is recoverTask's work, in a recovery's turn.
func (s *anySched) recoverTaskNow(e *anyEntry, d int, outs []reflect.Value, cause error) error {
	name := e.t.Kernel.Name()
	if _, err := s.outputs(e.id, true); err != nil {
		return core.Errorf("goffload: Any(): %s: %w (it failed first with: %w)", name, err, cause)
	}
	if s.usable(d) {
		for i, a := range e.t.acc {
			if a.Write {
				if err := s.install(anyDest{d, outs[i]}, a.Buf, []placement.Piece{{Buf: a.Buf, Writer: e.id}}); err != nil && s.usable(d) {
					return core.Errorf("goffload: Any(): %s ran again, but its outputs could not be put on device %d: %w", name, d, err)
				}
			}
		}
	}
	return nil
}

// recoverCopy is the Op.Recover of a copy of b from device from to to (Host: a
// copy back). pieces name b's parts. The parts are put there from their
// writers' re-runs. That is unless to is a lost device too: nothing reads its
// copy now.
func (s *anySched) recoverCopy(to anyDest, from int, b placement.Buf, pieces []placement.Piece, cause error, used bool) error {
	lost := func(d int) bool { return d != placement.Host && !s.usable(d) }
	if lost(to.dev) {
		return nil
	}
	if used && to.dev != placement.Host {
		// The copy reached its device, whose tasks used it, and may
		// have written newer data there since: writing it again would
		// undo them. The tasks still waiting for it find it there.
		return nil
	}
	if !lost(from) && !errors.Is(cause, plugin.ErrDeviceLost) {
		return cause // not a loss: it failed by itself
	}
	if err := s.recovering(func() error { return s.install(to, b, pieces) }); err != nil {
		if lost(to.dev) { // lost meanwhile: nothing reads its copy now
			return nil
		}
		return core.Errorf("goffload: Any(): copying [%#x, +%d) to %s: %w (it failed first with: %w)", b.Addr, b.Size, placeName(to.dev), err, cause)
	}
	return nil
}
