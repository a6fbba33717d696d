package main

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goffload/offload"
)

// Kernels of the Any mode: functions of their inputs, as Any-tasks'
// kernels are taken to be (a lost device's are run again). The arithmetic
// wraps, the same on every device and on the host.
var (
	AnyStep = offload.MustKernel3("stress.any.step", func(_ offload.Ctx, k int64, src offload.In[int64], dst offload.InOut[int64]) {
		step(k, src, dst)
	})
	AnySet = offload.MustKernel2("stress.any.set", func(_ offload.Ctx, k int64, dst offload.Out[int64]) {
		set(k, dst)
	})
	AnyMix = offload.MustKernel4("stress.any.mix", func(_ offload.Ctx, k int64, a, b offload.In[int64], dst offload.InOut[int64]) {
		mix(k, a, b, dst)
	})
)

func step(k int64, src, dst []int64) {
	for i := range dst {
		dst[i] = dst[i]*3 + src[i] + k
	}
}

func set(k int64, dst []int64) {
	for i := range dst {
		dst[i] = k + int64(i)*7
	}
}

func mix(k int64, a, b, dst []int64) {
	for i := range dst {
		dst[i] = dst[i]*5 ^ (a[i] - b[i]*3 + k)
	}
}

// anyRun is the state of an Any-mode run.
type anyRun struct {
	*state
	// model is what the shared buffers hold after the tasks made so far,
	// in the order they were made. mm guards it and is held while a task
	// is made, so that the model's order is the runtime's.
	mm    sync.Mutex
	model [][]int64
	left  atomic.Int64 // tasks of the current epoch not made yet
	info  *infoCount
	start time.Time

	kernels, hostTasks atomic.Int64

	// Host tasks of the current epoch that found a buffer other than the
	// model's at their place in the order, and the first few, described.
	smu        sync.Mutex
	stale      int64
	staleNotes []string
}

// anyRec is a task a worker made in the current epoch.
type anyRec struct {
	t      *offload.Task
	err    error // the Wait's, if the worker called it during the epoch
	waited bool
	done   bool // counted in state.done
}

// take reserves one task of the epoch.
func (a *anyRun) take() bool {
	for {
		n := a.left.Load()
		if n <= 0 {
			return false
		}
		if a.left.CompareAndSwap(n, n-1) {
			return true
		}
	}
}

// worker makes tasks until the epoch's are all made, keeping at most
// Window of its own not completed, and returns them; it stops early at the
// run's deadline.
func (a *anyRun) worker(rng *rand.Rand) []anyRec {
	var recs []anyRec
	oldest := 0
	for a.ctx.Err() == nil && a.take() {
		recs = append(recs, anyRec{t: a.task(rng)})
		for len(recs)-oldest > a.cfg.Window {
			if !a.waitFor(&recs[oldest], rng) {
				return recs
			}
			oldest++
		}
	}
	return recs
}

// waitFor waits for r: for a fraction AnyWait of the tasks with Wait
// (which, for an Any-task, copies what it wrote back into the program's
// memory), else until it is done. False if the run's deadline came first.
func (a *anyRun) waitFor(r *anyRec, rng *rand.Rand) bool {
	if rng.Float64() < a.cfg.AnyWait {
		err := r.t.WaitContext(a.ctx)
		if err != nil && a.ctxErr(err) && !isDone(r.t) {
			return false
		}
		if err == nil || !a.ctxErr(err) {
			r.err, r.waited = err, true
		}
	} else {
		select {
		case <-r.t.Done():
		case <-a.ctx.Done():
			return false
		}
	}
	a.completed(r)
	return true
}

// completed counts r as done (once) for the progress lines and the faults
// due after so many tasks.
func (a *anyRun) completed(r *anyRec) {
	if r.done {
		return
	}
	r.done = true
	a.state.completed()
}

// task makes one task, and applies it to the model, under mm: an Any-task
// (step: read one buffer, update another; set: overwrite one; mix: read
// two, update a third), or a host task (Async.Go) on the same buffers
// that checks it finds them as the model has them at its place in the
// order (step, set, or a read only).
func (a *anyRun) task(rng *rand.Rand) *offload.Task {
	nb := len(a.bufs)
	i := rng.IntN(nb)
	j := (i + 1 + rng.IntN(nb-1)) % nb
	l := rng.IntN(nb)
	for l == i || l == j {
		l = rng.IntN(nb)
	}
	k := int64(rng.IntN(1 << 20))
	b, m := a.bufs, a.model
	a.mm.Lock()
	defer a.mm.Unlock()
	switch r := rng.IntN(20); {
	case r < 9:
		a.kernels.Add(1)
		step(k, m[i], m[j])
		return AnyStep.Nowait(offload.Any().Nowait(), k, b[i], b[j])
	case r < 11:
		a.kernels.Add(1)
		set(k, m[j])
		return AnySet.Nowait(offload.Any().Nowait(), k, b[j])
	case r < 14:
		a.kernels.Add(1)
		mix(k, m[i], m[l], m[j])
		return AnyMix.Nowait(offload.Any().Nowait(), k, b[i], b[l], b[j])
	case r < 17:
		a.hostTasks.Add(1)
		src, dst := b[i], b[j]
		wantSrc, wantDst := slices.Clone(m[i]), slices.Clone(m[j])
		step(k, m[i], m[j])
		return offload.Nowait(offload.DependIn(src), offload.DependInOut(dst)).Go("stress.any.host.step", func() error {
			a.expect("step's input", i, src, wantSrc)
			a.expect("step's output", j, dst, wantDst)
			step(k, src, dst)
			return nil
		})
	case r < 18:
		a.hostTasks.Add(1)
		dst := b[j]
		set(k, m[j])
		return offload.Nowait(offload.DependOut(dst)).Go("stress.any.host.set", func() error {
			set(k, dst)
			return nil
		})
	default:
		a.hostTasks.Add(1)
		src, want := b[i], slices.Clone(m[i])
		return offload.Nowait(offload.DependIn(src)).Go("stress.any.host.read", func() error {
			a.expect("read", i, src, want)
			return nil
		})
	}
}

// expect counts a host task that finds shared buffer n other than want,
// what the tasks before it in program order leave there.
func (a *anyRun) expect(what string, n int, got, want []int64) {
	if slices.Equal(got, want) {
		return
	}
	a.smu.Lock()
	defer a.smu.Unlock()
	a.stale++
	if len(a.staleNotes) < 3 {
		at := 0
		for at < len(got) && got[at] == want[at] {
			at++
		}
		a.staleNotes = append(a.staleNotes, fmt.Sprintf("a host task (%s) found shared buffer %d element %d = %d, want %d (what the tasks before it in program order leave)",
			what, n, at, got[at], want[at]))
	}
}

// takeStale returns the epoch's stale reads and their notes, and starts
// the next epoch's.
func (a *anyRun) takeStale() (int64, []string) {
	a.smu.Lock()
	defer a.smu.Unlock()
	n, notes := a.stale, a.staleNotes
	a.stale, a.staleNotes = 0, nil
	return n, notes
}

// infoCount counts the runtime's info lines about Any-tasks (GOFFLOAD_INFO
// placement, which the Any mode turns on): placements, tasks run again
// after a device was lost, outputs read from a device that kept them
// instead, and data recomputed into the program's memory. The runtime
// writes one line per Write.
type infoCount struct {
	placed, reruns, kept, restores atomic.Int64
	fwd                            io.Writer // the lines go on here too, if not nil
}

var (
	placedLine  = []byte(": Any(): ")
	rerunLine   = []byte(" ran again on ")
	restoreLine = []byte("recomputed into the program's memory")
	keptLine    = []byte("still holds it as the task left it")
	fullLine    = []byte("memory is full")
)

func (c *infoCount) Write(p []byte) (int, error) {
	switch {
	case bytes.Contains(p, rerunLine):
		c.reruns.Add(1)
	case bytes.Contains(p, restoreLine):
		c.restores.Add(1)
	case bytes.Contains(p, keptLine):
		c.kept.Add(1)
	case bytes.Contains(p, fullLine):
		// a copy freed to make room: not a placement
	case bytes.Contains(p, placedLine) && bytes.HasPrefix(p, []byte("goffload device ")):
		c.placed.Add(1)
	}
	if c.fwd != nil {
		c.fwd.Write(p)
	}
	return len(p), nil
}
