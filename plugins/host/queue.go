package host

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/hostmem"
	"github.com/goffload/offload/plugin/opqueue"
	"github.com/goffload/offload/plugin/optrace"
)

// queue is an in-order queue whose operations run on a goroutine of their
// own. Device memory is resolved (and checked) when they are enqueued.
type queue struct {
	d   *device
	q   *opqueue.Queue
	tag optrace.Tag // see Tag
	// inline is what SetInline said: a launch may then run on the
	// enqueueing goroutine, and its kernel goes to a runner.
	inline atomic.Bool
	// exitErr is why the last kernel called on the queue's goroutine ended
	// it (runtime.Goexit); exited sets it, a method value made once.
	exitErr error
	exited  func(error)
}

func (q *queue) setExited(err error) { q.exitErr = fmt.Errorf("%s: %w", q.d.st.Label(), err) }

// Tag makes the operations enqueued after it report their times to the
// device's tracer, with tag (0: not timed).
func (q *queue) Tag(tag uint64) { q.tag.Tag(tag) }

// timed returns what reports an operation's times; the host device's clock is
// the host's. It returns nil if the queue is not tagged or the device not
// traced.
func (q *queue) timed(kind plugin.OpKind, kernel string, bytes int64) func(start, end time.Time, err error) {
	o, ok := optrace.Op(q.d.tr.Tagged(&q.tag), kind, kernel, bytes)
	if !ok {
		return nil
	}
	return optrace.Timed(o, &q.d.tr, (*optrace.Tracer).Report)
}

func (q *queue) doTimed(fn func() error, timed func(start, end time.Time, err error)) error {
	if err := q.d.st.Alive(); err != nil {
		return err
	}
	if err := q.q.DoTimed(fn, timed); err != nil {
		return fmt.Errorf("%s: %w", q.d.st.Label(), err)
	}
	return nil
}

// Submit, Retrieve and Exchange check their device ranges when they are
// enqueued. They resolve them again when the copy runs, with the memory
// pinned. So a block freed meanwhile is an error, never unmapped memory.
func (q *queue) Submit(dst plugin.Ptr, src []byte) error {
	mem := q.d.mem
	if _, err := mem.Bytes(dst, int64(len(src))); err != nil {
		return fmt.Errorf("%s: submit of %d bytes: %w", q.d.st.Label(), len(src), err)
	}
	return q.doTimed(func() error {
		if err := q.d.st.Lost(); err != nil { // abandoned while it waited (Abandon)
			return err
		}
		mem.Pin()
		defer mem.Unpin()
		b, err := mem.Bytes(dst, int64(len(src)))
		if err != nil {
			return fmt.Errorf("submit of %d bytes: %w", len(src), err)
		}
		hostmem.Copy(b, src)
		return nil
	}, q.timed(plugin.OpSubmit, "", int64(len(src))))
}

func (q *queue) Retrieve(dst []byte, src plugin.Ptr) error {
	mem := q.d.mem
	if _, err := mem.Bytes(src, int64(len(dst))); err != nil {
		return fmt.Errorf("%s: retrieve of %d bytes: %w", q.d.st.Label(), len(dst), err)
	}
	return q.doTimed(func() error {
		if err := q.d.st.Lost(); err != nil {
			return err
		}
		mem.Pin()
		defer mem.Unpin()
		b, err := mem.Bytes(src, int64(len(dst)))
		if err != nil {
			return fmt.Errorf("retrieve of %d bytes: %w", len(dst), err)
		}
		hostmem.Copy(dst, b)
		return nil
	}, q.timed(plugin.OpRetrieve, "", int64(len(dst))))
}

func (q *queue) Exchange(dst plugin.Device, dstPtr, src plugin.Ptr, size int64) error {
	other, ok := hostDevice(dst)
	if !ok {
		return fmt.Errorf("%s: exchange to a %s device: %w", q.d.st.Label(), dst.Info().Kind, plugin.ErrUnsupported)
	}
	if _, err := q.d.mem.Bytes(src, size); err != nil {
		return fmt.Errorf("%s: exchange source: %w", q.d.st.Label(), err)
	}
	if _, err := other.mem.Bytes(dstPtr, size); err != nil {
		return fmt.Errorf("%s: exchange destination: %w", other.st.Label(), err)
	}
	if err := q.d.st.Alive(); err != nil {
		return err
	}
	c := opqueue.Call{X: q, Y: other, Words: [3]uint64{uint64(dstPtr), uint64(src), uint64(size)}}
	if err := q.q.DoCallTimed(exchangeCall, c, q.timed(plugin.OpExchange, "", size)); err != nil {
		return fmt.Errorf("%s: %w", q.d.st.Label(), err)
	}
	return nil
}

// exchangeCall runs an Exchange: c holds its queue and the destination's
// device, and the destination, source and size in its words. Its state is
// in the queue, not in a closure.
func exchangeCall(c opqueue.Call) error {
	q, other := c.X.(*queue), c.Y.(*device)
	dstPtr, src, size := plugin.Ptr(c.Words[0]), plugin.Ptr(c.Words[1]), int64(c.Words[2])
	if err := q.d.st.Lost(); err != nil {
		return err
	}
	q.d.mem.Pin()
	defer q.d.mem.Unpin()
	other.mem.Pin()
	defer other.mem.Unpin()
	s, err := q.d.mem.Bytes(src, size)
	if err != nil {
		return fmt.Errorf("exchange source: %w", err)
	}
	d, err := other.mem.Bytes(dstPtr, size)
	if err != nil {
		return fmt.Errorf("exchange destination on %s: %w", other.st.Label(), err)
	}
	hostmem.Copy(d, s)
	return nil
}

func (q *queue) Launch(k plugin.Kernel, args []plugin.Arg) error {
	return q.LaunchStop(k, args, nil)
}

// LaunchStop is Launch whose kernel's Ctx.Done closes when stop does
// (plugin.StopLauncher). It closes when the device's kernels are cancelled,
// too.
func (q *queue) LaunchStop(k plugin.Kernel, args []plugin.Arg, stop *plugin.StopSignal) error {
	if err := q.d.loaded(k); err != nil {
		return err
	}
	q.d.mu.RLock()
	ctx, devStop := q.d.ctx, q.d.stop
	q.d.mu.RUnlock()
	if stop == nil { // no closure: what it needs goes with the operation
		if err := q.d.st.Alive(); err != nil {
			return err
		}
		c, timed := opqueue.Call{X: q, Y: k, Z: ctx, Args: args}, q.timed(plugin.OpLaunch, k.Name(), 0)
		var err error
		if q.inline.Load() { // it may run on the caller: the kernel goes to a runner
			err = q.q.DoCallTimed(launchCall, c, timed)
		} else { // on the queue's goroutine, which calls the kernel itself
			err = q.q.DoCallExit(launchCallHere, c, &q.exitErr, timed)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", q.d.st.Label(), err)
		}
		return nil
	}
	var own *plugin.StopSignal
	if stop != nil {
		own = plugin.NewStopSignal()
		ctx = ctx.WithStop(own)
	}
	return q.doTimed(func() error {
		if err := q.d.st.Lost(); err != nil {
			return err
		}
		if own != nil { // linked only while it runs: a skipped launch leaves nothing behind
			defer own.StopWith(devStop, stop)()
		}
		q.d.mem.Pin() // kernels touch device memory until they return
		defer q.d.mem.Unpin()
		if err := k.Launch(ctx, args, q.d.bytes); err != nil {
			return fmt.Errorf("%s: %w", q.d.st.Label(), err)
		}
		return nil
	}, q.timed(plugin.OpLaunch, k.Name(), 0))
}

// launchCall runs a launch enqueued without a stop signal of its own
// (LaunchStop). c holds its queue, kernel and context, and its arguments.
func launchCall(c opqueue.Call) error {
	q, k, ctx := c.X.(*queue), c.Y.(plugin.Kernel), c.Z.(*plugin.KernelCtx)
	if err := q.d.st.Lost(); err != nil {
		return err
	}
	q.d.mem.Pin() // kernels touch device memory until they return
	defer q.d.mem.Unpin()
	if err := k.Launch(ctx, c.Args, q.d.bytes); err != nil {
		return fmt.Errorf("%s: %w", q.d.st.Label(), err)
	}
	return nil
}

// launchCallHere is launchCall with the kernel called on the queue's own
// goroutine (opqueue's DoCallExit), not handed to a runner: a hand-off less
// a launch. A kernel that ends the goroutine fails the queue with exitErr.
func launchCallHere(c opqueue.Call) error {
	q, k, ctx := c.X.(*queue), c.Y.(plugin.Kernel), c.Z.(*plugin.KernelCtx)
	if err := q.d.st.Lost(); err != nil {
		return err
	}
	q.exitErr = nil
	return q.d.launchHere(k, ctx, c.Args, q.exited)
}

func (q *queue) Record(e plugin.Event) error {
	ev, ok := e.(*event)
	if err := q.d.st.Mine("record", e, ok && ev.d == q.d); err != nil {
		return err
	}
	if err := q.d.st.Alive(); err != nil {
		return err
	}
	if err := q.q.Record(ev.ev); err != nil {
		return fmt.Errorf("%s: record: %w", q.d.st.Label(), err)
	}
	return nil
}

func (q *queue) Wait(e plugin.Event) error {
	ev, ok := e.(*event)
	if err := q.d.st.Waitable(e, ok && q.d.CanWait(e)); err != nil {
		return err
	}
	if err := q.d.st.Alive(); err != nil {
		return err
	}
	if err := q.q.WaitTimed(ev.ev, q.timed(plugin.OpWait, "", 0)); err != nil {
		return fmt.Errorf("%s: %w", q.d.st.Label(), err)
	}
	return nil
}

// SetInline makes operations enqueued on the idle queue run on the
// enqueueing goroutine (plugin.InlineQueue).
func (q *queue) SetInline(on bool) {
	q.inline.Store(on)
	q.q.SetInline(on)
}

func (q *queue) Synchronize() error { return q.q.Synchronize() }

func (q *queue) Query() (bool, error) { return q.q.Query() }

func (q *queue) Close() error { return q.q.Close() }

// event is a host device's event.
type event struct {
	d   *device
	ev  *opqueue.Event // own, or another's
	own opqueue.Event
}

func (e *event) Synchronize() error { return e.ev.Synchronize() }

func (e *event) Query() (bool, error) { return e.ev.Query() }

func (e *event) Close() error { return e.ev.Close() }

// OnFire runs f when the event fires (plugin.FireNotifier).
func (e *event) OnFire(f func()) { e.ev.OnFire(f) }

// OnFireCall runs f(x) when the event fires: OnFire without a closure. The
// core's completions use it where an event has it.
func (e *event) OnFireCall(f func(any), x any) { e.ev.OnFireCall(f, x) }
