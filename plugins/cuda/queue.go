package cuda

import (
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"github.com/goffload/offload/internal/cudadrv"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/opqueue"
)

// A queue is a CUDA stream and the operations waiting to be issued to it.
// Operations are checked when they are enqueued and issued in order by a
// goroutine of the queue, locked to its OS thread with the device's
// context current, that runs while the queue has work (or, while the core
// has set the queue inline and it is idle, by the caller). Issuing is
// asynchronous for the GPU's own work (copies between device memory,
// launches, event records and waits); the host's part of a copy (into or
// out of the staging buffers) is done by the issuing goroutine in queue
// order, so a Retrieve has written its destination before anything after
// it is issued.
//
// Errors follow the plugin contract: an operation that fails when it is
// issued puts the queue in the error state — the operations after it are
// skipped, events recorded after it fire with the error — until
// Synchronize or Query returns it. A failure the GPU reports later (a
// faulting kernel) is sticky: the device is lost.
type queue struct {
	d      *device
	stream cudadrv.Stream

	l opqueue.Loop[op] // the operations, issued in order; the error state
	// ctxErr is why the device's context could not be made current on
	// the goroutine that issues operations (see issuer.Bind); the issuing
	// goroutine's.
	ctxErr error

	ptrs []unsafe.Pointer // kernelParams, reused by the issuing goroutine

	tm qtimes // timing of tagged operations (trace.go)
}

type opKind uint8

const (
	opSubmit opKind = iota + 1
	opRetrieve
	opExchange
	opLaunch
	opEmulate
	opRecord
	opWait
)

// op is an operation waiting to be issued.
type op struct {
	kind     opKind
	dst, src plugin.Ptr
	host     []byte
	size     int64
	peer     *device // Exchange's destination device
	k        plugin.Kernel
	fn       cudadrv.Function
	prm      *params
	grid     [3]uint32
	block    [3]uint32
	args     []plugin.Arg // opEmulate
	ev       *event
	tag      uint64 // the queue's tag when o was enqueued: o is timed unless 0
}

// usable returns an error if the queue or its device cannot take work.
func (q *queue) usable() error {
	if q.l.Closed() {
		return fmt.Errorf("%s: %w: queue is closed", q.d.label(), plugin.ErrBadHandle)
	}
	return q.d.alive()
}

func (q *queue) enqueue(o op) error {
	o.tag = q.tagged()
	if _, err := q.l.Put(o, opqueue.Queued, false); err != nil {
		return fmt.Errorf("%s: %w", q.d.label(), err)
	}
	return nil
}

// SetInline makes operations enqueued on the idle queue be issued by the
// enqueueing goroutine (plugin.InlineQueue).
func (q *queue) SetInline(on bool) { q.l.SetInline(on) }

// issuer is the queue as its Loop's Runner and Binder: a goroutine that
// issues operations is locked to its OS thread with the device's context
// current.
type issuer queue

// Bind locks the goroutine to its OS thread and makes the device's
// context current, noting why if it could not (opqueue.Binder).
func (i *issuer) Bind() {
	runtime.LockOSThread()
	i.ctxErr = i.d.drv.CtxSetCurrent(i.d.ctx)
}

// Unbind unlocks the goroutine from its OS thread (opqueue.Binder).
func (i *issuer) Unbind() { runtime.UnlockOSThread() }

// Run issues o (opqueue.Runner).
func (i *issuer) Run(o op, failed error) error { return (*queue)(i).issue(&o, failed) }

// issue issues o on the stream with the queue's error state failed, and
// returns the error that puts the queue in the error state. The device's
// context is current, unless q.ctxErr says why not.
func (q *queue) issue(o *op, failed error) error {
	d := q.d
	var qerr error // for the queue's error state
	if failed == nil && q.ctxErr != nil {
		failed = fmt.Errorf("%s: %w", d.label(), d.wrap(q.ctxErr))
		qerr = failed
	}
	switch o.kind {
	case opRecord:
		err := failed
		if err == nil {
			if e := d.drv.EventRecord(o.ev.handle(), q.stream); e != nil {
				err = fmt.Errorf("%s: record: %w", d.label(), d.wrap(e))
				qerr = err
			}
		}
		if err != nil {
			q.settle() // the event fires at once: the timed operations before it must be done
		}
		q.markRecord(o.ev)
		o.ev.fire(err)
		o.ev.unref()
		return qerr
	case opWait:
		var t *opTiming
		if failed == nil {
			t = q.timer(o)
		}
		t.begin(q)    // the stream's wait starts where the queue reaches it
		<-o.ev.issued // the other queue has issued the record (a DAG: it was enqueued first)
		var err error
		if failed == nil {
			if o.ev.err != nil {
				err = fmt.Errorf("%s: waited-for event failed: %w", d.label(), o.ev.err)
			} else if cu, done := o.ev.waitable(); !done {
				if e := d.drv.StreamWaitEvent(q.stream, cu, 0); e != nil {
					err = fmt.Errorf("%s: wait: %w", d.label(), d.wrap(e))
				}
			}
			qerr = err
		}
		t.finish(q)
		t.done(q, err)
		o.ev.unref()
		return qerr
	}
	if failed != nil {
		return qerr // skipped
	}
	t := q.timer(o)
	var err error
	switch o.kind {
	case opSubmit:
		if err = q.submit(o.dst, o.host, t); err != nil {
			err = fmt.Errorf("%s: submit of %d bytes: %w", d.label(), len(o.host), d.wrap(err))
		}
	case opRetrieve:
		if err = q.retrieve(o.host, o.src, t); err != nil {
			err = fmt.Errorf("%s: retrieve of %d bytes: %w", d.label(), len(o.host), d.wrap(err))
		}
	case opExchange:
		t.begin(q)
		if err = q.exchange(o); err != nil {
			err = fmt.Errorf("%s: exchange of %d bytes: %w", d.label(), o.size, d.wrap(err))
		}
		t.finish(q)
	case opLaunch:
		t.begin(q)
		if err = q.launch(o); err != nil {
			err = fmt.Errorf("%s: kernel %q: %w", d.label(), o.k.Name(), d.wrap(err))
		}
		t.finish(q)
	case opEmulate:
		err = q.emulate(o, t)
	}
	t.done(q, err)
	return err
}

func (q *queue) exchange(o *op) error {
	if o.size == 0 {
		return nil
	}
	if o.peer.ctx == q.d.ctx {
		return q.d.drv.MemcpyDtoDAsync(cudadrv.DevPtr(o.dst), cudadrv.DevPtr(o.src), o.size, q.stream)
	}
	q.d.peerAccess(o.peer) // direct where the GPUs can, else through host memory: the driver's choice
	return q.d.drv.MemcpyPeerAsync(cudadrv.DevPtr(o.dst), o.peer.ctx, cudadrv.DevPtr(o.src), q.d.ctx, o.size, q.stream)
}

// launch issues o's kernel with its packed parameters. The parameter
// values are Go memory, pinned for the call; the driver copies them before
// cuLaunchKernel returns.
func (q *queue) launch(o *op) error {
	p := o.prm
	var kp unsafe.Pointer
	var pin runtime.Pinner
	if len(p.offs) > 0 {
		base := unsafe.Pointer(&p.buf[0])
		pin.Pin(base)
		if cap(q.ptrs) < len(p.offs) {
			q.ptrs = make([]unsafe.Pointer, len(p.offs))
		}
		ptrs := q.ptrs[:len(p.offs)]
		for i, off := range p.offs {
			ptrs[i] = unsafe.Add(base, off)
		}
		kp = unsafe.Pointer(&ptrs[0])
	}
	err := q.d.drv.LaunchKernel(o.fn, o.grid, o.block, 0, q.stream, kp)
	clear(q.ptrs)
	pin.Unpin()
	return err
}

// emulate runs o's kernel's Go body on the host, over copies of the
// allocations its slice arguments lie in (the device's emulate mode, for
// tests); t, if not nil, times the body on the host's clock. Only the
// arguments' own bytes are copied in, and only those of the arguments it
// may write are copied back: the rest of their allocations may be another
// task's meanwhile (depend clauses order tasks by the sections they name,
// and a task on one half of a buffer runs beside a copy into the other).
func (q *queue) emulate(o *op, t *opTiming) error {
	d := q.d
	if err := d.drv.StreamSynchronize(q.stream); err != nil {
		return fmt.Errorf("%s: kernel %q: %w", d.label(), o.k.Name(), d.wrap(err))
	}
	type hostCopy struct {
		a allocation
		b []byte
	}
	var copies []*hostCopy
	params := o.k.Params()
	// section is slice argument i's bytes, or false if it has none.
	section := func(i int) (plugin.Ptr, int64, bool) {
		n := int64(o.args[i].Len) * int64(params[i].Type.Size())
		return o.args[i].Ptr, n, n > 0
	}
	for i, p := range params {
		if p.Kind != plugin.Slice {
			continue
		}
		a, err := d.mem.find(o.args[i].Ptr, 0)
		if err != nil {
			continue // an empty slice with no address
		}
		var c *hostCopy
		for _, h := range copies {
			if h.a.base == a.base {
				c = h
			}
		}
		if c == nil {
			c = &hostCopy{a: a, b: make([]byte, max(a.size, 1))}
			copies = append(copies, c)
		}
		ptr, n, ok := section(i)
		if !ok {
			continue
		}
		off := uint64(ptr - a.base)
		if off > uint64(a.size) || uint64(n) > uint64(a.size)-off {
			return fmt.Errorf("%s: kernel %q: %w: argument %d, [%#x, +%d bytes), runs past its allocation", d.label(), o.k.Name(), plugin.ErrBadPointer, i, uint64(ptr), n)
		}
		if err := q.retrieve(c.b[off:off+uint64(n)], ptr, nil); err != nil {
			return fmt.Errorf("%s: kernel %q: %w", d.label(), o.k.Name(), d.wrap(err))
		}
	}
	mem := func(p plugin.Ptr, size int64) ([]byte, error) {
		for _, c := range copies {
			off := uint64(p - c.a.base)
			if p >= c.a.base && off <= uint64(c.a.size) && size >= 0 && uint64(size) <= uint64(c.a.size)-off {
				return c.b[off : off+uint64(size) : len(c.b)], nil
			}
		}
		return nil, fmt.Errorf("%w: [%#x, +%d bytes) is not inside a live allocation", plugin.ErrBadPointer, uint64(p), size)
	}
	d.mu.RLock()
	kctx := d.kctx
	d.mu.RUnlock()
	start := time.Now()
	err := o.k.Launch(kctx, o.args, mem)
	t.hostTimes(start, time.Now())
	if err != nil {
		return fmt.Errorf("%s: %w", d.label(), err)
	}
	for i, p := range params {
		ptr, n, ok := section(i)
		if p.Kind != plugin.Slice || p.ReadOnly() || !ok {
			continue
		}
		b, err := mem(ptr, n)
		if err != nil {
			continue // not in an allocation: the launch refused it already
		}
		if err := q.submit(ptr, b, nil); err != nil {
			return fmt.Errorf("%s: kernel %q: %w", d.label(), o.k.Name(), d.wrap(err))
		}
	}
	return nil
}

func (q *queue) Submit(dst plugin.Ptr, src []byte) error {
	if err := q.usable(); err != nil {
		return err
	}
	if err := q.d.mem.check(dst, int64(len(src))); err != nil {
		return fmt.Errorf("%s: submit of %d bytes: %w", q.d.label(), len(src), err)
	}
	return q.enqueue(op{kind: opSubmit, dst: dst, host: src})
}

func (q *queue) Retrieve(dst []byte, src plugin.Ptr) error {
	if err := q.usable(); err != nil {
		return err
	}
	if err := q.d.mem.check(src, int64(len(dst))); err != nil {
		return fmt.Errorf("%s: retrieve of %d bytes: %w", q.d.label(), len(dst), err)
	}
	return q.enqueue(op{kind: opRetrieve, src: src, host: dst})
}

// Exchange copies between this device and another CUDA device of the same
// driver (or within this one); other kinds are ErrUnsupported.
func (q *queue) Exchange(dst plugin.Device, dstPtr, src plugin.Ptr, size int64) error {
	if err := q.usable(); err != nil {
		return err
	}
	other, ok := dst.(*device)
	if !ok || other.drv != q.d.drv {
		return fmt.Errorf("%s: exchange to a %s device: %w", q.d.label(), dst.Info().Kind, plugin.ErrUnsupported)
	}
	if err := other.alive(); err != nil {
		return err
	}
	if err := q.d.mem.check(src, size); err != nil {
		return fmt.Errorf("%s: exchange source: %w", q.d.label(), err)
	}
	if err := other.mem.check(dstPtr, size); err != nil {
		return fmt.Errorf("%s: exchange destination: %w", other.label(), err)
	}
	return q.enqueue(op{kind: opExchange, dst: dstPtr, src: src, size: size, peer: other})
}

// Launch enqueues kernel k with args: its PTX entry, or in the emulate
// mode its Go body for a kernel without PTX. The arguments are checked
// and packed here.
func (q *queue) Launch(k plugin.Kernel, args []plugin.Arg) error {
	return q.LaunchGeometry(k, args, plugin.Geometry{})
}

// LaunchGeometry is Launch with the grid and block of g (the num_teams
// and thread_limit clauses); what g leaves unset comes from the trip
// count (see grid).
func (q *queue) LaunchGeometry(k plugin.Kernel, args []plugin.Arg, geo plugin.Geometry) error {
	if err := q.usable(); err != nil {
		return err
	}
	d := q.d
	kf, err := d.kernel(k)
	if err != nil {
		return err
	}
	if kf.bind {
		if err := plugin.CheckArgs(k, args); err != nil {
			return fmt.Errorf("%s: %w", d.label(), err)
		}
		return nil // nothing to do on a GPU (see kernelFn.bind)
	}
	var prm *params
	if kf.emu {
		err = plugin.CheckArgs(k, args)
	} else {
		prm, err = pack(k, args)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", d.label(), err)
	}
	for i, p := range k.Params() {
		a := args[i]
		if p.Kind != plugin.Slice {
			continue
		}
		if a.Len < 0 {
			return fmt.Errorf("%s: %w: kernel %q argument %d: negative length %d", d.label(), plugin.ErrBadKernel, k.Name(), i, a.Len)
		}
		if a.Len == 0 {
			continue
		}
		size := int64(a.Len) * int64(p.Type.Size())
		if size/int64(a.Len) != int64(p.Type.Size()) {
			return fmt.Errorf("%s: %w: kernel %q argument %d: %d elements of %s do not fit in memory", d.label(), plugin.ErrBadPointer, k.Name(), i, a.Len, p.Type)
		}
		if err := d.mem.check(a.Ptr, size); err != nil {
			return fmt.Errorf("%s: kernel %q argument %d ([]%s, %d elements at %#x): %w", d.label(), k.Name(), i, p.Type, a.Len, uint64(a.Ptr), err)
		}
	}
	g, b, err := grid(k, args, geo) // checked in the emulate mode too
	if err != nil {
		return fmt.Errorf("%s: %w", d.label(), err)
	}
	if kf.emu {
		return q.enqueue(op{kind: opEmulate, k: k, args: append([]plugin.Arg(nil), args...)})
	}
	return q.enqueue(op{kind: opLaunch, k: k, fn: kf.fn, prm: prm, grid: g, block: b})
}

func (q *queue) Record(e plugin.Event) error {
	ev, ok := e.(*event)
	if err := q.d.st.Mine("record", e, ok && ev.d == q.d); err != nil {
		return err
	}
	if err := q.usable(); err != nil {
		return err
	}
	if err := ev.arm(); err != nil {
		return fmt.Errorf("%s: record: %w", q.d.label(), err)
	}
	if err := q.enqueue(op{kind: opRecord, ev: ev}); err != nil {
		ev.disarm()
		return err
	}
	return nil
}

// Wait makes the stream wait for an event of any CUDA device of the same
// driver (cuStreamWaitEvent); other events are ErrUnsupported.
func (q *queue) Wait(e plugin.Event) error {
	ev, ok := e.(*event)
	if err := q.d.st.Waitable(e, ok && q.d.CanWait(e)); err != nil {
		return err
	}
	if err := q.usable(); err != nil {
		return err
	}
	if err := ev.ref(); err != nil {
		return fmt.Errorf("%s: wait: %w", q.d.label(), err)
	}
	if err := q.enqueue(op{kind: opWait, ev: ev}); err != nil {
		ev.unref()
		return err
	}
	return nil
}

// Synchronize waits until every operation is issued and the stream is
// done, reports the timed operations, and returns (and clears) the error
// state.
func (q *queue) Synchronize() error {
	defer q.report(reportAll)
	err := q.l.Synchronize()
	if aerr := q.d.alive(); aerr != nil {
		if err == nil {
			err = aerr
		}
		return err
	}
	serr := q.d.with(func() error { return q.d.drv.StreamSynchronize(q.stream) })
	if err == nil && serr != nil {
		err = fmt.Errorf("%s: %w", q.d.label(), q.d.wrap(serr))
	}
	return err
}

// Query reports whether every operation is issued and done; once it is,
// it reports the timed operations and returns (and clears) the error
// state.
func (q *queue) Query() (bool, error) {
	if !q.l.Idle() {
		return false, nil
	}
	qerr := q.d.alive()
	if qerr == nil {
		qerr = q.d.with(func() error { return q.d.drv.StreamQuery(q.stream) })
		if cudadrv.Code(qerr) == cudadrv.ErrNotReady {
			return false, nil
		}
		if qerr != nil {
			qerr = fmt.Errorf("%s: %w", q.d.label(), q.d.wrap(qerr))
		}
	}
	err := q.l.TakeErr()
	if err == nil {
		err = qerr
	}
	q.report(reportAll)
	return true, err
}

// Close refuses new work, synchronizes what was enqueued, then destroys
// the stream.
func (q *queue) Close() error {
	if !q.l.Close() { // before the synchronization: nothing is issued after it
		return fmt.Errorf("%s: %w: queue closed twice", q.d.label(), plugin.ErrBadHandle)
	}
	err := q.Synchronize()
	q.dropTimes() // what Synchronize could not report
	if q.d.alive() == nil {
		q.d.with(func() error { return q.d.drv.StreamDestroy(q.stream) })
	}
	return err
}
