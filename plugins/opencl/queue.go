package opencl

import (
	"bytes"
	"fmt"
	"runtime"

	"github.com/goffload/offload/internal/cldrv"
	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/gpukind"
)

// A queue is an in-order OpenCL command queue and the operations waiting to
// be issued to it. A goroutine of the queue issues them while it has work. Or
// the caller does, while the core has set it inline and it is idle. Issuing
// is asynchronous. Copies, launches, markers and barriers are enqueued on the
// command queue. What the driver still works on is in pend.
//
// Errors follow the plugin contract. An operation that fails when it is
// issued puts the queue in the error state (opqueue.Loop). A failure of work
// on the device loses the device. (Such a failure is a negative event status,
// or a failing clFinish.)
type queue struct {
	gpukind.Queue[op, cldrv.Event, *kernelFn] // the operations, issued in order; the error state; Record, Wait

	d  *device
	cq cldrv.Queue // the issuing goroutine's (LoseQueueForTests zeroes it)
	// own is the command queue to release at Close.
	own cldrv.Queue

	p  pendingList // commands the driver works on that hold Go memory or are timed
	t  qtiming     // the tag and the order of timed operations (trace.go)
	hw hostWrites  // commands that may write host memory a submit reads (hostorder.go)

	fault cldrv.Mem // generated code's fault record, made on first use (gocode.go)
}

// opLose is LoseQueueForTests's operation.
const opLose = gpukind.OpKindOps

// op is an operation waiting to be issued.
type op struct {
	kind gpukind.Op
	dst  devRange
	src  devRange
	host []byte
	size int64
	peer *device
	k    plugin.Kernel
	kf   *kernelFn
	vals []argVal
	nd   ndRange
	args []plugin.Arg // gpukind.OpEmulate
	lens []int64      // generated code's slice lengths (gocode.go)
	// gvals and glens are generated code's declare target variables.
	gvals []argVal
	glens []int64
	ev    *event
	tag   uint64 // the queue's tag when it was enqueued: timed unless 0
}

// enqueue enqueues o with the queue's tag.
func (q *queue) enqueue(o op) error {
	o.tag = q.Tagged()
	return q.Put(o)
}

// issuer is the queue as its Loop's Runner (gpukind.Issuer).
type issuer queue

// Run issues o (opqueue.Runner).
func (i *issuer) Run(o op, failed error) error { return (*queue)(i).issue(&o, failed) }

// RecordOp is a marker's operation (gpukind.Issuer).
func (i *issuer) RecordOp(ev *event, tag uint64) op {
	return op{kind: gpukind.OpRecord, ev: ev, tag: tag}
}

// WaitOp is a barrier's operation (gpukind.Issuer).
func (i *issuer) WaitOp(ev *event, tag uint64) op { return op{kind: gpukind.OpWait, ev: ev, tag: tag} }

// Report retires the commands before position upto that are complete. It
// reports the timed ones (gpukind.Reporter).
func (q *queue) Report(upto uint64) { q.p.drain(q, upto, false) }

// issue issues o with the queue's error state failed. It returns the error
// that puts the queue in the error state.
func (q *queue) issue(o *op, failed error) error {
	d := q.d
	switch o.kind {
	case gpukind.OpRecord:
		err := failed
		var qerr error
		if err == nil {
			if err = d.alive(); err == nil {
				ev, e := d.lib.Marker(q.cq, nil)
				if e == nil {
					e = d.lib.Flush(q.cq) // a driver that batches commands (NVIDIA's) starts them
					o.ev.SetHandle(ev)
				}
				if e != nil {
					err = fmt.Errorf("%s: record: %w", d.label(), d.wrap(e))
				}
			}
			qerr = err
		}
		o.ev.Fire(err, q, q.p.mark())
		o.ev.Unref()
		return qerr
	case gpukind.OpWait:
		<-o.ev.Issued() // the other queue has issued the record (a DAG: it was enqueued first)
		if failed != nil {
			o.ev.Unref()
			return nil
		}
		var err error
		if e := o.ev.Err(); e != nil {
			err = fmt.Errorf("%s: waited-for event failed: %w", d.label(), e)
		} else if cl, done := o.ev.Waitable(); !done && cl != 0 {
			pe := q.timed(o, plugin.OpWait, "", 0)
			if e := d.lib.Barrier(q.cq, []cldrv.Event{cl}, &pe.ev); e != nil {
				err = fmt.Errorf("%s: wait: %w", d.label(), d.wrap(e))
			} else {
				// the other queue's retrieves may write what a later submit reads
				if e := q.hw.add(d, nil, pe.ev); e != nil {
					err = d.lose(e)
				}
				q.p.push(q, *pe)
			}
		}
		o.ev.Unref()
		return err
	case opLose:
		q.cq = 0
		return nil
	}
	if failed != nil {
		return nil // skipped
	}
	if err := d.alive(); err != nil {
		return err
	}
	switch o.kind {
	case gpukind.OpSubmit, gpukind.OpRetrieve:
		pe := q.timed(o, o.kind.Traced(), "", int64(len(o.host)))
		if o.kind == gpukind.OpSubmit {
			if err := q.hw.before(d, o.host); err != nil {
				return fmt.Errorf("submit of %d bytes: waiting for the commands before it that write its host memory: %w", len(o.host), d.lose(err))
			}
		}
		host := o.host
		if o.kind == gpukind.OpSubmit && d.stage {
			host = bytes.Clone(host) // read now, as an eager driver does (StageWritesForTests)
		}
		pe.pin = new(runtime.Pinner)
		pe.pin.Pin(&host[0]) // until the driver is done with it
		var err error
		if o.kind == gpukind.OpSubmit {
			err = d.write(q.cq, o.dst, host, false, &pe.ev)
		} else {
			err = d.read(q.cq, o.host, o.src, false, &pe.ev)
		}
		if err != nil {
			pe.pin.Unpin()
			return fmt.Errorf("%s: %s of %d bytes: %w", d.label(), o.kind, len(o.host), d.wrap(err))
		}
		if o.kind == gpukind.OpRetrieve {
			err = q.hw.add(d, o.host, pe.ev) // before push, which may release pe.ev
		}
		q.p.push(q, *pe)
		if err != nil {
			return fmt.Errorf("retrieve of %d bytes: %w", len(o.host), d.lose(err))
		}
	case gpukind.OpExchange:
		pe := q.timed(o, plugin.OpExchange, "", o.size)
		if err := d.copyRange(q.cq, o.dst, o.src, o.size, &pe.ev); err != nil {
			return fmt.Errorf("%s: exchange of %d bytes: %w", d.label(), o.size, d.wrap(err))
		}
		if pe.ev != 0 {
			q.p.push(q, *pe)
		}
	case gpukind.OpLaunch:
		pe := q.timed(o, plugin.OpLaunch, o.k.Name(), 0)
		kf := o.kf
		kf.mu.Lock()
		err := d.setArgs(kf, o.vals)
		if err == nil && kf.gen != nil {
			err = q.setHidden(kf, len(o.vals), o.lens, o.gvals, o.glens)
		}
		if err == nil {
			err = d.lib.EnqueueKernelAt(q.cq, kf.k, o.nd.dims, &o.nd.offset, &o.nd.global, o.nd.local, nil, &pe.ev)
		}
		kf.mu.Unlock()
		if err != nil {
			return fmt.Errorf("%s: kernel %q (entry %s): %w", d.label(), o.k.Name(), kf.entry, d.wrap(err))
		}
		q.p.push(q, *pe)
		if kf.gen != nil && len(kf.gen.Sites) > 0 {
			return q.checkFault(o)
		}
	case gpukind.OpEmulate:
		return q.emulate(o)
	}
	return nil
}

func (q *queue) Submit(dst plugin.Ptr, src []byte) error {
	if err := q.Usable(); err != nil {
		return err
	}
	r, err := q.d.rangeOf(dst, int64(len(src)))
	if err != nil {
		return fmt.Errorf("%s: submit of %d bytes: %w", q.d.label(), len(src), err)
	}
	if len(src) == 0 {
		return nil
	}
	return q.enqueue(op{kind: gpukind.OpSubmit, dst: r, host: src})
}

func (q *queue) Retrieve(dst []byte, src plugin.Ptr) error {
	if err := q.Usable(); err != nil {
		return err
	}
	r, err := q.d.rangeOf(src, int64(len(dst)))
	if err != nil {
		return fmt.Errorf("%s: retrieve of %d bytes: %w", q.d.label(), len(dst), err)
	}
	if len(dst) == 0 {
		return nil
	}
	return q.enqueue(op{kind: gpukind.OpRetrieve, src: r, host: dst})
}

// Exchange copies between this device and another OpenCL device of the same
// platform, or within this one. Other devices are ErrUnsupported.
func (q *queue) Exchange(dst plugin.Device, dstPtr, src plugin.Ptr, size int64) error {
	other, err := gpukind.Peer(&q.Queue, dst, func(o *device) bool { return o.pl == q.d.pl })
	if err != nil {
		return err
	}
	s, err := q.d.rangeOf(src, size)
	if err != nil {
		return fmt.Errorf("%s: exchange source: %w", q.d.label(), err)
	}
	t, err := other.rangeOf(dstPtr, size)
	if err != nil {
		return fmt.Errorf("%s: exchange destination: %w", other.label(), err)
	}
	return q.enqueue(op{kind: gpukind.OpExchange, dst: t, src: s, size: size, peer: other})
}

// LaunchGeometry is Launch with the work-groups of g (num_teams and
// thread_limit).
//
// Launch (gpukind.Queue's) is LaunchGeometry with no geometry. It runs the
// kernel's OpenCL C entry. In the emulate mode it runs the Go body of a
// kernel without OpenCL C.
func (q *queue) LaunchGeometry(k plugin.Kernel, args []plugin.Arg, geo plugin.Geometry) error {
	kf, run, err := q.Launchable(k, args)
	if !run || err != nil {
		if err == nil && k.Name() == entries.BindKernelName {
			q.d.globals.Bind(args) // the bind kernel: where a variable's copy is (gocode.go)
		}
		return err
	}
	d := q.d
	wg := 0
	if kf.Fn != nil {
		wg = kf.Fn.wg
	}
	o := op{kind: gpukind.OpLaunch, k: k, kf: kf.Fn}
	if o.nd, err = d.workSize(k, wg, args, geo); err != nil {
		return fmt.Errorf("%s: %w", d.label(), err)
	}
	if kf.Emulate {
		return q.enqueue(op{kind: gpukind.OpEmulate, k: k, args: append([]plugin.Arg(nil), args...)})
	}
	if o.vals, err = d.packArgs(k, args); err != nil {
		return fmt.Errorf("%s: %w", d.label(), err)
	}
	if kf.Fn != nil && kf.Fn.gen != nil {
		o.lens = gpukind.SliceLens(k, args)
		if o.gvals, o.glens, err = d.globalArgs(k, kf.Fn); err != nil {
			return fmt.Errorf("%s: %w", d.label(), err)
		}
	}
	return q.enqueue(o)
}

// Synchronize waits until every operation is issued and the command queue is
// done. It reports the timed operations, and returns (and clears) the error
// state.
func (q *queue) Synchronize() error {
	err := q.L.Synchronize()
	defer q.hw.reset(q.d) // the commands are done, or the device lost
	if aerr := q.d.alive(); aerr != nil {
		q.p.drop(q.d)
		if err == nil {
			err = aerr
		}
		return err
	}
	if e := q.d.lib.Finish(q.cq); e != nil {
		lerr := q.d.lose(e)
		q.p.drop(q.d)
		if err == nil {
			err = lerr
		}
		return err
	}
	q.p.drain(q, ^uint64(0), true)
	return err
}

// Query reports whether every operation is issued and done. Once it is, it
// reports the timed operations and returns (and clears) the error state.
func (q *queue) Query() (bool, error) {
	if !q.L.Idle() {
		return false, nil
	}
	if q.d.alive() == nil {
		if done, err := q.p.lastDone(q); err != nil {
			q.d.lose(err)
		} else if !done {
			return false, nil
		}
	}
	if q.d.alive() != nil {
		q.p.drop(q.d)
	} else {
		q.p.drain(q, ^uint64(0), true)
	}
	err := q.L.TakeErr()
	if err == nil {
		err = q.d.alive()
	}
	return true, err
}

// Close refuses new work, synchronizes what was enqueued, then releases
// the command queue.
func (q *queue) Close() error {
	if !q.L.Close() {
		return fmt.Errorf("%s: %w: queue closed twice", q.d.label(), plugin.ErrBadHandle)
	}
	err := q.Synchronize()
	if q.fault != 0 {
		q.d.lib.ReleaseMem(q.fault)
	}
	q.d.lib.ReleaseQueue(q.own)
	return err
}

// LoseQueueForTests makes q's command queue invalid for the operations
// enqueued after this call, as a driver whose queue broke would. They fail,
// and the device is lost. It is for this module's tests.
func LoseQueueForTests(q plugin.Queue) error {
	return q.(*queue).enqueue(op{kind: opLose})
}
