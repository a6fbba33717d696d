package cuda

import (
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"github.com/goffload/offload/internal/cudadrv"
	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/gpukind"
)

// A queue is a CUDA stream and the operations waiting to be issued to it.
// Operations are checked when they are enqueued. A goroutine of the queue
// issues them in order while the queue has work. It is locked to its OS
// thread, with the device's context current. While the core has set the queue
// inline and it is idle, the caller issues them instead.
//
// Issuing is asynchronous for the GPU's own work: copies between device
// memory, launches, event records and waits. The issuing goroutine does the
// host's part of a copy (into or out of the staging buffers) in queue order.
// So a Retrieve has written its destination before anything after it is
// issued.
//
// Errors follow the plugin contract. An operation that fails when it is
// issued puts the queue in the error state. The operations after it are
// skipped, and events recorded after it fire with the error. That lasts until
// Synchronize or Query returns it. A failure the GPU reports later (a
// faulting kernel) is sticky: the device is lost.
type queue struct {
	gpukind.Queue[op, cudadrv.Event, *ptxFn] // the operations, issued in order; the error state; Record, Wait
	d                                        *device
	stream                                   cudadrv.Stream
	// ctxErr is why the device's context could not be made current on the
	// goroutine that issues operations (see issuer.Bind). It is the issuing
	// goroutine's.
	ctxErr error

	ptrs []unsafe.Pointer // kernelParams, reused by the issuing goroutine

	fault faultRecord // generated PTX's fault record (gocode.go)

	tm qtimes // timing of tagged operations (trace.go)
}

// op is an operation waiting to be issued.
type op struct {
	kind     gpukind.Op
	dst, src plugin.Ptr
	host     []byte
	size     int64
	peer     *device // Exchange's destination device
	k        plugin.Kernel
	fn       cudadrv.Function
	prm      *params
	grid     [3]uint32
	block    [3]uint32
	args     []plugin.Arg     // gpukind.OpEmulate
	gen      *gpukind.GenCode // generated PTX with checks: read the fault record after the launch
	ev       *event
	tag      uint64 // the queue's tag when o was enqueued: o is timed unless 0
}

// enqueue enqueues o, tagged with the queue's tag.
func (q *queue) enqueue(o op) error {
	o.tag = q.Tagged()
	return q.Put(o)
}

// issuer is the queue as its Loop's Runner and Binder (gpukind.Issuer). A
// goroutine that issues operations is locked to its OS thread with the
// device's context current.
type issuer queue

// Bind locks the goroutine to its OS thread and makes the device's context
// current (opqueue.Binder). If it could not, it notes why.
func (i *issuer) Bind() {
	runtime.LockOSThread()
	i.ctxErr = i.d.drv.CtxSetCurrent(i.d.ctx)
}

// Unbind unlocks the goroutine from its OS thread (opqueue.Binder).
func (i *issuer) Unbind() { runtime.UnlockOSThread() }

// Run issues o (opqueue.Runner).
func (i *issuer) Run(o op, failed error) error { return (*queue)(i).issue(&o, failed) }

// RecordOp is the operation that records ev (gpukind.Issuer).
func (i *issuer) RecordOp(ev *event, tag uint64) op {
	return op{kind: gpukind.OpRecord, ev: ev, tag: tag}
}

// WaitOp is the operation that waits for ev (gpukind.Issuer).
func (i *issuer) WaitOp(ev *event, tag uint64) op { return op{kind: gpukind.OpWait, ev: ev, tag: tag} }

// issue issues o on the stream with the queue's error state failed. It
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
	case gpukind.OpRecord:
		err := failed
		if err == nil {
			if e := d.drv.EventRecord(o.ev.Handle(), q.stream); e != nil {
				err = fmt.Errorf("%s: record: %w", d.label(), d.wrap(e))
				qerr = err
			}
		}
		if err != nil {
			q.settle() // the event fires at once: the timed operations before it must be done
		}
		rep, pos := q.recordMark()
		o.ev.Fire(err, rep, pos)
		o.ev.Unref()
		return qerr
	case gpukind.OpWait:
		var t *opTiming
		if failed == nil {
			t = q.timer(o)
		}
		t.begin(q)      // the stream's wait starts where the queue reaches it
		<-o.ev.Issued() // the other queue has issued the record (a DAG: it was enqueued first)
		var err error
		if failed == nil {
			if e := o.ev.Err(); e != nil {
				err = fmt.Errorf("%s: waited-for event failed: %w", d.label(), e)
			} else if cu, done := o.ev.Waitable(); !done {
				if e := d.drv.StreamWaitEvent(q.stream, cu, 0); e != nil {
					err = fmt.Errorf("%s: wait: %w", d.label(), d.wrap(e))
				}
			}
			qerr = err
		}
		t.finish(q)
		t.done(q, err)
		o.ev.Unref()
		return qerr
	}
	if failed != nil {
		return qerr // skipped
	}
	t := q.timer(o)
	var err error
	switch o.kind {
	case gpukind.OpSubmit:
		if err = q.submit(o.dst, o.host, t); err != nil {
			err = fmt.Errorf("%s: submit of %d bytes: %w", d.label(), len(o.host), d.wrap(err))
		}
	case gpukind.OpRetrieve:
		if err = q.retrieve(o.host, o.src, t); err != nil {
			err = fmt.Errorf("%s: retrieve of %d bytes: %w", d.label(), len(o.host), d.wrap(err))
		}
	case gpukind.OpExchange:
		t.begin(q)
		if err = q.exchange(o); err != nil {
			err = fmt.Errorf("%s: exchange of %d bytes: %w", d.label(), o.size, d.wrap(err))
		}
		t.finish(q)
	case gpukind.OpLaunch:
		t.begin(q)
		if err = q.launch(o); err != nil {
			err = fmt.Errorf("%s: kernel %q: %w", d.label(), o.k.Name(), d.wrap(err))
		}
		t.finish(q)
		if err == nil && o.gen != nil {
			err = q.checkFault(o)
		}
	case gpukind.OpEmulate:
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

// launch issues o's kernel with its packed parameters. The parameter values
// are Go memory, pinned for the call. The driver copies them before
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

// emulate runs o's kernel's Go body on the host once the stream is done. It
// runs it over copies of the allocations its slice arguments lie in. That is
// the device's emulate mode, for tests (gpukind.Emulate). t, if not nil,
// times the body on the host's clock.
func (q *queue) emulate(o *op, t *opTiming) error {
	d := q.d
	if err := d.drv.StreamSynchronize(q.stream); err != nil {
		return fmt.Errorf("%s: kernel %q: %w", d.label(), o.k.Name(), d.wrap(err))
	}
	d.Mu.RLock()
	kctx := d.Kernels.Ctx
	d.Mu.RUnlock()
	timed := func(start, end time.Time, _ error) { t.hostTimes(start, end) }
	if err := gpukind.Emulate(o.k, o.args, kctx, (*emuMemory)(q), timed); err != nil {
		return fmt.Errorf("%s: %w", d.label(), err)
	}
	return nil
}

// emuMemory is the queue's device memory as gpukind.Emulate copies it, on
// the issuing goroutine.
type emuMemory queue

func (m *emuMemory) Allocation(p plugin.Ptr) (plugin.Ptr, int64, bool) {
	a, err := m.d.mem.find(p, 0)
	return a.base, a.size, err == nil
}

func (m *emuMemory) Read(dst []byte, src plugin.Ptr) error {
	return m.d.wrap((*queue)(m).retrieve(dst, src, nil))
}

func (m *emuMemory) Write(dst plugin.Ptr, src []byte) error {
	return m.d.wrap((*queue)(m).submit(dst, src, nil))
}

func (q *queue) Submit(dst plugin.Ptr, src []byte) error {
	if err := q.Usable(); err != nil {
		return err
	}
	if err := q.d.mem.Check(dst, int64(len(src))); err != nil {
		return fmt.Errorf("%s: submit of %d bytes: %w", q.d.label(), len(src), err)
	}
	return q.enqueue(op{kind: gpukind.OpSubmit, dst: dst, host: src})
}

func (q *queue) Retrieve(dst []byte, src plugin.Ptr) error {
	if err := q.Usable(); err != nil {
		return err
	}
	if err := q.d.mem.Check(src, int64(len(dst))); err != nil {
		return fmt.Errorf("%s: retrieve of %d bytes: %w", q.d.label(), len(dst), err)
	}
	return q.enqueue(op{kind: gpukind.OpRetrieve, src: src, host: dst})
}

// Exchange copies between this device and another CUDA device of the same
// driver, or within this one. Other kinds are ErrUnsupported.
func (q *queue) Exchange(dst plugin.Device, dstPtr, src plugin.Ptr, size int64) error {
	other, err := gpukind.Peer(&q.Queue, dst, func(o *device) bool { return o.drv == q.d.drv })
	if err != nil {
		return err
	}
	if err := q.d.mem.Check(src, size); err != nil {
		return fmt.Errorf("%s: exchange source: %w", q.d.label(), err)
	}
	if err := other.mem.Check(dstPtr, size); err != nil {
		return fmt.Errorf("%s: exchange destination: %w", other.label(), err)
	}
	return q.enqueue(op{kind: gpukind.OpExchange, dst: dstPtr, src: src, size: size, peer: other})
}

// LaunchGeometry is Launch with the grid and block of g (the num_teams and
// thread_limit clauses). What g leaves unset comes from the trip count (see
// grid).
//
// Launch (gpukind.Queue's) is LaunchGeometry with no geometry. It runs a PTX
// entry, or in the emulate mode the Go body of a kernel without PTX. The
// arguments are checked and packed here.
func (q *queue) LaunchGeometry(k plugin.Kernel, args []plugin.Arg, geo plugin.Geometry) error {
	kf, run, err := q.Launchable(k, args)
	if err == nil && k.Name() == entries.BindKernelName {
		q.d.globals.Bind(args) // where a variable's copy is, for generated PTX (gocode.go)
	}
	if !run || err != nil {
		return err // nothing to do on a GPU for the bind kernel (see gpukind.Kernel.Bind)
	}
	d := q.d
	g, b, err := grid(k, args, geo) // checked in the emulate mode too
	if err != nil {
		return fmt.Errorf("%s: %w", d.label(), err)
	}
	if kf.Emulate {
		return q.enqueue(op{kind: gpukind.OpEmulate, k: k, args: append([]plugin.Arg(nil), args...)})
	}
	offs, err := offsets(k, kf.Fn, geo)
	if err != nil {
		return fmt.Errorf("%s: %w", d.label(), err)
	}
	var gen *gpukind.GenCode
	if kf.Fn.gen != nil {
		if offs, err = q.hidden(k, kf.Fn.gen, args); err != nil {
			return fmt.Errorf("%s: %w", d.label(), err)
		}
		if len(kf.Fn.gen.Sites) > 0 {
			gen = kf.Fn.gen
		}
	}
	prm, err := pack(k, args, offs)
	if err != nil {
		return fmt.Errorf("%s: %w", d.label(), err)
	}
	return q.enqueue(op{kind: gpukind.OpLaunch, k: k, fn: kf.Fn.fn, prm: prm, grid: g, block: b, gen: gen})
}

// Synchronize waits until every operation is issued and the stream is done.
// It reports the timed operations, and returns (and clears) the error state.
func (q *queue) Synchronize() error {
	defer q.Report(reportAll)
	err := q.L.Synchronize()
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

// Query reports whether every operation is issued and done. Once it is, it
// reports the timed operations and returns (and clears) the error state.
func (q *queue) Query() (bool, error) {
	if !q.L.Idle() {
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
	err := q.L.TakeErr()
	if err == nil {
		err = qerr
	}
	q.Report(reportAll)
	return true, err
}

// Close refuses new work, synchronizes what was enqueued, then destroys
// the stream.
func (q *queue) Close() error {
	if !q.L.Close() { // before the synchronization: nothing is issued after it
		return fmt.Errorf("%s: %w: queue closed twice", q.d.label(), plugin.ErrBadHandle)
	}
	err := q.Synchronize()
	q.dropTimes() // what Synchronize could not report
	if q.d.alive() == nil {
		q.d.with(func() error { return q.d.drv.StreamDestroy(q.stream) })
	}
	q.fault.free(q.d)
	return err
}
