package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"regexp"
	"runtime"
	"runtime/metrics"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/goffload/offload"
)

// rss is the process's resident set size in bytes (VmRSS of
// /proc/self/status), 0 where there is none.
func rss() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// heap is the bytes of live and not yet swept heap objects.
func heap() int64 {
	m := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(m)
	if m[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(m[0].Value.Uint64())
}

// monitor samples RSS for its maximum and prints a progress line every
// Report.
type monitor struct {
	quit chan struct{}
	done chan struct{}
}

func startMonitor(s *state, start time.Time, res *result) *monitor {
	m := &monitor{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		limit := s.cfg.MaxRSS
		sample := time.NewTicker(100 * time.Millisecond)
		defer sample.Stop()
		var report <-chan time.Time
		if s.cfg.Report > 0 {
			t := time.NewTicker(s.cfg.Report)
			defer t.Stop()
			report = t.C
		}
		for {
			select {
			case <-m.quit:
				return
			case <-sample.C:
				r := rss()
				res.RSSMax = max(res.RSSMax, r)
				res.HeapMax = max(res.HeapMax, heap())
				if limit > 0 && r > limit && s.cfg.OverMemory != nil {
					fmt.Fprintf(s.cfg.Out, "t=%s MEMORY: rss=%s heap=%s exceeds the limit of %s at done=%d ok=%d failed=%d goroutines=%d\n",
						time.Since(start).Round(100*time.Millisecond), mib(r), mib(heap()), mib(limit),
						s.done.Load(), s.ok.Load(), s.failed.Load(), runtime.NumGoroutine())
					s.errs.write(s.cfg.Out, 10)
					s.cfg.OverMemory()
					limit = 0
				}
			case <-report:
				r := rss()
				res.RSSMax = max(res.RSSMax, r)
				fmt.Fprintf(s.cfg.Out, "t=%s done=%d ok=%d failed=%d rss=%s heap=%s goroutines=%d\n", time.Since(start).Round(100*time.Millisecond),
					s.done.Load(), s.ok.Load(), s.failed.Load(), mib(r), mib(heap()), runtime.NumGoroutine())
			}
		}
	}()
	return m
}

// stop ends the monitor; res.RSSMax may be read afterwards.
func (m *monitor) stop() { close(m.quit); <-m.done }

// chaos kills and stops device processes during the run.
type chaos struct {
	mu      sync.Mutex
	stopped map[int]int // device → pid, stopped and not continued
	kills   int
	stops   int
	hit     atomic.Int64 // kills and stops, for other goroutines
	done    chan struct{}
	cont    sync.WaitGroup // SIGCONT timers in flight
}

type victim struct{ num, pid int }

func startChaos(s *state, start time.Time, workersDone <-chan struct{}) *chaos {
	c := &chaos{stopped: map[int]int{}, done: make(chan struct{})}
	var victims []victim
	for i := 0; i < offload.NumDevices(); i++ {
		info, err := offload.On(i).Info()
		if err == nil && (info.Kind == "local" || info.Kind == "tcp") && info.PID > 0 && info.PID != os.Getpid() {
			victims = append(victims, victim{i, info.PID})
		}
	}
	if !s.cfg.faults() || len(victims) == 0 {
		if s.cfg.faults() {
			fmt.Fprintln(s.cfg.Out, "goffload-stress: faults asked for, but there is no device process to kill or stop")
		}
		close(c.done)
		return c
	}
	rng := rand.New(rand.NewPCG(s.cfg.Seed, 1<<32+uint64(s.runtime))) // each runtime its own victims
	killMax := s.cfg.KillMax
	if killMax <= 0 || killMax > len(victims) {
		killMax = len(victims)
		if s.cfg.Any && s.cfg.KillMax <= 0 {
			killMax = len(victims) - 1 // one device left untouched: its Any-tasks must all succeed
		}
	}
	// hits counts the faults that count against killMax: kills, and in
	// Any mode stops too (a stop may outlast GOFFLOAD_DEVICE_TIMEOUT and
	// lose the device).
	hits := func() int {
		if s.cfg.Any {
			return c.kills + c.stops
		}
		return c.kills
	}
	alive := func() []victim {
		var a []victim
		for _, v := range victims {
			if !s.dead[v.num].Load() {
				a = append(a, v)
			}
		}
		return a
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(s.cfg.Out, "t=%s %s\n", time.Since(start).Round(time.Millisecond), fmt.Sprintf(format, args...))
	}
	kill := func() {
		a := alive()
		if hits() >= killMax || len(a) == 0 {
			return
		}
		v := a[rng.IntN(len(a))]
		s.dead[v.num].Store(true)
		c.kills++
		c.hit.Add(1)
		err := syscall.Kill(v.pid, syscall.SIGKILL)
		logf("fault: SIGKILL device %d (pid %d): %v; done=%d", v.num, v.pid, errOrOK(err), s.done.Load())
	}
	stop := func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		var a []victim
		for _, v := range alive() {
			if _, ok := c.stopped[v.num]; !ok {
				a = append(a, v)
			}
		}
		if len(a) == 0 || (s.cfg.Any && hits() >= killMax) {
			return
		}
		v := a[rng.IntN(len(a))]
		c.stops++
		c.hit.Add(1)
		c.stopped[v.num] = v.pid
		if s.cfg.Any {
			s.dead[v.num].Store(true) // not hit again in this runtime
		}
		err := syscall.Kill(v.pid, syscall.SIGSTOP)
		logf("fault: SIGSTOP device %d (pid %d) for %s: %v; done=%d", v.num, v.pid, forever(s.cfg.StopFor), errOrOK(err), s.done.Load())
		if s.cfg.StopFor > 0 {
			c.cont.Add(1)
			time.AfterFunc(s.cfg.StopFor, func() {
				defer c.cont.Done()
				c.mu.Lock()
				defer c.mu.Unlock()
				if _, ok := c.stopped[v.num]; ok {
					delete(c.stopped, v.num)
					logf("fault: SIGCONT device %d (pid %d): %v", v.num, v.pid, errOrOK(syscall.Kill(v.pid, syscall.SIGCONT)))
				}
			})
		}
	}
	go func() {
		defer close(c.done)
		var killC, stopC <-chan time.Time
		if s.cfg.Kill > 0 {
			t := time.NewTicker(s.cfg.Kill)
			defer t.Stop()
			killC = t.C
		}
		if s.cfg.Stop > 0 {
			t := time.NewTicker(s.cfg.Stop)
			defer t.Stop()
			stopC = t.C
		}
		killNow, stopNow := s.killNow, s.stopNow
		if s.cfg.KillAfter <= 0 {
			killNow = nil
		}
		if s.cfg.StopAfter <= 0 {
			stopNow = nil
		}
		for {
			select {
			case <-workersDone:
				return
			case <-killNow:
				killNow = nil
				if s.killFired.CompareAndSwap(false, true) { // once in the run, whatever the runtimes (Any mode restarts them)
					kill()
				}
			case <-stopNow:
				stopNow = nil
				if s.stopFired.CompareAndSwap(false, true) {
					stop()
				}
			case <-killC:
				kill()
			case <-stopC:
				stop()
			}
		}
	}()
	return c
}

// wait waits for the fault goroutine to end (after the workers did).
func (c *chaos) wait() { <-c.done }

// release kills the device processes left stopped, so that Stop can end
// them, and waits for the pending SIGCONTs.
func (c *chaos) release() {
	c.mu.Lock()
	for num, pid := range c.stopped {
		syscall.Kill(pid, syscall.SIGKILL)
		delete(c.stopped, num)
	}
	c.mu.Unlock()
	c.cont.Wait()
}

func errOrOK(err error) string {
	if err != nil {
		return err.Error()
	}
	return "ok"
}

func forever(d time.Duration) string {
	if d <= 0 {
		return "the rest of the run"
	}
	return d.String()
}

// errorCounts counts failed tasks by device and kind of error.
type errorCounts struct {
	mu      sync.Mutex
	byKey   map[string]int64
	unnamed atomic.Int64
	maxLen  atomic.Int64
	shown   int
}

const maxKinds = 200

var (
	deviceRe = regexp.MustCompile(`device \d+`)
	hexRe    = regexp.MustCompile(`0x[0-9a-fA-F]+`)
	numRe    = regexp.MustCompile(`\d+`)
	hopRe    = regexp.MustCompile(`^task \d+ \([^)]*\): `)
)

const dependsOn = "depends on failed: "

func newErrorCounts() *errorCounts { return &errorCounts{byKey: map[string]int64{}} }

// add counts err under the first device it names and its text with numbers
// blanked out; an error that names no device is shown (the first few) on w.
func (e *errorCounts) add(err error, w io.Writer) {
	msg := err.Error()
	for {
		l := e.maxLen.Load()
		if int64(len(msg)) <= l || e.maxLen.CompareAndSwap(l, int64(len(msg))) {
			break
		}
	}
	dev := deviceRe.FindString(msg)
	kind := msg
	if errors.Is(err, offload.ErrDependency) {
		// Classify by the root cause: the text after the last hop.
		if i := strings.LastIndex(kind, dependsOn); i >= 0 {
			kind = hopRe.ReplaceAllString(kind[i+len(dependsOn):], "")
		}
		kind = "ErrDependency <- " + kind
		if d := deviceRe.FindString(kind); d != "" {
			dev = d
		}
	}
	kind = numRe.ReplaceAllString(hexRe.ReplaceAllString(kind, "0x…"), "N")
	if len(kind) > 200 {
		kind = kind[:200] + "…"
	}
	if len(msg) > 1000 {
		msg = fmt.Sprintf("%s … %s (%d bytes)", msg[:500], msg[len(msg)-400:], len(msg))
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if dev == "" {
		e.unnamed.Add(1)
		dev = "NO DEVICE"
		if e.shown < 5 {
			e.shown++
			fmt.Fprintf(w, "goffload-stress: an error that names no device: %s\n", msg)
		}
	}
	key := dev + "\t" + kind
	if _, ok := e.byKey[key]; !ok && len(e.byKey) >= maxKinds {
		key = dev + "\t(other kinds)"
	}
	e.byKey[key]++
}

// write prints the counts, most frequent first, at most n lines.
func (e *errorCounts) write(w io.Writer, n int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	keys := make([]string, 0, len(e.byKey))
	for k := range e.byKey {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if e.byKey[keys[i]] != e.byKey[keys[j]] {
			return e.byKey[keys[i]] > e.byKey[keys[j]]
		}
		return keys[i] < keys[j]
	})
	for i, k := range keys {
		if i == n {
			fmt.Fprintf(w, "errors: … %d more kinds\n", len(keys)-n)
			break
		}
		dev, kind, _ := strings.Cut(k, "\t")
		fmt.Fprintf(w, "errors: %8d  %-10s %s\n", e.byKey[k], dev, kind)
	}
}

// writeDevices prints the failed-task count per device named.
func (e *errorCounts) writeDevices(w io.Writer) {
	m := e.devices()
	devs := make([]string, 0, len(m))
	for d := range m {
		devs = append(devs, d)
	}
	sort.Strings(devs)
	for _, d := range devs {
		fmt.Fprintf(w, "failed on %s: %d\n", d, m[d])
	}
}

// devices returns the failed-task count per device named.
func (e *errorCounts) devices() map[string]int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	m := map[string]int64{}
	for k, n := range e.byKey {
		dev, _, _ := strings.Cut(k, "\t")
		m[dev] += n
	}
	return m
}
