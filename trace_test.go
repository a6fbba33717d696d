package offload_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goffload/offload"
)

// TestProfileTrace runs a known program with GOFFLOAD_PROFILE and checks the
// Chrome trace it writes: a process per device, a thread per queue, the
// construct spans, kernels with argument sizes, copies with direction,
// bytes and buffer name, waits naming what they wait for, mapping changes.
func TestProfileTrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.json")
	t.Setenv("GOFFLOAD_PROFILE", path)
	if err := offload.Start(offload.WithDevices("host,local:1")); err != nil {
		t.Fatal(err)
	}
	x := make([]float32, 1024)
	// Host work first, so that the device tasks below are all created while
	// it runs, and the one on device 1 must wait for device 0's on the host.
	offload.Nowait(offload.DependOut(x)).Go("prepare", func() error { time.Sleep(30 * time.Millisecond); return nil })
	w := offload.On(0).Nowait(offload.DependInOut(x)).EnterData(offload.To(x).Named("x"))
	offload.On(0).Nowait(offload.DependInOut(x)).Run(SleepF, int64(50), x)
	k := offload.On(0).Nowait(offload.DependInOut(x)).Run(Scale, float32(2), x)
	y := make([]int32, 256)
	r := offload.On(1).Nowait(offload.DependIn(x)).Run(Fill, int32(3), offload.ToFrom(y).Named("y"))
	offload.On(0).Nowait(offload.DependInOut(x)).ExitData(offload.From(x).Named("x"))
	if err := offload.Taskwait(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, _, _ = w, k, r
	if err := offload.Stop(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tr struct {
		TraceEvents []struct {
			Name string         `json:"name"`
			Ph   string         `json:"ph"`
			Ts   float64        `json:"ts"`
			Pid  int            `json:"pid"`
			Tid  int            `json:"tid"`
			Args map[string]any `json:"args"`
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	has := func(what string, ok func(name, ph string, pid int, args map[string]any) bool) {
		t.Helper()
		for _, e := range tr.TraceEvents {
			if ok(e.Name, e.Ph, e.Pid, e.Args) {
				return
			}
		}
		t.Errorf("the trace has no %s", what)
	}
	has("name for device 0", func(n, ph string, pid int, a map[string]any) bool {
		return ph == "M" && n == "process_name" && pid == 0 && strings.Contains(a["name"].(string), "device 0 (host)")
	})
	has("name for device 1", func(n, ph string, pid int, a map[string]any) bool {
		return ph == "M" && n == "process_name" && pid == 1 && strings.Contains(a["name"].(string), "device 1 (remote)")
	})
	has("queue thread names", func(n, ph string, pid int, a map[string]any) bool {
		return ph == "M" && n == "thread_name" && strings.HasPrefix(a["name"].(string), "queue ")
	})
	has("target span begin on device 0", func(n, ph string, pid int, _ map[string]any) bool {
		return ph == "B" && n == "target test.scale" && pid == 0
	})
	has("target span end on device 1", func(n, ph string, pid int, _ map[string]any) bool {
		return ph == "E" && n == "target test.fill" && pid == 1
	})
	has("kernel launch with argument sizes", func(n, ph string, pid int, a map[string]any) bool {
		return ph == "i" && n == "kernel test.scale" && a["arg_bytes"] == 4096.0 && a["args"] == 2.0
	})
	has("copy to device of x", func(n, ph string, pid int, a map[string]any) bool {
		return ph == "i" && a["kind"] == "copy to device" && a["buffer"] == "x" && a["bytes"] == 4096.0
	})
	has("copy from device of y", func(n, ph string, pid int, a map[string]any) bool {
		return ph == "i" && a["kind"] == "copy from device" && a["buffer"] == "y" && pid == 1 && a["bytes"] == 1024.0
	})
	has("mapping created", func(n, ph string, pid int, a map[string]any) bool {
		return a["kind"] == "map create" && a["buffer"] == "x"
	})
	has("mapping removed", func(n, ph string, pid int, a map[string]any) bool {
		return a["kind"] == "map remove" && a["buffer"] == "x"
	})
	has("wait on device 0 for the sleeping task", func(n, ph string, pid int, a map[string]any) bool {
		return ph == "i" && strings.HasPrefix(n, "wait for task") && a["for"] == "target test.sleepf" && a["on_device"] == true
	})
	has("host wait on device 1 for a host device task", func(n, ph string, pid int, a map[string]any) bool {
		return ph == "X" && pid == 1 && a["for"] == "target test.scale" && a["on_device"] == false
	})
	// Spans are balanced on every track.
	depth := map[[2]int]int{}
	for _, e := range tr.TraceEvents {
		switch e.Ph {
		case "B":
			depth[[2]int{e.Pid, e.Tid}]++
		case "E":
			depth[[2]int{e.Pid, e.Tid}]--
		}
	}
	for k, d := range depth {
		if d != 0 {
			t.Errorf("track %v: %d spans left open", k, d)
		}
	}
}

// SleepF sleeps, holding x.
var SleepF = offload.MustKernel("test.sleepf", func(ms int64, x []float32) { time.Sleep(time.Duration(ms) * time.Millisecond) })

// countingTool counts the events a Tool receives.
type countingTool struct {
	mu                           sync.Mutex
	begins, ends, data, launches int
	waits                        int
	kernels                      []string
}

func (c *countingTool) TargetBegin(offload.TargetEvent) { c.mu.Lock(); c.begins++; c.mu.Unlock() }
func (c *countingTool) TargetEnd(offload.TargetEvent)   { c.mu.Lock(); c.ends++; c.mu.Unlock() }
func (c *countingTool) DataOp(offload.DataEvent)        { c.mu.Lock(); c.data++; c.mu.Unlock() }
func (c *countingTool) Wait(offload.WaitEvent)          { c.mu.Lock(); c.waits++; c.mu.Unlock() }
func (c *countingTool) KernelLaunch(e offload.KernelEvent) {
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
}

func errors2(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
