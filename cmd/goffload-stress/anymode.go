package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goffload/offload"
)

// The Any mode (-any): the workers' tasks are Any-tasks (offload.Any():
// the runtime places them and keeps their buffers coherent) and host tasks
// (Async.Go) over the shared buffers, made in epochs. An epoch is AnyEpoch
// tasks from all the workers; it ends, when the workers have made them all,
// with Taskwait (which gives the buffers back to the program), then a
// check of every element of every shared buffer against the model: the
// same steps applied on the host in the order the tasks were made. Host
// tasks also check, as they run, that they find their buffers as the
// model had them at their place in the order.
//
// With Any-tasks a lost device's work runs again elsewhere, so faults
// change nothing in what a program sees: every task must succeed and
// every buffer be right as long as one device is left. The faults keep
// one: by default a runtime's kills and stops together hit all its device
// processes but one (-kill-max counts both in this mode). When an epoch
// ends after a fault, the runtime is stopped and started again, with new
// device processes, so that a long run sees many faults.
//
// When every device is lost (-kill-max as large as their number, or a
// device found lost with no fault injected on top of the faults), the
// tasks made after fail with ErrNoDevice and those the lost devices held
// with ErrDeviceLost, since nothing is left to run them: the run reports
// them (failed, and all_lost_epochs), checks that each such error wraps
// one of the two, takes the buffers as they are for the model, starts a
// new runtime and goes on. Failures, wrong elements or stale reads in an
// epoch that kept a device are errors (exit status 1); a task or a
// Taskwait not done by the deadline is a hang (2).

// anyResult is what an Any-mode run found beyond result's fields.
type anyResult struct {
	Epochs, Generations    int
	Kernels, HostTasks     int64
	Placed                 int64 // Any-task placements the info output showed
	Reruns, Restores       int64 // tasks run again; data recomputed into the program's memory
	Kept                   int64 // outputs read from a device that kept them, instead of run again
	Stale                  int64 // host tasks that found a buffer other than the model's, in epochs that kept a device
	StaleAllLost           int64 // the same in epochs that lost every device (after a failure reported by a Wait, later tasks run: OpenMP's rule)
	AllLostEpochs          int   // epochs that ended with every device lost
	FailedAllLost          int64 // tasks that failed in those epochs
	BadAllLost             int64 // of those, errors wrapping neither ErrDeviceLost nor ErrNoDevice
	TaskwaitErrs           int   // Taskwaits that returned an error in epochs that kept a device
	LostUnhit              int   // devices found lost at an epoch's end that no fault hit
	HeapFirst, HeapLast    int64 // live heap after each epoch's Taskwait and a GC: the first and the last epoch's
	HeapEpochMax           int64
	RSSFirst, RSSLast      int64 // RSS at the same points
	GoroutinesFirst        int
	GoroutinesLast         int
	RestartTime, CheckTime time.Duration
}

func (r *result) anyVerdict() (int, string) {
	a := r.Any
	switch failed := r.Failed - a.FailedAllLost; {
	case r.Hang > 0:
		return 2, fmt.Sprintf("HANG: %d tasks or Taskwaits did not complete in time", r.Hang)
	case r.Lost > 0:
		return 1, fmt.Sprintf("DATA LOSS: %d elements of %d buffers differ from the model at an epoch's end", r.Lost, r.LostBuffers)
	case a.Stale > 0:
		return 1, fmt.Sprintf("STALE READS: %d host tasks found a buffer other than the model's", a.Stale)
	case failed > 0:
		return 1, fmt.Sprintf("LOST WORK: %d tasks failed in epochs that kept a device", failed)
	case a.TaskwaitErrs > 0:
		return 1, fmt.Sprintf("TASKWAIT: %d Taskwaits failed in epochs that kept a device", a.TaskwaitErrs)
	case a.BadAllLost > 0:
		return 1, fmt.Sprintf("BAD ERRORS: %d tasks that failed with every device lost wrap neither ErrDeviceLost nor ErrNoDevice", a.BadAllLost)
	}
	return 0, "ok"
}

func (a *anyResult) summary() string {
	return fmt.Sprintf("any: epochs=%d runtimes=%d kernels=%d host_tasks=%d placed=%d reruns=%d kept=%d restores=%d stale_reads=%d all_lost_epochs=%d failed_all_lost=%d stale_reads_all_lost=%d taskwait_errors=%d lost_unhit=%d heap_epoch_first=%s heap_epoch_last=%s heap_epoch_max=%s rss_epoch_first=%s rss_epoch_last=%s goroutines_epoch_first=%d goroutines_epoch_last=%d restarts_took=%s checks_took=%s",
		a.Epochs, a.Generations, a.Kernels, a.HostTasks, a.Placed, a.Reruns, a.Kept, a.Restores, a.Stale, a.AllLostEpochs, a.FailedAllLost, a.StaleAllLost, a.TaskwaitErrs, a.LostUnhit,
		mib(a.HeapFirst), mib(a.HeapLast), mib(a.HeapEpochMax), mib(a.RSSFirst), mib(a.RSSLast), a.GoroutinesFirst, a.GoroutinesLast,
		a.RestartTime.Round(time.Millisecond), a.CheckTime.Round(time.Millisecond))
}

// anyOptions are Start's options in Any mode: the devices, and the info
// output's placement lines into ic (forwarded to Errs when GOFFLOAD_INFO
// asks for lines of its own).
func anyOptions(cfg config, ic *infoCount) []offload.Option {
	var opts []offload.Option
	if cfg.Devices != "" {
		opts = append(opts, offload.WithDevices(cfg.Devices))
	}
	flags := "placement"
	if e := strings.TrimSpace(os.Getenv("GOFFLOAD_INFO")); e != "" {
		if v, err := strconv.ParseUint(e, 0, 32); err == nil {
			flags = strconv.FormatUint(v|0x200, 10)
		} else {
			flags = e + ",placement"
		}
		ic.fwd = cfg.Errs
	}
	return append(opts, offload.WithInfo(flags, ic))
}

// runAny is run in Any mode.
func runAny(cfg config) (*result, error) {
	if cfg.AnyEpoch <= 0 {
		cfg.AnyEpoch = 2000
	}
	ar := &anyResult{}
	res := &result{Faults: cfg.faults(), RSSStart: rss(), Any: ar}
	start := time.Now()
	var live atomic.Pointer[state]
	defer watchdog(cfg, &live)()

	ic := &infoCount{}
	opts := anyOptions(cfg, ic)
	if err := offload.Start(opts...); err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			offload.Stop()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	n := offload.NumDevices()
	s := &state{cfg: cfg, ctx: ctx, errs: newErrorCounts(), dead: make([]atomic.Bool, n+1), killNow: make(chan struct{}), stopNow: make(chan struct{})}
	live.Store(s)
	a := &anyRun{state: s, info: ic, start: start}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0))
	for b := 0; b < cfg.Buffers; b++ {
		buf := make([]int64, cfg.Len)
		for i := range buf {
			buf[i] = int64(rng.Uint64())
		}
		s.bufs = append(s.bufs, buf)
		a.model = append(a.model, slices.Clone(buf))
	}
	fmt.Fprintf(cfg.Out, "goffload-stress: any mode: tasks=%d epoch=%d goroutines=%d buffers=%d len=%d window=%d wait=%.2f seed=%d devices=%d (%s) faults: kill=%s kill_after=%d kill_max=%d stop=%s stop_after=%d stop_for=%s\n",
		cfg.Tasks, cfg.AnyEpoch, cfg.Goroutines, cfg.Buffers, cfg.Len, cfg.Window, cfg.AnyWait, cfg.Seed, n, deviceList(n), cfg.Kill, cfg.KillAfter, cfg.KillMax, cfg.Stop, cfg.StopAfter, cfg.StopFor)

	mon := startMonitor(s, start, res)
	genDone := make(chan struct{})
	ch := startChaos(s, start, genDone)
	var kills, stops int
	ar.Generations = 1
	endGen := func() {
		close(genDone)
		ch.wait()
		ch.release()
		kills, stops = kills+ch.kills, stops+ch.stops
	}
	wrng := make([]*rand.Rand, cfg.Goroutines)
	for g := range wrng {
		wrng[g] = rand.New(rand.NewPCG(cfg.Seed, uint64(g)+1))
	}
	for made := int64(0); made < cfg.Tasks && ctx.Err() == nil; {
		e := min(cfg.AnyEpoch, cfg.Tasks-made)
		made += e
		a.left.Store(e)
		recs := make([][]anyRec, cfg.Goroutines)
		var wg sync.WaitGroup
		for g := range cfg.Goroutines {
			wg.Add(1)
			go func() {
				defer wg.Done()
				recs[g] = a.worker(wrng[g])
			}()
		}
		wg.Wait()
		ar.Epochs++
		restart := a.endEpoch(res, recs, ar.Epochs, ch.hit.Load() > 0)
		if s.hang.Load() > 0 {
			break
		}
		if restart {
			t0 := time.Now()
			endGen()
			if err := offload.Stop(); err != nil && !res.Faults {
				fmt.Fprintf(cfg.Errs, "goffload-stress: Stop: %v\n", err)
			}
			if err := offload.Start(opts...); err != nil {
				stopped = true
				return nil, fmt.Errorf("goffload-stress: starting runtime %d: %w", ar.Generations+1, err)
			}
			ar.Generations++
			s.runtime++
			if m := offload.NumDevices(); m != n {
				return nil, fmt.Errorf("goffload-stress: runtime %d has %d devices, the first had %d", ar.Generations, m, n)
			}
			for i := range s.dead {
				s.dead[i].Store(false)
			}
			genDone = make(chan struct{})
			ch = startChaos(s, start, genDone)
			ar.RestartTime += time.Since(t0)
		}
	}
	endGen()
	if s.hang.Load() > 0 {
		fmt.Fprintf(cfg.Errs, "goffload-stress: HANG: %d tasks or Taskwaits did not complete within %s; goroutines:\n", s.hang.Load(), cfg.Timeout)
		pprof.Lookup("goroutine").WriteTo(cfg.Errs, 1)
	}
	stopped = true
	if err := offload.Stop(); err != nil && !res.Faults {
		fmt.Fprintf(cfg.Errs, "goffload-stress: Stop: %v\n", err)
	}
	mon.stop()
	runtime.GC()
	res.Tasks, res.OK, res.Failed = s.done.Load(), s.ok.Load(), s.failed.Load()
	res.Hang = s.hang.Load()
	res.Errors, res.Unnamed, res.MaxErrLen = s.errs, s.errs.unnamed.Load(), int(s.errs.maxLen.Load())
	res.Kills, res.Stops = kills, stops
	res.RSSEnd, res.HeapEnd = rss(), heap()
	res.RSSMax = max(res.RSSMax, res.RSSEnd)
	res.GoroutinesEnd = runtime.NumGoroutine()
	res.Elapsed = time.Since(start)
	ar.Kernels, ar.HostTasks = a.kernels.Load(), a.hostTasks.Load()
	ar.Placed, ar.Reruns, ar.Kept, ar.Restores = ic.placed.Load(), ic.reruns.Load(), ic.kept.Load(), ic.restores.Load()
	return res, nil
}

// endEpoch ends an epoch whose tasks recs are: Taskwait, each task's
// error, the check of every buffer against the model, the memory after.
// It reports whether the runtime is to be started again: a device was
// lost, or faulted says a fault was injected.
func (a *anyRun) endEpoch(res *result, recs [][]anyRec, epoch int, faulted bool) (restart bool) {
	s, ar := a.state, res.Any
	t0 := time.Now()
	twErr := offload.Taskwait(a.ctx)
	hung := twErr != nil && a.ctx.Err() != nil
	// Each task's error (a Wait after Taskwait copies nothing: the
	// buffers are the program's again).
	var errs []error
	for g := range recs {
		for i := range recs[g] {
			r := &recs[g][i]
			if !r.waited {
				err := r.t.WaitContext(a.ctx)
				if err != nil && a.ctxErr(err) && !isDone(r.t) {
					s.hang.Add(1)
					continue
				}
				r.err = err
			}
			a.completed(r)
			if r.err != nil {
				errs = append(errs, r.err)
			}
		}
	}
	if hung && s.hang.Load() == 0 {
		s.hang.Add(1) // every task completed: Taskwait itself hung
	}
	n := offload.NumDevices()
	alive := 0
	for d := range n {
		_, err := offload.On(d).Info()
		switch {
		case err == nil:
			alive++
		case !s.dead[d].Load():
			// Lost, though no fault hit it: another device's loss
			// taken for its own.
			if ar.LostUnhit++; ar.LostUnhit <= 3 {
				fmt.Fprintf(a.cfg.Errs, "goffload-stress: epoch %d: device %d is lost, but no fault hit it: %v\n", epoch, d, err)
			}
		}
	}
	allLost := alive == 0 && n > 0
	restart = alive < n || faulted
	show := a.cfg.Errs
	if allLost {
		show = io.Discard // ErrNoDevice names no device: the epoch line says why
	}
	for _, err := range errs {
		s.failed.Add(1)
		s.errs.add(err, show)
		if allLost {
			ar.FailedAllLost++
			if !errors.Is(err, offload.ErrDeviceLost) && !errors.Is(err, offload.ErrNoDevice) {
				ar.BadAllLost++
			}
		}
	}
	tasks := 0
	for g := range recs {
		tasks += len(recs[g])
	}
	s.ok.Add(int64(tasks - len(errs)))
	if twErr != nil && !hung && !allLost {
		ar.TaskwaitErrs++
		if ar.TaskwaitErrs <= 3 {
			fmt.Fprintf(a.cfg.Errs, "goffload-stress: epoch %d: Taskwait: %v\n", epoch, twErr)
		}
	}
	if hung {
		return false
	}
	if a.cfg.anyCheckHook != nil {
		a.cfg.anyCheckHook(a, epoch)
	}
	// Every element of every buffer against the model; a wrong buffer is
	// taken as it is for the next epochs.
	a.mm.Lock()
	wrong := int64(0)
	for b, buf := range s.bufs {
		bad := int64(0)
		for i, x := range buf {
			if x != a.model[b][i] {
				if !allLost && res.Lost+bad < 3 {
					fmt.Fprintf(a.cfg.Errs, "goffload-stress: DATA LOSS: epoch %d: shared buffer %d element %d = %d, want %d (the model)\n", epoch, b, i, x, a.model[b][i])
				}
				bad++
			}
		}
		if bad > 0 {
			wrong++
			copy(a.model[b], buf)
			if !allLost {
				res.Lost += bad
				res.LostBuffers++
			}
		}
	}
	a.mm.Unlock()
	stale, notes := a.takeStale()
	if allLost {
		ar.AllLostEpochs++
		ar.StaleAllLost += stale
	} else {
		for _, n := range notes {
			if ar.Stale < 3 {
				fmt.Fprintf(a.cfg.Errs, "goffload-stress: STALE READ: epoch %d: %s\n", epoch, n)
			}
		}
		ar.Stale += stale
	}
	runtime.GC()
	h, r, g := heap(), rss(), runtime.NumGoroutine()
	if epoch == 1 {
		ar.HeapFirst, ar.RSSFirst, ar.GoroutinesFirst = h, r, g
	}
	ar.HeapLast, ar.RSSLast, ar.GoroutinesLast = h, r, g
	ar.HeapEpochMax = max(ar.HeapEpochMax, h)
	ar.CheckTime += time.Since(t0)
	if restart || len(errs) > 0 || wrong > 0 || twErr != nil {
		fmt.Fprintf(a.cfg.Out, "t=%s epoch %d: tasks=%d failed=%d wrong_buffers=%d devices_alive=%d/%d taskwait=%v reruns=%d restores=%d heap=%s rss=%s goroutines=%d%s\n",
			time.Since(a.start).Round(time.Millisecond), epoch, tasks, len(errs), wrong, alive, n, errOrOK(twErr), a.info.reruns.Load(), a.info.restores.Load(),
			mib(h), mib(r), g, map[bool]string{true: "; new runtime", false: ""}[restart])
	}
	return restart
}
