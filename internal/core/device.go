package core

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goffload/offload/internal/config"
	"github.com/goffload/offload/internal/mapping"
	"github.com/goffload/offload/tool"

	"github.com/goffload/offload/plugin"
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

	table *mapping.Table
	log   *config.Logger
	pool  *plugin.Pool // the initial device's workers

	tool tool.Tool // nil: no tool
	// ids numbers tasks and synchronous constructs (the runtime's).
	ids *atomic.Uint64
	// tagged says the plugin times the queue operations of each task for
	// the tool, or for opSink (see traceOps, TimeOps).
	tagged atomic.Bool
	tracer bool // the plugin is a plugin.Tracer, its reports going to the tool and opSink
	// opSink, once set (TimeOps), takes the device-side times of the
	// queue operations beside the tool.
	opSink atomic.Pointer[func(plugin.OpTime)]
	// completer completes tasks whose events fired (plugin.FireNotifier).
	completer completer

	qmu    sync.Mutex
	queues []*cqueue // idle queues
	nq     int       // queues created

	lost atomic.Pointer[error] // the first error that said the device is lost

	bgmu sync.Mutex
	bg   map[chan struct{}]string // constructs going on after their caller gave up, and what they are

	globals *devGlobals // declare target variables (memory.go); nil if none

	// stop is what the initial device's kernels' ctx.Done() says; nil on
	// other devices (their kinds say it, plugin.Canceler).
	stop *plugin.StopSignal
	// repeats follows copies in for the data-region hint (under qmu).
	repeats copyRepeats
}

// Lost returns why the device stopped working, or nil while it works: what
// the plugin device reports (plugin.LostReporter), or else the first error
// of an operation on it that wrapped plugin.ErrDeviceLost.
func (d *Device) Lost() error {
	if lr, ok := d.Dev.(plugin.LostReporter); ok && d.Dev != nil {
		if err := lr.Lost(); err != nil {
			return err
		}
	}
	if p := d.lost.Load(); p != nil {
		return *p
	}
	return nil
}

// noteLost remembers err if it says the device is lost. It is for a plugin
// device that does not say itself (plugin.LostReporter). One that does knows
// its own loss from another device's. An operation's error may be another
// device's: a wait on a lost device's event wraps ErrDeviceLost too.
func (d *Device) noteLost(err error) {
	if _, ok := d.Dev.(plugin.LostReporter); ok {
		return
	}
	if err != nil && errors.Is(err, plugin.ErrDeviceLost) {
		d.lost.CompareAndSwap(nil, &err)
	}
}

// IsInitial reports whether d is the initial device.
func (d *Device) IsInitial() bool { return d.Dev == nil && d.Unavailable == nil }

// Table is the device's present table (nil for the initial device).
func (d *Device) Table() *mapping.Table { return d.table }

// Label names the device in messages: "device 0 (host)".
func (d *Device) Label() string {
	if d.IsInitial() {
		return fmt.Sprintf("initial device %d", d.Num)
	}
	return fmt.Sprintf("device %d (%s)", d.Num, d.Info.Kind)
}

// cqueue is a plugin queue with the number its trace track shows.
// A task's predecessor on the same device may be the last thing enqueued
// on a queue. The task then follows it on that queue, with no wait at all,
// since the queue is in order. The queue goes back to the pool when its
// last user is done.
type cqueue struct {
	plugin.Queue
	id int
	// Guarded by the device's qmu.
	users  int   // constructs using the queue
	last   *Task // the task enqueued on it last, if others may follow it
	failed bool  // an operation failed: close it instead of reusing it
}

func (d *Device) getQueue(op string) (*cqueue, error) {
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
		d.noteLost(err)
		return nil, Errorf("goffload: %s: %s: cannot create a queue: %w", d.Label(), op, err)
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

// maxIdleQueues is how many idle queues a device keeps for later
// constructs. A burst of tasks makes as many queues as it has tasks in
// flight; once it is over, the queues past this many are closed, so the
// pool shrinks with the work.
const maxIdleQueues = 64

// release drops one user of q. The last one gives it back to the pool, or
// closes it if an operation on it failed or the pool is full.
func (d *Device) release(q *cqueue, failed bool) {
	d.qmu.Lock()
	q.users--
	q.failed = q.failed || failed
	last := q.users == 0
	closeIt := false
	if last {
		q.last = nil
		if !q.failed && len(d.queues) < maxIdleQueues {
			d.queues = append(d.queues, q)
		} else {
			closeIt = true // failed, or past what the pool keeps
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
	d      *Device
	cq     *cqueue // its queue (cq.Queue)
	op     string
	task   uint64
	nowait bool               // a task's work, not a synchronous construct's
	stop   *plugin.StopSignal // its kernels stop with it (the construct's context); nil: none
	used   []*mapping.Entry   // entries the work uses, done when it is over (use)
	after  []func() error     // work after the queue's, before the uses end (staged copies)
	undo   []func()           // if the construct fails, before the uses end (enter data)
	// usedBuf holds used for a construct of a few buffers (each used twice:
	// its map at the start and at the end), a launch of four among them.
	usedBuf [8]*mapping.Entry
	first   error
	dep     *failure // the predecessor's failure, if first is a dependency error
	// completing is a task's, from its enqueueing to its completion.
	completing completing
	// args is room for a launch's lowered arguments (target): its task's
	// records' (Op.ArgRoom) or a synchronous construct's (begin). A copy's
	// work has none, and its records stay small.
	args []plugin.Arg
}

// syncWork is a synchronous construct's work with room for a launch's
// arguments (begin): one allocation for both.
type syncWork struct {
	w    work
	args [5]plugin.Arg
}

// begin starts a synchronous construct's work: its caller waits for the
// queue right after enqueueing, so the queue may run it inline.
func (d *Device) begin(op string) (*work, error) {
	q, err := d.getQueue(op)
	if err != nil {
		return nil, err
	}
	sw := new(syncWork)
	w := d.beginOn(op, q, d.newID(), false, &sw.w)
	w.args = sw.args[:]
	if iq, ok := q.Queue.(plugin.InlineQueue); ok { // until done
		iq.SetInline(true)
	}
	return w, nil
}

// newID numbers a synchronous construct, as tasks are numbered: what tools
// and info lines show.
func (d *Device) newID() uint64 {
	if d.ids == nil {
		return 0
	}
	return d.ids.Add(1)
}

// beginOn starts the work of construct op, with id task, on q; nowait says
// it is a task's (not a synchronous construct's). into, if not nil, is
// where the work goes: a zero work of the task's own (Task.takeWork).
func (d *Device) beginOn(op string, q *cqueue, task uint64, nowait bool, into *work) *work {
	w := into // zero: a new one, or a task's own (takeWork)
	if w == nil {
		w = new(work)
	}
	w.d, w.cq, w.op, w.task, w.nowait = d, q, op, task, nowait
	w.used = w.usedBuf[:0]
	// The span opens before the tag goes out: a device places its
	// operations' times no earlier than the tag's sending (TaggedQueue),
	// so they lie inside the span.
	if d.tool != nil {
		d.tool.TargetBegin(tool.TargetEvent{Where: w.where(), Name: op, Nowait: nowait})
	}
	if d.tagged.Load() {
		if tq, ok := q.Queue.(plugin.TaggedQueue); ok {
			tq.Tag(task)
		}
	}
	return w
}

// where is the tool events' position of w now.
func (w *work) where() tool.Where {
	return tool.Where{Time: time.Now(), Device: w.d.Num, Queue: w.cq.id, Task: w.task}
}

func (w *work) err(e error) {
	w.d.noteLost(e)
	if w.first == nil {
		w.first = e
	}
}

// depErr records that task t does not run because of f.
func (w *work) depErr(t *Task, f *failure) {
	if w.first == nil {
		w.first, w.dep = depErr(t, f), f
	}
}

// runAfter runs the work that follows the queue's, once that is done.
// That work runs on the host, not on w's device: the copy in to another
// device of a copy staged through host memory, which notes that device's
// loss itself. So its error does not say w's device is lost.
func (w *work) runAfter() {
	for _, f := range w.after {
		if err := f(); err != nil && w.first == nil {
			w.first = err
		}
	}
	w.after = nil
}

// finish synchronizes the queue, ends the uses and returns the first error.
func (w *work) finish() error {
	if err := w.cq.Queue.Synchronize(); err != nil {
		w.err(Errorf("goffload: %s: %s: %w", w.d.Label(), w.op, err))
	} else {
		w.runAfter()
	}
	return w.done(true)
}

// done ends the uses of a queue whose work is over, gives the queue back
// (if it can be used again) and returns the first error.
func (w *work) done(reuse bool) error {
	d := w.d
	if w.first != nil {
		for _, u := range w.undo {
			u()
		}
	}
	w.release()
	if !w.nowait { // begin's: its queue ran it inline, if it could
		if iq, ok := w.cq.Queue.(plugin.InlineQueue); ok {
			iq.SetInline(false)
		}
	}
	d.release(w.cq, !reuse)
	if d.tool != nil {
		d.tool.TargetEnd(tool.TargetEvent{Where: w.where(), Name: w.op, Nowait: w.nowait, Err: w.first})
	}
	if w.first != nil && d.log.On(config.InfoDumpTable) {
		d.dumpTable(fmt.Sprintf("Host-device pointer mappings after a failed %s:", w.op))
	}
	return w.first
}

func (d *Device) dumpTable(title string) {
	var b strings.Builder
	d.table.Dump(&b, title)
	for _, line := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		d.log.Printf(config.InfoDumpTable, d.Num, "%s", line)
	}
}

// Run runs op on d and waits for it, or for ctx to be done. In that case
// it returns an error wrapping ctx's, and the construct goes on in the
// background, unmapping and freeing as it would. Taskwait and Stop wait
// for it.
func (d *Device) Run(ctx context.Context, op Op, fallback bool) error {
	if err := op.check(d); err != nil {
		return err
	}
	if d.IsInitial() {
		if !op.hasInitial() {
			return nil
		}
		task := d.newID()
		stop, release := constructStop(ctx)
		defer release()
		err, _ := d.wait(ctx, op.Name, func() error { return op.initial(d, task, fallback, stop) }, nil)
		return err
	}
	stop, release := constructStop(ctx)
	defer release()
	err, _ := d.wait(ctx, op.Name, func() error {
		w, err := d.begin(op.Name)
		if err != nil {
			return err
		}
		w.stop = stop
		op.enqueue(d, w)
		return w.finish()
	}, nil)
	return err
}

// wait runs fn, a construct op of d, and waits for it or for ctx. If ctx is
// done first (gaveUp), fn goes on in the background, then cleanup if set.
func (d *Device) wait(ctx context.Context, op string, fn func() error, cleanup func()) (err error, gaveUp bool) {
	if ctx == nil || ctx.Done() == nil {
		return fn(), false
	}
	if err := ctx.Err(); err != nil {
		return d.ctxErr(op, err), true
	}
	return d.await(ctx, op, fn, cleanup)
}

// await is wait for a construct that must run even if ctx is done already,
// such as the end of a data region. If ctx is done already, it does not wait
// at all. The construct runs in the background and the error is ctx's.
func (d *Device) await(ctx context.Context, op string, fn func() error, cleanup func()) (err error, gaveUp bool) {
	if ctx == nil || ctx.Done() == nil {
		return fn(), false
	}
	done := make(chan struct{})
	var res error
	late := ctx.Err() != nil // done already: the construct goes on in the background, whatever its speed
	go func() {
		defer close(done)
		res = fn()
	}()
	if !late {
		select {
		case <-done:
			return res, false
		case <-ctx.Done():
			select {
			case <-done:
				return res, false
			default:
			}
		}
	}
	c := make(chan struct{})
	d.bgmu.Lock()
	if d.bg == nil {
		d.bg = map[chan struct{}]string{}
	}
	d.bg[c] = op
	d.bgmu.Unlock()
	go func() {
		<-done
		if cleanup != nil {
			cleanup()
		}
		d.bgmu.Lock()
		delete(d.bg, c)
		d.bgmu.Unlock()
		close(c)
	}()
	return d.ctxErr(op, ctx.Err()), true
}

func (d *Device) ctxErr(op string, err error) error {
	return Errorf("goffload: %s: %s: stopped waiting: %w (the device finishes the construct in the background)", d.Label(), op, err)
}

// background returns the constructs going on after their caller gave up.
func (d *Device) background() []chan struct{} {
	d.bgmu.Lock()
	defer d.bgmu.Unlock()
	out := make([]chan struct{}, 0, len(d.bg))
	for c := range d.bg {
		out = append(out, c)
	}
	return out
}

// Data maps buffers around body: a structured target data region. The
// buffers are unmapped when body returns, whatever it returns; body's error
// comes first. If ctx is done while the buffers are mapped or unmapped,
// Data returns an error wrapping ctx's (body does not run), and the region
// ends in the background.
func (d *Device) Data(ctx context.Context, maps []MapItem, body func() error) error {
	if err := d.CheckMaps(OpData, maps); err != nil {
		return err
	}
	if d.IsInitial() {
		return body()
	}
	var mapped []MapItem
	exit := func(ran bool) error {
		w, err := d.begin(OpData)
		if err != nil {
			return err
		}
		for i := len(mapped) - 1; i >= 0; i-- {
			m := mapped[i]
			if !ran {
				m.Type &^= mapping.MapFrom // the region never ran: release without copying back
			}
			if err := w.exit(m); err != nil {
				w.err(err)
			}
		}
		return w.finish()
	}
	entered, gaveUp := d.wait(ctx, OpData, func() error {
		w, err := d.begin(OpData)
		if err != nil {
			return err
		}
		for _, m := range maps {
			if _, _, err := w.enter(m); err != nil {
				w.err(err)
				break
			}
			mapped = append(mapped, m)
		}
		return w.finish()
	}, func() { _ = exit(false) })
	if gaveUp {
		return entered // the region ends in the background
	}
	var bodyErr error
	if entered == nil {
		bodyErr = body()
	}
	exited, _ := d.await(ctx, OpData, func() error { return exit(entered == nil) }, nil)
	if err := errors.Join(entered, exited); err != nil {
		return errors.Join(bodyErr, err)
	}
	return bodyErr
}

// traceOps makes d's plugin report the times of the queue operations it times.
// They go to the tool if it wants them, and to the sink TimeOps sets. If the
// tool wants them, the construct's queues are tagged from the start, and their
// operations timed. Else that starts once TimeOps asks.
func (d *Device) traceOps() {
	dt, want := d.tool.(tool.DeviceOpTool)
	if ts, multi := d.tool.(tools); multi {
		want = ts.wantOps()
	}
	tr, can := d.Dev.(plugin.Tracer)
	if !can {
		return
	}
	num := d.Num
	tr.Trace(func(o plugin.OpTime) {
		if want {
			dt.DeviceOp(tool.DeviceOpEvent{Where: tool.Where{Time: o.Start, Device: num, Task: o.Tag},
				Kind: o.Kind, Kernel: o.Kernel, Bytes: o.Bytes, End: o.End, Failed: o.Err})
		}
		if f := d.opSink.Load(); f != nil {
			(*f)(o)
		}
	})
	d.tracer = true
	d.tagged.Store(want)
}

// TimeOps makes the device time the queue operations of every construct
// from now on, and report them to f too. f must not block. The placement
// of Any-tasks learns kernels' times on the device from them. TimeOps
// reports whether the device can: its plugin is a plugin.Tracer. It is
// set once.
func (d *Device) TimeOps(f func(plugin.OpTime)) bool {
	if !d.tracer {
		return false
	}
	if d.opSink.CompareAndSwap(nil, &f) {
		d.tagged.Store(true)
	}
	return true
}
