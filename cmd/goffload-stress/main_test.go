package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/goffload/offload"
	"github.com/goffload/offload/role"
)

// The device processes the tests start are this test binary.
func TestMain(m *testing.M) {
	role.ServeDevice()
	os.Exit(m.Run())
}

// small is a run sized for CI under -race on 2 cores.
func small(devices string) config {
	return config{Tasks: 2000, Goroutines: 4, Buffers: 16, Len: 8, Window: 16, Seed: 1, Devices: devices,
		Timeout: 60 * time.Second, Epochs: 0.05, HardGrace: 30 * time.Second,
		Hard: func() { panic("goffload-stress: the run did not return after its deadline (goroutines above)") }}
}

func runOK(t *testing.T, cfg config) *result {
	t.Helper()
	var out bytes.Buffer
	cfg.Out = &out
	res, err := run(cfg)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	var errs bytes.Buffer
	res.Errors.write(&errs, 10)
	t.Logf("%s\n%s%s", strings.TrimSpace(out.String()), errs.String(), res.summary())
	if code, why := res.verdict(); code != 0 {
		t.Errorf("exit status %d: %s", code, why)
	}
	if res.Tasks != cfg.Tasks {
		t.Errorf("%d tasks completed, want %d", res.Tasks, cfg.Tasks)
	}
	return res
}

// No task fails and every element of every buffer equals the sequential
// reference, with tasks on two host devices, the initial device and host
// work.
func TestStressHost(t *testing.T) {
	res := runOK(t, small("host:2"))
	if res.OK != res.Tasks {
		t.Errorf("%d of %d tasks succeeded", res.OK, res.Tasks)
	}
}

// The same on device processes.
func TestStressLocal(t *testing.T) {
	runOK(t, small("host,local:2"))
}

// A device process SIGKILLed mid-run: the run finishes (no hang), no buffer
// is outside [successes, successes+failures], and every failed task's error
// names a device.
func TestStressKill(t *testing.T) {
	cfg := small("host,local:2")
	cfg.KillAfter, cfg.KillMax = 300, 1
	res := runOK(t, cfg)
	if res.Kills != 1 {
		t.Errorf("%d device processes killed, want 1", res.Kills)
	}
	if res.Failed == 0 {
		t.Errorf("no task failed after a device process was killed")
	}
}

// The checker is not vacuous: an element off its reference is data loss, a
// buffer between its successes and successes+failures is not.
func TestCheckFindsLoss(t *testing.T) {
	var errs bytes.Buffer
	s := &state{cfg: config{Errs: &errs}, bufs: [][]int64{{5, 5}, {7, 8}, {9, 9}}, init: []int64{0, 0, 0},
		succ: make([]atomic.Int64, 3), fail: make([]atomic.Int64, 3)}
	s.succ[0].Store(5)
	s.succ[1].Store(7)
	s.fail[1].Store(1) // 7 or 8 are both possible
	s.succ[2].Store(10)
	res := &result{}
	s.check(res)
	if res.Lost != 2 || res.LostBuffers != 1 || res.Above != 1 {
		t.Errorf("lost=%d buffers=%d above=%d, want 2, 1, 1", res.Lost, res.LostBuffers, res.Above)
	}
	if !strings.Contains(errs.String(), "DATA LOSS: shared buffer 2 element 0 = 9, want 10") {
		t.Errorf("report %q does not name the buffer, element and values", errs.String())
	}
	if code, _ := res.verdict(); code != 1 {
		t.Errorf("verdict %d, want 1", code)
	}
}

// Errors are counted under the device of their root cause; one naming no
// device is counted apart.
func TestErrorCounts(t *testing.T) {
	e := newErrorCounts()
	cause := errors.New("goffload: device 2 (local): target stress.k1: device lost")
	dep := fmt.Errorf("goffload: task 9 (stress.host) did not run: a task it depends on failed: task 8 (target stress.k1): %w: %w", offload.ErrDependency, cause)
	var w bytes.Buffer
	e.add(dep, &w)
	e.add(cause, &w)
	e.add(errors.New("something with no name"), &w)
	got := e.devices()
	if got["device 2"] != 2 || got["NO DEVICE"] != 1 || e.unnamed.Load() != 1 {
		t.Errorf("counts %v, unnamed %d; want device 2: 2, NO DEVICE: 1", got, e.unnamed.Load())
	}
	if !strings.Contains(w.String(), "something with no name") {
		t.Errorf("the error naming no device is not shown: %q", w.String())
	}
}

// smallAny is an Any-mode run sized for CI under -race on 2 cores: two
// device processes, epochs of 500 tasks.
func smallAny() config {
	cfg := small("local:2")
	cfg.Any, cfg.AnyEpoch, cfg.AnyWait = true, 500, 0.05
	return cfg
}

// checkAnyRerun checks what the Any-mode runs with one device lost share:
// no task failed (the verdict, which runOK checks, says so too), the lost
// device's work ran again or its data was recomputed, every kernel task
// was placed, and a new runtime was started after the fault.
func checkAnyRerun(t *testing.T, res *result) {
	t.Helper()
	a := res.Any
	t.Log(a.summary())
	if res.Failed != 0 || res.OK != res.Tasks {
		t.Errorf("%d tasks failed, %d of %d succeeded; want every task to succeed with a device left", res.Failed, res.OK, res.Tasks)
	}
	if a.Reruns+a.Restores == 0 {
		t.Errorf("no task ran again and no data was recomputed after the fault")
	}
	if a.Placed != a.Kernels {
		t.Errorf("the info output showed %d placements, want one per Any-task (%d)", a.Placed, a.Kernels)
	}
	if a.Generations < 2 {
		t.Errorf("%d runtimes, want a new one after the epoch with the fault", a.Generations)
	}
}

// Any mode, a device process SIGKILLed mid-run: every task succeeds, every
// element of every buffer equals the model at every epoch's end, host
// tasks find their buffers as the model has them, and the lost device's
// tasks ran again.
func TestStressAnyKill(t *testing.T) {
	cfg := smallAny()
	cfg.KillAfter = 300
	res := runOK(t, cfg)
	if res.Kills != 1 {
		t.Errorf("%d device processes killed, want 1", res.Kills)
	}
	checkAnyRerun(t, res)
}

// Any mode, device processes and a host device, one device process
// SIGKILLed mid-run: every task succeeds, every buffer equals the model,
// host tasks find their buffers as the model has them, and only the killed
// process is lost. (A copy from the host device to the killed process,
// staged through the program's memory, once made the runtime take the
// loss for the host device's own: the copies still due into it were then
// skipped, its tasks ran on stale data, and host tasks found other
// buffers than the model's.)
func TestStressAnyKillMixed(t *testing.T) {
	for _, seed := range []uint64{4, 5, 6} {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			cfg := smallAny()
			cfg.Devices = "local:2,host"
			cfg.Tasks, cfg.Goroutines, cfg.Buffers, cfg.Len, cfg.Seed = 1000, 1, 4, 16, seed
			cfg.KillAfter, cfg.KillMax = 150, 1
			res := runOK(t, cfg)
			if res.Kills != 1 {
				t.Errorf("%d device processes killed, want 1", res.Kills)
			}
			// Not checkAnyRerun: the process killed may have held
			// nothing unfinished, the host device having taken its
			// share.
			a := res.Any
			t.Log(a.summary())
			if a.Placed != a.Kernels {
				t.Errorf("the info output showed %d placements, want one per Any-task (%d)", a.Placed, a.Kernels)
			}
			if a.Generations < 2 {
				t.Errorf("%d runtimes, want a new one after the epoch with the fault", a.Generations)
			}
			if n := a.LostUnhit; n != 0 {
				t.Errorf("%d devices found lost that no fault hit, want 0 (only the killed process is lost)", n)
			}
		})
	}
}

// Any mode, a device process SIGSTOPped for the rest of its runtime with
// GOFFLOAD_DEVICE_TIMEOUT=1s: it is found lost, its work runs again on the
// other, and nothing hangs.
func TestStressAnyStop(t *testing.T) {
	t.Setenv("GOFFLOAD_DEVICE_TIMEOUT", "1s")
	cfg := smallAny()
	cfg.Tasks = 500 // one epoch: the loss takes the timeout and a second more (the lost process's exit status is waited for)
	cfg.StopAfter, cfg.StopFor = 200, 0
	res := runOK(t, cfg)
	if res.Stops < 1 {
		t.Errorf("%d device processes stopped, want at least 1", res.Stops)
	}
	checkAnyRerun(t, res)
}

// Any mode with every device process killed (-kill-max 2 of 2): tasks
// fail, since no device is left to run them, but nothing hangs, each
// failure is in an epoch that lost every device and wraps ErrDeviceLost or
// ErrNoDevice, and the next runtime's tasks run.
func TestStressAnyAllLost(t *testing.T) {
	cfg := smallAny()
	cfg.Tasks = 1500
	cfg.Kill, cfg.KillMax = 5*time.Millisecond, 2
	res := runOK(t, cfg)
	a := res.Any
	t.Log(a.summary())
	if a.AllLostEpochs == 0 || res.Failed == 0 {
		t.Errorf("%d epochs lost every device, %d tasks failed; want both above 0", a.AllLostEpochs, res.Failed)
	}
	if res.Failed != a.FailedAllLost {
		t.Errorf("%d tasks failed, %d of them in epochs that lost every device; want all of them", res.Failed, a.FailedAllLost)
	}
}

// The Any mode's checker is not vacuous: an element that differs from the
// model at an epoch's end is data loss (once: the next epochs go on from
// the buffer as it is), and a host task that finds a buffer other than
// the model's is a stale read.
func TestAnyCheckFindsLoss(t *testing.T) {
	cfg := smallAny()
	cfg.Tasks = 1000
	var errs bytes.Buffer
	cfg.Errs = &errs
	cfg.anyCheckHook = func(a *anyRun, epoch int) {
		if epoch == 1 {
			a.bufs[3][2]++ // after Taskwait: the buffer is the program's
		}
	}
	res, err := run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Lost != 1 || res.LostBuffers != 1 {
		t.Errorf("lost=%d buffers=%d, want 1 and 1", res.Lost, res.LostBuffers)
	}
	if !strings.Contains(errs.String(), "DATA LOSS: epoch 1: shared buffer 3 element 2 = ") {
		t.Errorf("report %q does not name the epoch, buffer and element", errs.String())
	}
	if code, _ := res.verdict(); code != 1 {
		t.Errorf("verdict %d, want 1", code)
	}

	a := &anyRun{}
	a.expect("read", 5, []int64{1, 2, 3}, []int64{1, 2, 3})
	a.expect("read", 5, []int64{1, 2, 3}, []int64{1, 7, 3})
	if n, notes := a.takeStale(); n != 1 || len(notes) != 1 || !strings.Contains(notes[0], "shared buffer 5 element 1 = 2, want 7") {
		t.Errorf("stale reads %d %q, want 1 naming buffer 5 element 1", n, notes)
	}
}

// Graph mode: recorded graphs replayed with new scalars and contents, every
// replay checked exactly, every broken rule refused with ErrGraphChanged;
// on host devices and on device processes, one of them SIGKILLed mid-run
// (its replays fail with errors naming it, the run goes on on the other),
// and graphs of Any() tasks, also with a device process SIGKILLed (the
// runtime re-runs or restores what it held; what it cannot fails with an
// error that names the device and the buffer).
func TestStressGraph(t *testing.T) {
	for _, tc := range []struct {
		name, devices string
		kill, any     bool
	}{{"host", "host:2", false, false}, {"local", "local:2", false, false}, {"local-kill", "local:2", true, false}, {"any", "local:2", false, true}, {"any-kill", "local:3", true, true}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := small(tc.devices)
			cfg.Graph, cfg.Tasks, cfg.Any = true, 6000, tc.any
			if tc.kill {
				cfg.KillAfter, cfg.KillMax = 1500, 1
			}
			res := runOK(t, cfg)
			g := res.Graph
			t.Log(g.summary())
			if g.runs.Load() == 0 || g.replays.Load() == 0 || g.broken.Load() == 0 {
				t.Errorf("no Run replayed, Replay made or rule broken: %s", g.summary())
			}
			if tc.kill && tc.any {
				if res.Kills != 1 {
					t.Errorf("%d kills, want 1", res.Kills)
				}
			} else if tc.kill {
				if res.Kills != 1 || g.failed.Load() == 0 {
					t.Errorf("%d kills, %d graphs failed: want 1 kill that failed a graph", res.Kills, g.failed.Load())
				}
			} else if res.OK != res.Tasks {
				t.Errorf("%d of %d tasks succeeded", res.OK, res.Tasks)
			}
		})
	}
}

// The graph checker is not vacuous: a replay whose value is off is data
// loss.
func TestGraphCheckFindsLoss(t *testing.T) {
	s := &state{cfg: config{Errs: io.Discard}}
	w := &worker{s: s}
	m := &gmodel{host: []int64{3}, dev: []int64{3}}
	if !w.graphCheck(m, [][]int64{{3, 3}}, "replay") {
		t.Fatal("equal buffer reported lost")
	}
	if w.graphCheck(m, [][]int64{{3, 4}}, "replay") || s.graph.lost.Load() != 1 {
		t.Fatalf("an element off its model not found: lost=%d", s.graph.lost.Load())
	}
}
