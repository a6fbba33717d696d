package core

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/goffload/offload/internal/plugin"
	"github.com/goffload/offload/internal/workpool"
)

// Device is one entry of the runtime's device table: a plugin device and its
// present table, or the initial device (the calling process itself).
type Device struct {
	// Num is the device number; the initial device's is the number of
	// devices, as omp_get_initial_device() returns.
	Num int
	// Dev is the plugin device; nil for the initial device and for a device
	// that could not be opened.
	Dev plugin.Device
	// Info describes the device.
	Info plugin.Info
	// Unavailable is why the device cannot be used, if it cannot.
	Unavailable error
	// Spec is the GOFFLOAD_DEVICES item the device came from.
	Spec string

	table *Table
	log   *Logger
	pool  *workpool.Pool // the initial device's workers

	tool Tool // nil: no tool

	qmu    sync.Mutex
	queues []*cqueue // idle queues
	nq     int       // queues created
}

// IsInitial reports whether d is the initial device.
func (d *Device) IsInitial() bool { return d.Dev == nil && d.Unavailable == nil }

// Table is the device's present table (nil for the initial device).
func (d *Device) Table() *Table { return d.table }

// Label names the device in messages: "device 0 (host)".
func (d *Device) Label() string {
	if d.IsInitial() {
		return fmt.Sprintf("initial device %d", d.Num)
	}
	return fmt.Sprintf("device %d (%s)", d.Num, d.Info.Kind)
}

// cqueue is a plugin queue with the number its trace track shows. A task
// whose predecessor on the same device was the last thing enqueued on a
// queue follows it on that queue, with no wait at all (the queue is in
// order); the queue goes back to the pool when its last user is done.
type cqueue struct {
	plugin.Queue
	id int
	// Guarded by the device's qmu.
	users  int   // constructs using the queue
	last   *Task // the task enqueued on it last, if others may follow it
	failed bool  // an operation failed: close it instead of reusing it
}

func (d *Device) getQueue() (*cqueue, error) {
	d.qmu.Lock()
	if n := len(d.queues); n > 0 {
		q := d.queues[n-1]
		d.queues = d.queues[:n-1]
		q.users = 1
		d.qmu.Unlock()
		return q, nil
	}
	d.nq++
	id := d.nq
	d.qmu.Unlock()
	q, err := d.Dev.NewQueue()
	if err != nil {
		return nil, fmt.Errorf("goffload: %s: cannot create a queue: %w", d.Label(), err)
	}
	return &cqueue{Queue: q, id: id, users: 1}, nil
}

// follow returns p's queue, with one more user, if nothing was enqueued on
// it after p and p is not done with it.
func (d *Device) follow(p *Task) *cqueue {
	d.qmu.Lock()
	defer d.qmu.Unlock()
	q := p.cq
	if q == nil || q.last != p || q.users == 0 || q.failed {
		return nil
	}
	q.users++
	q.last = nil // ours until our work is enqueued: nobody else follows p here
	return q
}

// release drops one user of q; the last one gives it back to the pool, or
// closes it if an operation on it failed.
func (d *Device) release(q *cqueue, failed bool) {
	d.qmu.Lock()
	q.users--
	q.failed = q.failed || failed
	last := q.users == 0
	closeIt := last && q.failed
	if last {
		q.last = nil
		if !q.failed {
			d.queues = append(d.queues, q)
		}
	}
	d.qmu.Unlock()
	if closeIt {
		q.Queue.Close()
	}
}

// work is one construct's operations on one queue: the first error, and what
// must run after the queue is synchronized (freeing unmapped entries).
type work struct {
	d     *Device
	cq    *cqueue
	q     plugin.Queue
	op    string
	task  uint64
	posts []func()
	first error
}

func (d *Device) begin(op string) (*work, error) {
	q, err := d.getQueue()
	if err != nil {
		return nil, err
	}
	return d.beginOn(op, q), nil
}

// beginOn starts a construct's work on q.
func (d *Device) beginOn(op string, q *cqueue) *work {
	w := &work{d: d, cq: q, q: q.Queue, op: op}
	if d.tool != nil {
		d.tool.TargetBegin(TargetEvent{Where: w.where(), Name: op})
	}
	return w
}

// where is the tool events' position of w now.
func (w *work) where() Where {
	return Where{Time: time.Now(), Device: w.d.Num, Queue: w.cq.id, Task: w.task}
}

func (w *work) err(e error) {
	if w.first == nil {
		w.first = e
	}
}

// finish synchronizes the queue, runs the posts and returns the first error.
func (w *work) finish() error {
	if err := w.q.Synchronize(); err != nil {
		w.err(fmt.Errorf("goffload: %s: %s: %w", w.d.Label(), w.op, err))
	}
	return w.done(true)
}

// done runs the posts of a queue whose work is over, gives the queue back
// (if it can be used again) and returns the first error.
func (w *work) done(reuse bool) error {
	d := w.d
	for _, p := range w.posts {
		p()
	}
	d.release(w.cq, !reuse)
	if d.tool != nil {
		d.tool.TargetEnd(TargetEvent{Where: w.where(), Name: w.op, Nowait: w.task != 0, Err: w.first})
	}
	if w.first != nil && d.log.On(InfoDumpTable) {
		d.dumpTable(fmt.Sprintf("Host-device pointer mappings after a failed %s:", w.op))
	}
	return w.first
}

func (d *Device) dumpTable(title string) {
	var b strings.Builder
	d.table.Dump(&b, title)
	for _, line := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		d.log.Printf(InfoDumpTable, d.Num, "%s", line)
	}
}

// KernelArg is one argument of a target region.
type KernelArg struct {
	// Scalar is the value of a scalar parameter.
	Scalar any
	// Slice is the host slice of a slice parameter, and Map its map clause.
	Slice reflect.Value
	Map   MapItem
	// DevPtr says the slice is device memory at Ptr already (OpenMP's
	// is_device_ptr); Slice then holds that memory if it is host memory.
	DevPtr bool
	Ptr    plugin.Ptr
	Len    int
}

// TargetOp is the target construct: kernel k with args.
func TargetOp(k *plugin.Kernel, args []KernelArg) Op {
	return Op{
		Name: "target " + k.Name,
		Initial: func(d *Device, fallback bool) error {
			if d.log.On(InfoKernelArgs) {
				d.logArgs(k, args)
			}
			return d.runInitial(k, args, fallback)
		},
		Enqueue: func(d *Device, w *work) {
			if d.log.On(InfoKernelArgs) {
				d.logArgs(k, args)
			}
			d.target(w, k, args)
		},
	}
}

// target enqueues a target region on w: maps, launch, unmaps.
func (d *Device) target(w *work, k *plugin.Kernel, args []KernelArg) {
	pargs := make([]plugin.Arg, len(args))
	var mapped []MapItem
	for i, a := range args {
		p := k.Params[i]
		switch {
		case p.Kind == plugin.Scalar:
			pargs[i].Scalar = a.Scalar
		case a.DevPtr:
			pargs[i] = plugin.Arg{Ptr: a.Ptr, Len: a.Len}
		default:
			tgt, err := d.enter(w, a.Map)
			if err != nil {
				w.err(err)
				break
			}
			mapped = append(mapped, a.Map)
			pargs[i] = plugin.Arg{Ptr: tgt, Len: a.Len}
		}
		if w.first != nil {
			break
		}
	}
	if w.first == nil {
		if d.log.On(InfoKernels) {
			d.log.Printf(InfoKernels, d.Num, "Launching kernel %s on %s", k.Name, d.Label())
		}
		if t := d.tool; t != nil {
			var bytes int64
			for i, p := range k.Params {
				if p.Kind == plugin.Slice {
					bytes += int64(pargs[i].Len) * int64(p.Type.Size())
				}
			}
			t.KernelLaunch(KernelEvent{Where: w.where(), Name: k.Name, Args: len(args), ArgBytes: bytes})
		}
		if err := w.q.Launch(k, pargs); err != nil {
			w.err(fmt.Errorf("goffload: %s: %s: %w", d.Label(), w.op, err))
		}
	}
	for i := len(mapped) - 1; i >= 0; i-- {
		m := mapped[i]
		if w.first != nil {
			m.Type &^= MapFrom // nothing ran: release without copying back
		}
		if err := d.exit(w, m); err != nil {
			w.err(err)
		}
	}
}

func (d *Device) runInitial(k *plugin.Kernel, args []KernelArg, fallback bool) error {
	vals := make([]reflect.Value, len(args))
	for i, a := range args {
		if k.Params[i].Kind == plugin.Scalar {
			vals[i] = reflect.ValueOf(a.Scalar)
		} else {
			vals[i] = a.Slice
		}
	}
	how := ""
	if fallback {
		how = " (host fallback)"
	}
	d.log.Printf(InfoKernels, d.Num, "Running kernel %s on %s%s", k.Name, d.Label(), how)
	if err := k.Call(plugin.NewKernelCtx(d.Num, d.pool), vals); err != nil {
		return fmt.Errorf("goffload: %s: target %s: %w", d.Label(), k.Name, err)
	}
	return nil
}

func (d *Device) logArgs(k *plugin.Kernel, args []KernelArg) {
	d.log.Printf(InfoKernelArgs, d.Num, "Entering kernel %s with %d arguments:", k.Name, len(args))
	for i, a := range args {
		p := k.Params[i]
		switch {
		case p.Kind == plugin.Scalar:
			d.log.Printf(InfoKernelArgs, d.Num, "firstprivate(arg%d)[%d]", i, p.Type.Size())
		case a.DevPtr:
			d.log.Printf(InfoKernelArgs, d.Num, "is_device_ptr(arg%d)[%d]", i, int64(a.Len)*int64(p.Type.Size()))
		default:
			d.log.Printf(InfoKernelArgs, d.Num, "%s(%s)[%d]%s", a.Map.Kind(), nameOf(a.Map.Buf.Name), a.Map.Buf.Size, implicitNote(a.Map))
		}
	}
}

// Construct names, as OpenMP spells them.
const (
	OpEnterData = "target enter data"
	OpExitData  = "target exit data"
	OpData      = "target data"
	OpUpdate    = "target update"
)

// CheckMaps checks that each clause is allowed on the construct op.
func (d *Device) CheckMaps(op string, maps []MapItem) error {
	for _, m := range maps {
		kind := m.Kind()
		var ok bool
		switch op {
		case OpEnterData:
			ok = (kind == "to" || kind == "alloc") && !m.Exit
		case OpExitData:
			ok = kind == "from" || kind == "release" || kind == "delete"
		case OpUpdate:
			ok = kind == "to" || kind == "from"
		default: // target, target data
			ok = (kind == "to" || kind == "from" || kind == "tofrom" || kind == "alloc") && !m.Exit
		}
		if !ok {
			return d.mapErr(op, m, ErrBadMap, "map type %q is not allowed on %s", kind, op)
		}
		if m.Type&MapHold != 0 && (op == OpEnterData || op == OpExitData || op == OpUpdate) {
			return d.mapErr(op, m, ErrBadMap, "the hold modifier belongs to structured constructs (target, target data), not %s", op)
		}
		if m.Type&MapAlways != 0 && op == OpUpdate {
			return d.mapErr(op, m, ErrBadMap, "always has no meaning on %s, which always copies", op)
		}
	}
	return nil
}

// EnterDataOp maps buffers: target enter data.
func EnterDataOp(maps []MapItem) Op {
	return Op{Name: OpEnterData, Maps: maps, Enqueue: func(d *Device, w *work) {
		for _, m := range maps {
			if _, err := d.enter(w, m); err != nil {
				w.err(err)
			}
		}
	}}
}

// ExitDataOp unmaps buffers: target exit data.
func ExitDataOp(maps []MapItem) Op {
	return Op{Name: OpExitData, Maps: maps, Enqueue: func(d *Device, w *work) {
		for _, m := range maps {
			if err := d.exit(w, m); err != nil {
				w.err(err)
			}
		}
	}}
}

// UpdateOp copies present buffers: target update.
func UpdateOp(maps []MapItem) Op {
	return Op{Name: OpUpdate, Maps: maps, Enqueue: func(d *Device, w *work) {
		for _, m := range maps {
			if err := d.update(w, m); err != nil {
				w.err(err)
			}
		}
	}}
}

// EnterData maps buffers: target enter data.
func (d *Device) EnterData(maps []MapItem) error { return d.Run(EnterDataOp(maps), false) }

// ExitData unmaps buffers: target exit data.
func (d *Device) ExitData(maps []MapItem) error { return d.Run(ExitDataOp(maps), false) }

// Update copies present buffers: target update.
func (d *Device) Update(maps []MapItem) error { return d.Run(UpdateOp(maps), false) }

// Target runs kernel k with args on d: the target construct.
func (d *Device) Target(k *plugin.Kernel, args []KernelArg, fallback bool) error {
	return d.Run(TargetOp(k, args), fallback)
}

// Op is a construct lowered for one device: what it enqueues on a queue of
// the device, or what it does on the initial device.
type Op struct {
	// Name is the construct as OpenMP spells it, for messages.
	Name string
	// Maps are the clauses to check against the construct, if any.
	Maps []MapItem
	// Enqueue enqueues the construct's work on w.
	Enqueue func(d *Device, w *work)
	// Initial runs the construct on the initial device; nil means there
	// is nothing to do there (data constructs: host memory is the data).
	Initial func(d *Device, fallback bool) error
}

// check validates op's clauses on d.
func (op Op) check(d *Device) error {
	if op.Maps == nil {
		return nil
	}
	return d.CheckMaps(op.Name, op.Maps)
}

// Run runs op on d and waits for it.
func (d *Device) Run(op Op, fallback bool) error {
	if err := op.check(d); err != nil {
		return err
	}
	if d.IsInitial() {
		if op.Initial == nil {
			return nil
		}
		return op.Initial(d, fallback)
	}
	w, err := d.begin(op.Name)
	if err != nil {
		return err
	}
	op.Enqueue(d, w)
	return w.finish()
}

// Data maps buffers around body: a structured target data region. The
// buffers are unmapped when body returns, whatever it returns; body's error
// comes first.
func (d *Device) Data(maps []MapItem, body func() error) error {
	if err := d.CheckMaps(OpData, maps); err != nil {
		return err
	}
	if d.IsInitial() {
		return body()
	}
	w, err := d.begin(OpData)
	if err != nil {
		return err
	}
	var mapped []MapItem
	for _, m := range maps {
		if _, err := d.enter(w, m); err != nil {
			w.err(err)
			break
		}
		mapped = append(mapped, m)
	}
	entered := w.finish()
	var bodyErr error
	if entered == nil {
		bodyErr = body()
	}
	if w, err = d.begin(OpData); err != nil {
		return errors.Join(bodyErr, entered, err)
	}
	for i := len(mapped) - 1; i >= 0; i-- {
		m := mapped[i]
		if entered != nil {
			m.Type &^= MapFrom // the region never ran: release without copying back
		}
		if err := d.exit(w, m); err != nil {
			w.err(err)
		}
	}
	if err := errors.Join(entered, w.finish()); err != nil {
		return errors.Join(bodyErr, err)
	}
	return bodyErr
}
