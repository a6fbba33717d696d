package core

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"
)

// Trace is a Tool that records events in Chrome's Trace Event Format, which
// Perfetto and chrome://tracing open: a process per device, a thread per
// queue; constructs are spans from their enqueueing to their completion,
// with kernel launches, copies, mapping changes and device-side waits as
// instants inside them, and host-side waits as spans of their own.
type Trace struct {
	mu     sync.Mutex
	start  time.Time
	events []traceEvent
	names  map[int]string
	queues map[[2]int]bool
}

type traceEvent struct {
	Name  string         `json:"name"`
	Cat   string         `json:"cat,omitempty"`
	Ph    string         `json:"ph"`
	Ts    float64        `json:"ts"`
	Dur   float64        `json:"dur,omitempty"`
	Pid   int            `json:"pid"`
	Tid   int            `json:"tid"`
	Scope string         `json:"s,omitempty"`
	Args  map[string]any `json:"args,omitempty"`
}

// NewTrace returns an empty trace starting now.
func NewTrace() *Trace {
	return &Trace{start: time.Now(), names: map[int]string{}, queues: map[[2]int]bool{}}
}

func (tr *Trace) us(t time.Time) float64 { return float64(t.Sub(tr.start).Nanoseconds()) / 1e3 }

func (tr *Trace) add(w Where, e traceEvent) {
	e.Ts, e.Pid, e.Tid = tr.us(w.Time), w.Device, w.Queue
	tr.mu.Lock()
	tr.events = append(tr.events, e)
	tr.queues[[2]int{w.Device, w.Queue}] = true
	tr.mu.Unlock()
}

// TargetBegin opens a construct's span on its queue's track.
func (tr *Trace) TargetBegin(e TargetEvent) {
	tr.add(e.Where, traceEvent{Name: e.Name, Cat: "construct", Ph: "B", Args: map[string]any{"task": e.Task}})
}

// TargetEnd closes it.
func (tr *Trace) TargetEnd(e TargetEvent) {
	args := map[string]any{}
	if e.Err != nil {
		args["error"] = e.Err.Error()
	}
	tr.add(e.Where, traceEvent{Name: e.Name, Cat: "construct", Ph: "E", Args: args})
}

// DataOp marks a copy or a mapping change.
func (tr *Trace) DataOp(e DataEvent) {
	tr.add(e.Where, traceEvent{Name: fmt.Sprintf("%s %s", e.Kind, e.Name), Cat: "data", Ph: "i", Scope: "t",
		Args: map[string]any{"kind": e.Kind.String(), "buffer": e.Name, "bytes": e.Bytes,
			"host": fmt.Sprintf("%#x", e.Host), "target": fmt.Sprintf("%#x", e.Target)}})
}

// KernelLaunch marks a kernel launch.
func (tr *Trace) KernelLaunch(e KernelEvent) {
	tr.add(e.Where, traceEvent{Name: "kernel " + e.Name, Cat: "kernel", Ph: "i", Scope: "t",
		Args: map[string]any{"kernel": e.Name, "args": e.Args, "arg_bytes": e.ArgBytes}})
}

// Wait marks a wait on a device queue, or spans one on the host.
func (tr *Trace) Wait(e WaitEvent) {
	name := fmt.Sprintf("wait for task %d (%s)", e.For, e.ForName)
	args := map[string]any{"for_task": e.For, "for": e.ForName, "on_device": e.OnDevice}
	if e.OnDevice {
		tr.add(e.Where, traceEvent{Name: name, Cat: "wait", Ph: "i", Scope: "t", Args: args})
		return
	}
	tr.add(e.Where, traceEvent{Name: name, Cat: "wait", Ph: "X", Dur: float64(e.Dur.Nanoseconds()) / 1e3, Args: args})
}

// Name names a device's track.
func (tr *Trace) Name(device int, name string) {
	tr.mu.Lock()
	tr.names[device] = name
	tr.mu.Unlock()
}

// WriteFile writes the trace as JSON.
func (tr *Trace) WriteFile(path string) error {
	tr.mu.Lock()
	evs := append([]traceEvent(nil), tr.events...)
	for dev, name := range tr.names {
		evs = append(evs, traceEvent{Name: "process_name", Ph: "M", Pid: dev, Args: map[string]any{"name": name}},
			traceEvent{Name: "process_sort_index", Ph: "M", Pid: dev, Args: map[string]any{"sort_index": dev}})
	}
	for q := range tr.queues {
		name := fmt.Sprintf("queue %d", q[1])
		if q[1] == 0 {
			name = "host"
		}
		evs = append(evs, traceEvent{Name: "thread_name", Ph: "M", Pid: q[0], Tid: q[1], Args: map[string]any{"name": name}})
	}
	tr.mu.Unlock()
	b, err := json.Marshal(map[string]any{"traceEvents": evs, "displayTimeUnit": "ns"})
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// tools sends every event to each of a list of tools.
type tools []Tool

func (ts tools) TargetBegin(e TargetEvent) {
	for _, t := range ts {
		t.TargetBegin(e)
	}
}

func (ts tools) TargetEnd(e TargetEvent) {
	for _, t := range ts {
		t.TargetEnd(e)
	}
}

func (ts tools) DataOp(e DataEvent) {
	for _, t := range ts {
		t.DataOp(e)
	}
}

func (ts tools) KernelLaunch(e KernelEvent) {
	for _, t := range ts {
		t.KernelLaunch(e)
	}
}

func (ts tools) Wait(e WaitEvent) {
	for _, t := range ts {
		t.Wait(e)
	}
}
