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
	"sync"
	"sync/atomic"
	"time"

	"github.com/goffload/offload"
)

// config is one stress run; main fills it from the flags, tests directly.
type config struct {
	Tasks      int64         // tasks to create in all
	Goroutines int           // goroutines creating them
	Buffers    int           // shared buffers
	Len        int           // int64 elements per buffer
	Window     int           // tasks a goroutine keeps in flight before waiting for its oldest
	Seed       uint64        // random seed (buffers, devices, dependencies)
	Devices    string        // GOFFLOAD_DEVICES spec; "" leaves the environment's
	Report     time.Duration // interval of the progress lines; 0: none
	Timeout    time.Duration // the whole run; past it the run is a hang
	Epochs     float64       // fraction of picks that are enter/update/exit sequences on a private buffer
	Kill       time.Duration // SIGKILL a random device process every Kill; 0: never
	KillAfter  int64         // SIGKILL one device process once this many tasks completed; 0: never
	StopAfter  int64         // SIGSTOP one device process (for StopFor) once this many tasks completed; 0: never
	KillMax    int           // most device processes killed; 0: all of them
	Stop       time.Duration // SIGSTOP a random device process every Stop; 0: never
	StopFor    time.Duration // how long it stays stopped; 0: until the end of the run
	Taskwait   time.Duration // call Taskwait every Taskwait while the workers run; 0: only at the end
	Any        bool          // Any mode (anymode.go): Any-tasks and host tasks, checked exactly at each epoch's end
	AnyEpoch   int64         // Any mode: tasks per epoch (all goroutines together), ended by Taskwait
	AnyWait    float64       // Any mode: fraction of the tasks a worker waits for with Wait (a copy back), not Done
	Graph      bool          // graph mode (graphmode.go): recorded task graphs replayed and checked; with Any, of Any() tasks
	// anyCheckHook, if not nil, is called after each epoch's Taskwait,
	// before its check (tests).
	anyCheckHook func(a *anyRun, epoch int)
	MaxRSS       int64     // bytes; past it the monitor calls OverMemory; 0: no limit
	OverMemory   func()    // called (once) when RSS exceeds MaxRSS
	Out          io.Writer // progress and summary lines
	Errs         io.Writer // goroutine dumps and error examples
	// Hard is called when the run has not returned Timeout+HardGrace after
	// its start: a task creation, Taskwait or Stop that ignores contexts.
	Hard      func()
	HardGrace time.Duration
}

func (c config) faults() bool {
	return c.Kill > 0 || c.KillAfter > 0 || c.Stop > 0 || c.StopAfter > 0
}

// result is what a run found.
type result struct {
	Tasks, OK, Failed int64
	Lost              int64 // elements outside [successes, successes+failures]
	LostBuffers       int64 // buffers with such an element
	Above             int64 // buffers above their successes (failed tasks that applied)
	Torn              int64 // buffers a successful task saw with unequal elements
	MissingOut        int64 // successful tasks whose output never came back
	Unnamed           int64 // failed tasks whose error names no device
	Hang              int64 // tasks not completed by the deadline
	MaxErrLen         int
	Kills, Stops      int
	Errors            *errorCounts
	RSSStart, RSSMax  int64
	RSSEnd            int64
	HeapEnd           int64 // live heap after a GC at the end
	GoroutinesEnd     int
	Elapsed           time.Duration
	Faults            bool
	HeapMax           int64 // the monitor's largest sample
	Any               *anyResult
	Graph             *graphStats // graph mode only
}

// verdict is the exit status of a run and why: 0 clean, 1 data loss or
// wrong errors, 2 a hang.
func (r *result) verdict() (int, string) {
	if r.Any != nil {
		return r.anyVerdict()
	}
	if g := r.Graph; g != nil && g.brokenWrong.Load() > 0 {
		return 1, fmt.Sprintf("GRAPH RULES: %d replays that broke a rule were not refused with ErrGraphChanged", g.brokenWrong.Load())
	}
	switch {
	case r.Hang > 0:
		return 2, fmt.Sprintf("HANG: %d tasks did not complete in time", r.Hang)
	case r.Lost > 0:
		return 1, fmt.Sprintf("DATA LOSS: %d elements of %d buffers differ from the sequential reference", r.Lost, r.LostBuffers)
	case r.Torn > 0 || r.MissingOut > 0:
		return 1, fmt.Sprintf("INCONSISTENT: %d half-updated buffers seen, %d outputs never copied back", r.Torn, r.MissingOut)
	case r.Unnamed > 0:
		return 1, fmt.Sprintf("BAD ERRORS: %d failed tasks' errors name no device", r.Unnamed)
	case r.Failed > 0 && !r.Faults:
		return 1, fmt.Sprintf("FAILURES: %d tasks failed with no fault injected", r.Failed)
	}
	return 0, "ok"
}

func (r *result) summary() string {
	return fmt.Sprintf("tasks=%d ok=%d failed=%d lost=%d hang=%d torn=%d missing_out=%d unnamed_errors=%d above=%d kills=%d stops=%d max_err_len=%d rss_start=%s rss_max=%s rss_end=%s heap_end=%s goroutines_end=%d elapsed=%s",
		r.Tasks, r.OK, r.Failed, r.Lost, r.Hang, r.Torn, r.MissingOut, r.Unnamed, r.Above, r.Kills, r.Stops, r.MaxErrLen,
		mib(r.RSSStart), mib(r.RSSMax), mib(r.RSSEnd), mib(r.HeapEnd), r.GoroutinesEnd, r.Elapsed.Round(time.Millisecond))
}

// Kernels: add v to the buffers whose bit is set in mask, after checking
// that every buffer's elements are equal (no half-updated buffer is ever
// seen); out[0] counts the buffers that were not.
var (
	K1 = offload.MustKernel("stress.k1", func(mask, v int64, a, out []int64) { apply(mask, v, out, a) })
	K2 = offload.MustKernel("stress.k2", func(mask, v int64, a, b, out []int64) { apply(mask, v, out, a, b) })
	K3 = offload.MustKernel("stress.k3", func(mask, v int64, a, b, c, out []int64) { apply(mask, v, out, a, b, c) })
)

func apply(mask, v int64, out []int64, bufs ...[]int64) {
	bad := int64(0)
	for i, b := range bufs {
		for _, x := range b {
			if x != b[0] {
				bad++
				break
			}
		}
		if mask&(1<<i) != 0 {
			for j := range b {
				b[j] += v
			}
		}
	}
	out[0] = bad
}

// state is shared by the goroutines of one run.
type state struct {
	cfg       config
	ctx       context.Context
	bufs      [][]int64
	init      []int64
	succ      []atomic.Int64 // per shared buffer: sum of the increments of tasks that succeeded
	fail      []atomic.Int64 // and of those that failed
	claimed   atomic.Int64
	done      atomic.Int64
	ok        atomic.Int64
	failed    atomic.Int64
	torn      atomic.Int64
	missing   atomic.Int64
	hang      atomic.Int64
	errs      *errorCounts
	dead      []atomic.Bool // devices this run killed
	killNow   chan struct{}
	killOnce  sync.Once
	killFired atomic.Bool // the kill of KillAfter was done
	stopNow   chan struct{}
	stopOnce  sync.Once
	stopFired atomic.Bool
	runtime   int // the runtimes started before this one (Any mode starts new ones)
	privMu    sync.Mutex
	privs     []*private // every private buffer, for the final check
	graph     graphStats // graph mode
}

// completed counts a task done, and starts the faults due after so many.
func (s *state) completed() {
	n := s.done.Add(1)
	if s.cfg.KillAfter > 0 && n >= s.cfg.KillAfter {
		s.killOnce.Do(func() { close(s.killNow) })
	}
	if s.cfg.StopAfter > 0 && n >= s.cfg.StopAfter {
		s.stopOnce.Do(func() { close(s.stopNow) })
	}
}

// claim reserves n tasks of the total, all or none.
func (s *state) claim(n int64) bool {
	for {
		c := s.claimed.Load()
		if c+n > s.cfg.Tasks {
			return false
		}
		if s.claimed.CompareAndSwap(c, c+n) {
			return true
		}
	}
}

// run runs one stress run: Start, the workers, the faults, the check, Stop.
func run(cfg config) (*result, error) {
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	if cfg.Errs == nil {
		cfg.Errs = os.Stderr
	}
	if cfg.Goroutines < 1 || cfg.Buffers < 3 || cfg.Len < 1 || cfg.Window < 1 || cfg.Tasks < 0 || cfg.Timeout <= 0 {
		return nil, fmt.Errorf("goffload-stress: bad configuration: goroutines=%d (>=1) buffers=%d (>=3) len=%d (>=1) window=%d (>=1) tasks=%d (>=0) timeout=%s (>0)",
			cfg.Goroutines, cfg.Buffers, cfg.Len, cfg.Window, cfg.Tasks, cfg.Timeout)
	}
	// The monitor, the faults and the run write lines at once.
	cfg.Out, cfg.Errs = &lockedWriter{w: cfg.Out}, &lockedWriter{w: cfg.Errs}
	if cfg.Any && !cfg.Graph {
		return runAny(cfg)
	}
	res := &result{Faults: cfg.faults(), RSSStart: rss()}
	start := time.Now()
	var live atomic.Pointer[state] // for the hard watchdog's report
	defer watchdog(cfg, &live)()

	var opts []offload.Option
	if cfg.Devices != "" {
		opts = append(opts, offload.WithDevices(cfg.Devices))
	}
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
	s := &state{cfg: cfg, ctx: ctx, errs: newErrorCounts(), dead: make([]atomic.Bool, n+1), killNow: make(chan struct{}), stopNow: make(chan struct{}),
		succ: make([]atomic.Int64, cfg.Buffers), fail: make([]atomic.Int64, cfg.Buffers)}
	live.Store(s)
	rng := rand.New(rand.NewPCG(cfg.Seed, 0))
	for b := 0; b < cfg.Buffers; b++ {
		v := int64(rng.IntN(1 << 20))
		s.init = append(s.init, v)
		s.bufs = append(s.bufs, filled(cfg.Len, v))
	}
	fmt.Fprintf(cfg.Out, "goffload-stress: tasks=%d goroutines=%d buffers=%d len=%d window=%d seed=%d devices=%d (%s) faults: kill=%s kill_after=%d stop=%s stop_after=%d stop_for=%s\n",
		cfg.Tasks, cfg.Goroutines, cfg.Buffers, cfg.Len, cfg.Window, cfg.Seed, n, deviceList(n), cfg.Kill, cfg.KillAfter, cfg.Stop, cfg.StopAfter, cfg.StopFor)

	mon := startMonitor(s, start, res)
	workersDone := make(chan struct{})
	ch := startChaos(s, start, workersDone)
	twDone := make(chan struct{})
	go func() {
		defer close(twDone)
		if cfg.Taskwait <= 0 {
			return
		}
		t := time.NewTicker(cfg.Taskwait)
		defer t.Stop()
		for {
			select {
			case <-workersDone:
				return
			case <-t.C:
				offload.Taskwait(ctx) // drops the runtime's list of failed tasks; the workers account for each
			}
		}
	}()
	var wg sync.WaitGroup
	for g := 0; g < cfg.Goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(cfg.Seed, uint64(g)+1))
			if cfg.Graph {
				s.graphWorker(g, rng)
				return
			}
			s.worker(g, rng)
		}()
	}
	wg.Wait()
	close(workersDone)
	ch.wait()
	<-twDone
	if s.hang.Load() == 0 {
		if err := offload.Taskwait(ctx); err != nil && ctx.Err() != nil {
			s.hang.Add(1) // the workers waited for all their tasks: Taskwait itself hung
		}
	}
	if s.hang.Load() > 0 {
		fmt.Fprintf(cfg.Errs, "goffload-stress: HANG: %d tasks did not complete within %s; goroutines:\n", s.hang.Load(), cfg.Timeout)
		pprof.Lookup("goroutine").WriteTo(cfg.Errs, 1)
	}
	ch.release() // devices left stopped are killed, so that Stop can end them
	s.check(res)
	if cfg.Graph {
		res.Graph = &s.graph
		if l := s.graph.lost.Load(); l > 0 {
			res.Lost += l
			res.LostBuffers++
		}
	}
	stopped = true
	if err := offload.Stop(); err != nil && !res.Faults {
		fmt.Fprintf(cfg.Errs, "goffload-stress: Stop: %v\n", err)
	}
	mon.stop()
	runtime.GC()
	res.Tasks, res.OK, res.Failed = s.done.Load(), s.ok.Load(), s.failed.Load()
	res.Torn, res.MissingOut, res.Hang = s.torn.Load(), s.missing.Load(), s.hang.Load()
	res.Errors, res.Unnamed, res.MaxErrLen = s.errs, s.errs.unnamed.Load(), int(s.errs.maxLen.Load())
	res.Kills, res.Stops = ch.kills, ch.stops
	res.RSSEnd, res.HeapEnd = rss(), heap()
	res.RSSMax = max(res.RSSMax, res.RSSEnd)
	res.GoroutinesEnd = runtime.NumGoroutine()
	res.Elapsed = time.Since(start)
	return res, nil
}

// watchdog calls cfg.Hard when the run has not returned HardGrace after
// its deadline (a task creation, Taskwait or Stop that ignores contexts),
// after dumping the goroutines; the function it returns ends it.
func watchdog(cfg config, live *atomic.Pointer[state]) (finish func()) {
	finished := make(chan struct{})
	if cfg.Hard != nil {
		go func() {
			select {
			case <-finished:
			case <-time.After(cfg.Timeout + cfg.HardGrace):
				fmt.Fprintf(cfg.Errs, "goffload-stress: HANG: the run has not returned %s after its deadline (a call that ignores its context)", cfg.HardGrace)
				if s := live.Load(); s != nil {
					fmt.Fprintf(cfg.Errs, " at done=%d ok=%d failed=%d", s.done.Load(), s.ok.Load(), s.failed.Load())
				}
				fmt.Fprintln(cfg.Errs, "; goroutines:")
				pprof.Lookup("goroutine").WriteTo(cfg.Errs, 1)
				cfg.Hard()
			}
		}()
	}
	return func() { close(finished) }
}

func filled(n int, v int64) []int64 {
	b := make([]int64, n)
	for i := range b {
		b[i] = v
	}
	return b
}

func deviceList(n int) string {
	s := ""
	for i := 0; i <= n; i++ {
		info, err := offload.On(i).Info()
		if i > 0 {
			s += " "
		}
		if err != nil {
			s += fmt.Sprintf("%d:unavailable", i)
			continue
		}
		s += fmt.Sprintf("%d:%s", i, info.Kind)
		if info.Kind == "local" || info.Kind == "tcp" {
			s += fmt.Sprintf("(pid %d)", info.PID)
		}
	}
	return s
}

// check compares every element of every buffer with the reference.
func (s *state) check(res *result) {
	for b, buf := range s.bufs {
		lo := s.init[b] + s.succ[b].Load()
		hi := lo + s.fail[b].Load()
		s.checkBuf(res, fmt.Sprintf("shared buffer %d", b), buf, lo, hi)
	}
	for i, p := range s.privs {
		s.checkBuf(res, fmt.Sprintf("private buffer %d (goroutine %d)", i, p.owner), p.buf, p.lo, p.hi)
	}
}

func (s *state) checkBuf(res *result, name string, buf []int64, lo, hi int64) {
	bad := int64(0)
	above := false
	for i, x := range buf {
		if x < lo || x > hi {
			if bad < 3 {
				fmt.Fprintf(s.cfg.Errs, "goffload-stress: DATA LOSS: %s element %d = %d, want %d (successful increments) up to %d (with those of failed tasks)\n", name, i, x, lo, hi)
			}
			bad++
		}
		above = above || x > lo
	}
	res.Lost += bad
	if bad > 0 {
		res.LostBuffers++
	}
	if above {
		res.Above++
	}
}

// lockedWriter serialises the writes of several goroutines to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// mib formats bytes as MiB.
func mib(b int64) string { return fmt.Sprintf("%.1fMiB", float64(b)/(1<<20)) }

// isDone reports whether t has completed.
func isDone(t *offload.Task) bool {
	select {
	case <-t.Done():
		return true
	default:
		return false
	}
}

// ctxErr reports whether err is the run's deadline rather than the task's own.
func (s *state) ctxErr(err error) bool {
	return s.ctx.Err() != nil && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled))
}
