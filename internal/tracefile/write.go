package tracefile

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/tool"
)

// Trace is a tool.Tool that records events in Chrome's Trace Event Format, which
// Perfetto and chrome://tracing open. Each device is a process with:
//   - a track per queue ("queue N") with the operations as the device ran
//     them (kernels, copies with bytes and buffer name, waits), with
//     device-side start and end times: a queue runs in order, so its track
//     never overlaps itself;
//   - task tracks ("tasks N") with each construct's span, from its
//     enqueueing to its completion as the host saw it, named with its task
//     id; spans that overlap in time go on different tracks;
//   - host-wait tracks with the host's waits for other tasks;
//   - arrows from each task to the tasks that waited for it, across
//     devices too.
//
// Every event carries its task id in args.task.
type Trace struct {
	mu    sync.Mutex
	start time.Time
	names map[int]string
	tasks map[uint64]*traceTask
	ops   []tool.DeviceOpEvent
	waits []tool.WaitEvent
	marks []traceEvent // mapping changes, as instants
}

// traceTask is what the trace knows of a construct.
type traceTask struct {
	id           uint64
	name         string
	dev, queue   int
	begin, end   time.Time
	ended        bool
	nowait       bool
	err          string
	copies       map[tool.DataKind][]tool.DataEvent // in enqueue order
	launches     []tool.KernelEvent
	first, last  *traceEvent // its first device operation after its waits, and its last, once written
	slice        *traceEvent // its span, once written
	nextCopy     map[tool.DataKind]int
	nextLaunches int
	notes        []string // the runtime's decisions about it (Note)
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
	ID    uint64         `json:"id,omitempty"`
	Bind  string         `json:"bp,omitempty"`
	Args  map[string]any `json:"args,omitempty"`
}

// Track numbers: queue tracks are the queues' own numbers (from 1); task
// and host-wait tracks start at these.
const (
	taskTrack = 10000
	waitTrack = 20000
)

// NewTrace returns an empty trace starting now.
func NewTrace() *Trace {
	return &Trace{start: time.Now(), names: map[int]string{}, tasks: map[uint64]*traceTask{}}
}

func (tr *Trace) us(t time.Time) float64 { return float64(t.Sub(tr.start).Nanoseconds()) / 1e3 }

// task returns the task id's record, under tr.mu.
func (tr *Trace) task(w tool.Where) *traceTask {
	t := tr.tasks[w.Task]
	if t == nil {
		t = &traceTask{id: w.Task, dev: w.Device, queue: w.Queue}
		tr.tasks[w.Task] = t
	}
	return t
}

// Note records a decision of the runtime's about task number task. It may
// say where an Any-task went and why, the copies its data needed, or a
// re-run after a device was lost. The task's span carries the notes in
// args.runtime.
func (tr *Trace) Note(task uint64, text string) {
	tr.mu.Lock()
	t := tr.task(tool.Where{Task: task})
	t.notes = append(t.notes, text)
	tr.mu.Unlock()
}

// TargetBegin opens a construct's span.
func (tr *Trace) TargetBegin(e tool.TargetEvent) {
	tr.mu.Lock()
	t := tr.task(e.Where)
	t.name, t.begin, t.dev, t.queue, t.nowait = e.Name, e.Time, e.Device, e.Queue, e.Nowait
	tr.mu.Unlock()
}

// TargetEnd closes it.
func (tr *Trace) TargetEnd(e tool.TargetEvent) {
	tr.mu.Lock()
	t := tr.task(e.Where)
	t.end, t.ended, t.nowait = e.Time, true, e.Nowait
	if e.Err != nil {
		t.err = e.Err.Error()
	}
	tr.mu.Unlock()
}

// DataOp keeps a copy's buffer name for the device's copy, and marks a
// mapping change.
func (tr *Trace) DataOp(e tool.DataEvent) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	args := map[string]any{"task": e.Task, "kind": e.Kind.String(), "buffer": e.Name, "bytes": e.Bytes,
		"host": fmt.Sprintf("%#x", e.Host), "target": fmt.Sprintf("%#x", e.Target)}
	switch e.Kind {
	case tool.MapCreate, tool.MapRemove:
		tr.marks = append(tr.marks, traceEvent{Name: fmt.Sprintf("%s %s", e.Kind, e.Name), Cat: "data", Ph: "i", Scope: "t",
			Ts: tr.us(e.Time), Pid: e.Device, Tid: e.Queue, Args: args})
	default:
		t := tr.task(e.Where)
		if t.copies == nil {
			t.copies = map[tool.DataKind][]tool.DataEvent{}
		}
		t.copies[e.Kind] = append(t.copies[e.Kind], e)
	}
}

// KernelLaunch keeps a launch's arguments for the device's kernel span.
func (tr *Trace) KernelLaunch(e tool.KernelEvent) {
	tr.mu.Lock()
	t := tr.task(e.Where)
	t.launches = append(t.launches, e)
	tr.mu.Unlock()
}

// Wait keeps a wait: an arrow from the task waited for, and a span of its
// own for a host wait.
func (tr *Trace) Wait(e tool.WaitEvent) {
	tr.mu.Lock()
	tr.waits = append(tr.waits, e)
	tr.mu.Unlock()
}

// DeviceOp keeps an operation as the device ran it.
func (tr *Trace) DeviceOp(e tool.DeviceOpEvent) {
	tr.mu.Lock()
	tr.ops = append(tr.ops, e)
	tr.mu.Unlock()
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
	evs := tr.events()
	tr.mu.Unlock()
	b, err := json.Marshal(map[string]any{"traceEvents": evs, "displayTimeUnit": "ns"})
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// events lays the trace out, under tr.mu.
func (tr *Trace) events() []traceEvent {
	out := make([]*traceEvent, 0, len(tr.ops)+2*len(tr.tasks)+len(tr.marks))
	threads := map[[2]int]string{}
	for _, t := range tr.tasks {
		t.first, t.last, t.slice, t.nextCopy, t.nextLaunches = nil, nil, nil, map[tool.DataKind]int{}, 0
	}
	// Device operations, on their task's queue track; a track is in order,
	// so an operation starts once the one before it ended (clock estimates
	// may disagree by a little between records).
	ops := append([]tool.DeviceOpEvent(nil), tr.ops...)
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Time.Before(ops[j].Time) })
	trackEnd := map[[2]int]time.Time{}
	for _, o := range ops {
		t := tr.tasks[o.Task]
		if t == nil {
			t = tr.task(o.Where)
		}
		key := [2]int{o.Device, t.queue}
		start, end := o.Time, o.End
		if prev, ok := trackEnd[key]; ok && start.Before(prev) {
			start = prev
		}
		if end.Before(start) {
			end = start
		}
		trackEnd[key] = end
		threads[key] = fmt.Sprintf("queue %d", t.queue)
		e := &traceEvent{Cat: "device", Ph: "X", Ts: tr.us(start), Dur: float64(end.Sub(start).Nanoseconds()) / 1e3,
			Pid: o.Device, Tid: t.queue, Args: map[string]any{"task": t.id, "construct": t.name, "op": o.Kind.String()}}
		if o.Failed {
			e.Args["failed"] = true
		}
		tr.nameOp(e, t, o)
		out = append(out, e)
		if t.first == nil && o.Kind != plugin.OpWait { // an arrow ends where the waiting is over
			t.first = e
		}
		t.last = e
	}
	// Constructs' spans, on task tracks where they do not overlap.
	tasks := make([]*traceTask, 0, len(tr.tasks))
	for _, t := range tr.tasks {
		if !t.begin.IsZero() {
			tasks = append(tasks, t)
		}
	}
	sort.Slice(tasks, func(i, j int) bool {
		return tasks[i].begin.Before(tasks[j].begin) || (tasks[i].begin.Equal(tasks[j].begin) && tasks[i].id < tasks[j].id)
	})
	lanes := newLanes(taskTrack)
	for _, t := range tasks {
		end := t.end
		if !t.ended { // still running when the trace was written
			end = t.begin
			if t.last != nil {
				end = t.begin.Add(time.Duration((t.last.Ts + t.last.Dur - tr.us(t.begin)) * 1e3))
			}
		}
		tid := lanes.place(t.dev, t.begin, end)
		threads[[2]int{t.dev, tid}] = fmt.Sprintf("tasks %d", tid-taskTrack+1)
		args := map[string]any{"task": t.id, "queue": t.queue, "nowait": t.nowait}
		if t.err != "" {
			args["error"] = t.err
		}
		if !t.ended {
			args["unfinished"] = true
		}
		if len(t.notes) > 0 {
			args["runtime"] = t.notes
		}
		e := &traceEvent{Name: fmt.Sprintf("task %d: %s", t.id, t.name), Cat: "task", Ph: "X", Ts: tr.us(t.begin),
			Dur: float64(end.Sub(t.begin).Nanoseconds()) / 1e3, Pid: t.dev, Tid: tid, Args: args}
		t.slice = e
		out = append(out, e)
	}
	// Waits: host waits as spans of their own; an arrow from every task
	// waited for to its waiter.
	wlanes := newLanes(waitTrack)
	var flow uint64
	for _, w := range tr.waits {
		from, to := tr.tasks[w.For], tr.tasks[w.Task]
		var target *traceEvent
		if !w.OnDevice {
			end := w.Time.Add(w.Dur)
			tid := wlanes.place(w.Device, w.Time, end)
			threads[[2]int{w.Device, tid}] = fmt.Sprintf("host waits %d", tid-waitTrack+1)
			target = &traceEvent{Name: fmt.Sprintf("task %d waits for task %d (%s)", w.Task, w.For, w.ForName), Cat: "wait", Ph: "X",
				Ts: tr.us(w.Time), Dur: float64(w.Dur.Nanoseconds()) / 1e3, Pid: w.Device, Tid: tid,
				Args: map[string]any{"task": w.Task, "for_task": w.For, "for": w.ForName, "on_device": false}}
			out = append(out, target)
		} else if to != nil {
			target = to.first
			if target == nil {
				target = to.slice
			}
		}
		var source *traceEvent
		if from != nil {
			source = from.last
			if source == nil {
				source = from.slice
			}
		}
		if source == nil || target == nil {
			continue
		}
		flow++
		args := map[string]any{"task": w.Task, "for_task": w.For, "on_device": w.OnDevice}
		out = append(out,
			&traceEvent{Name: "depends", Cat: "dependency", Ph: "s", ID: flow, Ts: inside(source, true), Pid: source.Pid, Tid: source.Tid, Args: args},
			&traceEvent{Name: "depends", Cat: "dependency", Ph: "f", Bind: "e", ID: flow, Ts: inside(target, false), Pid: target.Pid, Tid: target.Tid, Args: args})
	}
	for i := range tr.marks {
		out = append(out, &tr.marks[i])
	}
	res := make([]traceEvent, 0, len(out)+2*len(tr.names)+len(threads))
	for _, e := range out {
		res = append(res, *e)
	}
	for dev, name := range tr.names {
		res = append(res, traceEvent{Name: "process_name", Ph: "M", Pid: dev, Args: map[string]any{"name": name}},
			traceEvent{Name: "process_sort_index", Ph: "M", Pid: dev, Args: map[string]any{"sort_index": dev}})
	}
	for k, name := range threads {
		res = append(res, traceEvent{Name: "thread_name", Ph: "M", Pid: k[0], Tid: k[1], Args: map[string]any{"name": name}},
			traceEvent{Name: "thread_sort_index", Ph: "M", Pid: k[0], Tid: k[1], Args: map[string]any{"sort_index": k[1]}})
	}
	return res
}

// nameOp names a device operation, with what the host said of it: the
// kernel's arguments, the copied buffer's name (the task's copies of a
// kind are in the order the device ran them).
func (tr *Trace) nameOp(e *traceEvent, t *traceTask, o tool.DeviceOpEvent) {
	switch o.Kind {
	case plugin.OpLaunch:
		e.Name, e.Cat = "kernel "+o.Kernel, "kernel"
		e.Args["kernel"] = o.Kernel
		if t.nextLaunches < len(t.launches) {
			l := t.launches[t.nextLaunches]
			e.Args["args"], e.Args["arg_bytes"] = l.Args, l.ArgBytes
		}
		t.nextLaunches++
	case plugin.OpSubmit, plugin.OpRetrieve, plugin.OpExchange:
		dk := copyKinds[o.Kind]
		e.Cat = "copy"
		e.Args["kind"], e.Args["bytes"] = dk.String(), o.Bytes
		name := unnamedBuffer
		if i := t.nextCopy[dk]; i < len(t.copies[dk]) {
			c := t.copies[dk][i]
			name = c.Name
			e.Args["host"], e.Args["target"] = fmt.Sprintf("%#x", c.Host), fmt.Sprintf("%#x", c.Target)
		}
		t.nextCopy[dk]++
		e.Args["buffer"] = name
		e.Name = fmt.Sprintf("%s %s (%d bytes)", dk, name, o.Bytes)
	case plugin.OpWait:
		e.Name, e.Cat = "wait", "wait"
	default:
		e.Name = o.Kind.String()
	}
}

// copyKinds are the data operations the tools saw for the device's copies.
var copyKinds = map[plugin.OpKind]tool.DataKind{plugin.OpSubmit: tool.CopyToDevice, plugin.OpRetrieve: tool.CopyFromDevice, plugin.OpExchange: tool.CopyDeviceToDevice}

// inside is a time inside slice e for an arrow to bind to: near its end
// (an arrow's source) or its start.
func inside(e *traceEvent, atEnd bool) float64 {
	d := min(e.Dur/2, 0.001)
	if atEnd {
		return e.Ts + e.Dur - d
	}
	return e.Ts + d
}

// lanes puts spans on the first of a device's tracks where they do not
// overlap the span before them (spans come in start order).
type lanes struct {
	base int
	ends map[int][]time.Time
}

func newLanes(base int) *lanes { return &lanes{base: base, ends: map[int][]time.Time{}} }

func (l *lanes) place(dev int, start, end time.Time) int {
	ends := l.ends[dev]
	for i, e := range ends {
		if !start.Before(e) {
			ends[i] = end
			return l.base + i
		}
	}
	l.ends[dev] = append(ends, end)
	return l.base + len(ends)
}

// unnamedBuffer is how a trace shows a buffer without a name, as errors do.
const unnamedBuffer = "unnamed buffer"
