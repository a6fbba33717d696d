package offload_test

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goffload/offload"
	"github.com/goffload/offload/examples/apps/jacobi"
	"github.com/goffload/offload/internal/tracefile"
	"github.com/goffload/offload/tool"
)

// TestProfileTrace runs a known program with GOFFLOAD_PROFILE and checks the
// Chrome trace it writes: a process per device, a track per queue with the
// operations as the device ran them (kernels with argument sizes, copies
// with direction, bytes and buffer name), task spans named with their task
// ids, arrows for the dependencies (across devices too), host waits,
// mapping changes; and that the trace tells the truth (checkTrace).
func TestProfileTrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.json")
	t.Setenv("GOFFLOAD_PROFILE", path)
	if err := offload.Start(offload.WithDevices("host,local:1")); err != nil {
		t.Fatal(err)
	}
	x := make([]float32, 1024)
	// Host work first, held until the device tasks below are all created
	// (not a sleep that a loaded machine can outlast), so that they wait
	// for it, and the one on device 1 for device 0's, on the host.
	prepared := make(chan struct{})
	offload.Nowait(offload.DependOut(x)).Go("prepare", func() error { <-prepared; return nil })
	offload.On(0).Nowait(offload.DependInOut(x)).EnterData(offload.To(x).Named("x"))
	offload.On(0).Nowait(offload.DependInOut(x)).Run(SleepF, int64(50), x)
	offload.On(0).Nowait(offload.DependInOut(x)).Run(Scale, float32(2), x)
	y := make([]int32, 256)
	offload.On(1).Nowait(offload.DependIn(x)).Run(Fill, int32(3), offload.ToFrom(y).Named("y"))
	offload.On(1).Nowait(offload.DependIn(x)).Run(SleepF, int64(20), offload.To(x).Named("x1"))
	offload.On(0).Nowait(offload.DependInOut(x)).ExitData(offload.From(x).Named("x"))
	close(prepared)
	if err := offload.Taskwait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := offload.Stop(); err != nil {
		t.Fatal(err)
	}
	tr := checkTrace(t, path)
	has := func(what string, ok func(e traceEvent) bool) traceEvent {
		t.Helper()
		for _, e := range tr {
			if ok(e) {
				return e
			}
		}
		t.Errorf("the trace has no %s", what)
		return traceEvent{}
	}
	has("name for device 0", func(e traceEvent) bool {
		return e.Ph == "M" && e.Name == "process_name" && e.Pid == 0 && strings.Contains(e.Args["name"].(string), "device 0 (host)")
	})
	has("name for device 1", func(e traceEvent) bool {
		return e.Ph == "M" && e.Name == "process_name" && e.Pid == 1 && strings.Contains(e.Args["name"].(string), "device 1 (local)")
	})
	has("queue track names", func(e traceEvent) bool {
		return e.Ph == "M" && e.Name == "thread_name" && strings.HasPrefix(e.Args["name"].(string), "queue ")
	})
	scale := has("task span of the scale on device 0", func(e traceEvent) bool {
		return e.Ph == "X" && e.Cat == "task" && e.Pid == 0 && strings.HasSuffix(e.Name, ": target test.scale")
	})
	sleep := has("task span of the sleep on device 0", func(e traceEvent) bool {
		return e.Ph == "X" && e.Cat == "task" && e.Pid == 0 && strings.HasSuffix(e.Name, ": target test.sleepf")
	})
	fill := has("task span of the fill on device 1", func(e traceEvent) bool {
		return e.Ph == "X" && e.Cat == "task" && e.Pid == 1 && strings.HasSuffix(e.Name, ": target test.fill")
	})
	has("device-side kernel on device 0, with argument sizes", func(e traceEvent) bool {
		return e.Ph == "X" && e.Name == "kernel test.scale" && e.Pid == 0 && e.Args["arg_bytes"] == 4096.0 && e.Args["args"] == 2.0 && e.Args["task"] == scale.Args["task"]
	})
	k := has("device-side kernel on device 1 (a device process)", func(e traceEvent) bool {
		return e.Ph == "X" && e.Name == "kernel test.sleepf" && e.Pid == 1
	})
	if k.Dur < 20e3 {
		t.Errorf("the 20 ms kernel on device 1 lasts %.0f µs on the device", k.Dur)
	}
	has("copy to device of x on device 0", func(e traceEvent) bool {
		return e.Ph == "X" && e.Cat == "copy" && e.Pid == 0 && e.Args["kind"] == "copy to device" && e.Args["buffer"] == "x" && e.Args["bytes"] == 4096.0
	})
	has("copy from device of y on device 1", func(e traceEvent) bool {
		return e.Ph == "X" && e.Cat == "copy" && e.Pid == 1 && e.Args["kind"] == "copy from device" && e.Args["buffer"] == "y" && e.Args["bytes"] == 1024.0 &&
			e.Args["task"] == fill.Args["task"]
	})
	has("mapping created", func(e traceEvent) bool { return e.Args["kind"] == "map create" && e.Args["buffer"] == "x" })
	has("mapping removed", func(e traceEvent) bool { return e.Args["kind"] == "map remove" && e.Args["buffer"] == "x" })
	has("arrow from the sleep to the scale that follows it on its queue", func(e traceEvent) bool {
		return e.Ph == "f" && e.Args["for_task"] == sleep.Args["task"] && e.Args["task"] == scale.Args["task"] && e.Pid == 0
	})
	has("arrow into device 1 from the scale on device 0", func(e traceEvent) bool {
		return e.Ph == "f" && e.Args["for_task"] == scale.Args["task"] && e.Pid == 1
	})
	has("host wait on device 1 for a host device task", func(e traceEvent) bool {
		return e.Ph == "X" && e.Cat == "wait" && e.Pid == 1 && e.Args["for"] == "target test.scale" && e.Args["on_device"] == false
	})
}

// TestProfileTraceHalos traces the Jacobi iteration on two device
// processes, whose halo rows go between them under dependencies, and checks
// that the trace tells the truth (checkTrace) and shows the exchanges.
func TestProfileTraceHalos(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.json")
	t.Setenv("GOFFLOAD_PROFILE", path)
	if err := offload.Start(offload.WithDevices("local:2")); err != nil {
		t.Fatal(err)
	}
	grid, _, err := jacobi.Solve([]offload.Device{offload.On(0), offload.On(1)}, 40, 8)
	if err != nil {
		t.Fatal(err)
	}
	if err := offload.Stop(); err != nil {
		t.Fatal(err)
	}
	want, _ := jacobi.Reference(40, 8)
	if err := jacobi.Check(grid, want, 40); err != nil {
		t.Fatal(err)
	}
	tr := checkTrace(t, path)
	kinds := map[string]int{}
	for _, e := range tr {
		if e.Ph == "X" {
			kinds[e.Cat]++
		}
		if e.Ph == "f" && e.Args["on_device"] == true {
			kinds["arrow"]++
		}
		if e.Ph == "X" && e.Args["kind"] == "copy device to device" {
			kinds["exchange"]++
		}
	}
	// Every kernel and exchange shows; a wait (and its arrow) only where the
	// task waited for shows, which depends on how fast the devices were.
	if kinds["kernel"] < 16 || kinds["exchange"] < 14 || kinds["arrow"] < 4 || kinds["wait"] < 4 {
		t.Errorf("8 iterations on 2 devices show %v", kinds)
	}
}

type traceEvent = tracefile.Event

// checkTrace loads a trace and checks that it tells the truth: every event
// names its task, no track's spans overlap, every device operation lies
// inside its task's span, and every arrow has both ends.
func checkTrace(t *testing.T, path string) []traceEvent {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	events, err := tracefile.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	const eps = 0.002 // µs: rounding of the JSON numbers
	tracks := map[[2]int][]traceEvent{}
	tasks := map[float64]traceEvent{}
	arrows := map[uint64]string{}
	for _, e := range events {
		if e.Ph == "M" {
			continue
		}
		if task, ok := e.Args["task"].(float64); !ok || task < 1 {
			t.Errorf("%s event %q names no task: %v", e.Ph, e.Name, e.Args)
		}
		switch e.Ph {
		case "X":
			tracks[[2]int{e.Pid, e.Tid}] = append(tracks[[2]int{e.Pid, e.Tid}], e)
			if e.Cat == "task" {
				tasks[e.Args["task"].(float64)] = e
			}
		case "s", "f":
			arrows[e.ID] += e.Ph
		case "B", "E":
			t.Errorf("a B/E span %q: spans are complete events", e.Name)
		}
	}
	if len(tasks) == 0 {
		t.Fatal("the trace has no task spans")
	}
	for k, evs := range tracks {
		sort.Slice(evs, func(i, j int) bool { return evs[i].Ts < evs[j].Ts })
		for i := 1; i < len(evs); i++ {
			if prev := evs[i-1]; evs[i].Ts < prev.Ts+prev.Dur-eps {
				t.Errorf("track %v overlaps itself: %q [%.3f, %.3f] and %q from %.3f", k, prev.Name, prev.Ts, prev.Ts+prev.Dur, evs[i].Name, evs[i].Ts)
			}
		}
		for _, e := range evs {
			if e.Cat != "device" && e.Cat != "kernel" && e.Cat != "copy" && (e.Cat != "wait" || e.Args["on_device"] == false) {
				continue // not a device operation
			}
			task, ok := tasks[e.Args["task"].(float64)]
			if !ok {
				t.Errorf("device operation %q of task %v: no such task span", e.Name, e.Args["task"])
				continue
			}
			if e.Ts < task.Ts-eps || e.Ts+e.Dur > task.Ts+task.Dur+eps {
				t.Errorf("device operation %q [%.3f, %.3f] lies outside its task's span %q [%.3f, %.3f]",
					e.Name, e.Ts, e.Ts+e.Dur, task.Name, task.Ts, task.Ts+task.Dur)
			}
		}
	}
	for id, ends := range arrows {
		if ends != "sf" && ends != "fs" {
			t.Errorf("arrow %d has ends %q", id, ends)
		}
	}
	return events
}

// SleepF sleeps, holding x.
var SleepF = offload.MustKernel("test.sleepf", func(ms int64, x []float32) { time.Sleep(time.Duration(ms) * time.Millisecond) })

// countingTool counts the events a Tool receives.
type countingTool struct {
	mu                           sync.Mutex
	begins, ends, data, launches int
	waits                        int
	kernels                      []string
	nowaitEnds                   int
	ids                          map[uint64]bool // task ids seen at TargetBegin
}

func (c *countingTool) TargetBegin(e tool.TargetEvent) {
	c.mu.Lock()
	c.begins++
	if c.ids == nil {
		c.ids = map[uint64]bool{}
	}
	c.ids[e.Task] = true
	c.mu.Unlock()
}

func (c *countingTool) TargetEnd(e tool.TargetEvent) {
	c.mu.Lock()
	c.ends++
	if e.Nowait {
		c.nowaitEnds++
	}
	c.mu.Unlock()
}
func (c *countingTool) DataOp(tool.DataEvent) { c.mu.Lock(); c.data++; c.mu.Unlock() }
func (c *countingTool) Wait(tool.WaitEvent)   { c.mu.Lock(); c.waits++; c.mu.Unlock() }
func (c *countingTool) KernelLaunch(e tool.KernelEvent) {
	c.mu.Lock()
	c.launches++
	c.kernels = append(c.kernels, e.Name)
	c.mu.Unlock()
}

// TestTool checks that a Tool set at Start sees constructs, copies, kernel
// launches and waits.
func TestTool(t *testing.T) {
	tool := &countingTool{}
	start(t, offload.WithDevices("host"), offload.WithTool(tool))
	x := filled(8, 1)
	if err := offload.Run(AddTo, int32(1), x); err != nil { // 2 copies, 2 mapping changes
		t.Fatal(err)
	}
	a := offload.Nowait(offload.DependOut(x)).Run(AddTo, int32(1), x)
	b := offload.Nowait(offload.DependIn(x)).Run(Fill, int32(1), make([]int32, 2))
	if err := errors2(a.Wait(), b.Wait()); err != nil {
		t.Fatal(err)
	}
	tool.mu.Lock()
	defer tool.mu.Unlock()
	if tool.begins != 3 || tool.ends != 3 || tool.launches != 3 || tool.data < 4 || tool.kernels[0] != "test.addto" {
		t.Errorf("tool saw %d begins, %d ends, %d launches %v, %d data ops", tool.begins, tool.ends, tool.launches, tool.kernels, tool.data)
	}
	if tool.nowaitEnds != 2 {
		t.Errorf("tool saw %d nowait constructs end, want 2 (the synchronous one is not)", tool.nowaitEnds)
	}
	if len(tool.ids) != 3 || tool.ids[0] {
		t.Errorf("tool saw task ids %v: want 3 distinct, none 0 (synchronous constructs are numbered too)", tool.ids)
	}
}

func errors2(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// TestProfileTraceReplay: a recorded Jacobi's replays show in the profile
// as spans per queue under their task numbers, with their kernels and
// exchanges inside (checkTrace), on local:2.
func TestProfileTraceReplay(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.json")
	t.Setenv("GOFFLOAD_PROFILE", path)
	if err := offload.Start(offload.WithDevices("local:2")); err != nil {
		t.Fatal(err)
	}
	grid, _, err := jacobi.SolveRecorded([]offload.Device{offload.On(0), offload.On(1)}, 40, 8)
	if err != nil {
		t.Fatal(err)
	}
	if err := offload.Stop(); err != nil {
		t.Fatal(err)
	}
	want, _ := jacobi.Reference(40, 8)
	if err := jacobi.Check(grid, want, 40); err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, e := range checkTrace(t, path) {
		if e.Ph == "X" {
			kinds[e.Cat]++
			if e.Cat == "task" && strings.Contains(e.Name, "taskgraph") {
				kinds["replay"]++
			}
		}
		if e.Ph == "X" && e.Args["kind"] == "copy device to device" {
			kinds["exchange"]++
		}
	}
	// 2 recorded iterations, 6 replayed (a span each), on 2 devices.
	if kinds["kernel"] < 16 || kinds["exchange"] < 14 || kinds["replay"] != 6 {
		t.Errorf("8 iterations, 6 replayed, on 2 devices show %v", kinds)
	}
}
