package opencl

import (
	"bytes"
	"fmt"
	"runtime"

	"github.com/goffload/offload/internal/cldrv"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/opqueue"
)

// A queue is an in-order OpenCL command queue and the operations waiting
// to be issued to it, by a goroutine of the queue while it has work (or
// by the caller, while the core has set it inline and it is idle). Issuing
// is asynchronous: copies, launches, markers and barriers are enqueued on
// the command queue, and what the driver still works on is in pend.
//
// Errors follow the plugin contract: an operation that fails when it is
// issued puts the queue in the error state (opqueue.Loop); a failure of
// work on the device (a negative event status, a failing clFinish)
// loses the device.
type queue struct {
	d  *device
	cq cldrv.Queue // the issuing goroutine's (LoseQueueForTests zeroes it)
	// own is the command queue to release at Close.
	own cldrv.Queue

	l opqueue.Loop[op]

	p  pendingList // commands the driver works on that hold Go memory or are timed
	t  qtiming     // the tag and the order of timed operations (trace.go)
	hw hostWrites  // commands that may write host memory a submit reads (hostorder.go)

	fault cldrv.Mem // generated code's fault record, made on first use (gocode.go)
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
	opLose
)

// op is an operation waiting to be issued.
type op struct {
	kind   opKind
	dst    devRange
	src    devRange
	host   []byte
	size   int64
	peer   *device
	k      plugin.Kernel
	kf     *kernelFn
	vals   []argVal
	dims   int
	global [3]uintptr
	local  *[3]uintptr
	args   []plugin.Arg // opEmulate
	lens   []int64      // generated code's slice lengths (gocode.go)
	ev     *event
	tag    uint64 // the queue's tag when it was enqueued: timed unless 0
}

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

// issuer is the queue as its Loop's Runner.
type issuer queue

// Run issues o (opqueue.Runner).
func (i *issuer) Run(o op, failed error) error { return (*queue)(i).issue(&o, failed) }

// issue issues o with the queue's error state failed, and returns the
// error that puts the queue in the error state.
func (q *queue) issue(o *op, failed error) error {
	d := q.d
	switch o.kind {
	case opRecord:
		err := failed
		var qerr error
		if err == nil {
			if err = d.alive(); err == nil {
				ev, e := d.lib.Marker(q.cq, nil)
				if e == nil {
					e = d.lib.Flush(q.cq) // a driver that batches commands (NVIDIA's) starts them
					o.ev.setCL(ev)
				}
				if e != nil {
					err = fmt.Errorf("%s: record: %w", d.label(), d.wrap(e))
				}
			}
			qerr = err
		}
		o.ev.rq, o.ev.rpos = q, q.p.mark()
		o.ev.fire(err)
		o.ev.unref()
		return qerr
	case opWait:
		<-o.ev.issued // the other queue has issued the record (a DAG: it was enqueued first)
		if failed != nil {
			o.ev.unref()
			return nil
		}
		var err error
		if o.ev.err != nil {
			err = fmt.Errorf("%s: waited-for event failed: %w", d.label(), o.ev.err)
		} else if cl := o.ev.waitable(); cl != 0 {
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
		o.ev.unref()
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
	case opSubmit, opRetrieve:
		pe := q.timed(o, map[opKind]plugin.OpKind{opSubmit: plugin.OpSubmit, opRetrieve: plugin.OpRetrieve}[o.kind], "", int64(len(o.host)))
		if o.kind == opSubmit {
			if err := q.hw.before(d, o.host); err != nil {
				return fmt.Errorf("submit of %d bytes: waiting for the commands before it that write its host memory: %w", len(o.host), d.lose(err))
			}
		}
		host := o.host
		if o.kind == opSubmit && d.stage {
			host = bytes.Clone(host) // read now, as an eager driver does (StageWritesForTests)
		}
		pe.pin = new(runtime.Pinner)
		pe.pin.Pin(&host[0]) // until the driver is done with it
		var err error
		if o.kind == opSubmit {
			err = d.write(q.cq, o.dst, host, false, &pe.ev)
		} else {
			err = d.read(q.cq, o.host, o.src, false, &pe.ev)
		}
		if err != nil {
			pe.pin.Unpin()
			what := map[opKind]string{opSubmit: "submit", opRetrieve: "retrieve"}[o.kind]
			return fmt.Errorf("%s: %s of %d bytes: %w", d.label(), what, len(o.host), d.wrap(err))
		}
		if o.kind == opRetrieve {
			err = q.hw.add(d, o.host, pe.ev) // before push, which may release pe.ev
		}
		q.p.push(q, *pe)
		if err != nil {
			return fmt.Errorf("retrieve of %d bytes: %w", len(o.host), d.lose(err))
		}
	case opExchange:
		pe := q.timed(o, plugin.OpExchange, "", o.size)
		if err := d.copyRange(q.cq, o.dst, o.src, o.size, &pe.ev); err != nil {
			return fmt.Errorf("%s: exchange of %d bytes: %w", d.label(), o.size, d.wrap(err))
		}
		if pe.ev != 0 {
			q.p.push(q, *pe)
		}
	case opLaunch:
		pe := q.timed(o, plugin.OpLaunch, o.k.Name(), 0)
		kf := o.kf
		kf.mu.Lock()
		err := d.setArgs(kf, o.vals)
		if err == nil && kf.gen {
			err = q.setHidden(kf, len(o.vals), o.lens)
		}
		if err == nil {
			err = d.lib.EnqueueKernel(q.cq, kf.k, o.dims, &o.global, o.local, nil, &pe.ev)
		}
		kf.mu.Unlock()
		if err != nil {
			return fmt.Errorf("%s: kernel %q (entry %s): %w", d.label(), o.k.Name(), kf.entry, d.wrap(err))
		}
		q.p.push(q, *pe)
		if len(kf.sites) > 0 {
			return q.checkFault(o)
		}
	case opEmulate:
		return q.emulate(o)
	}
	return nil
}

func (q *queue) Submit(dst plugin.Ptr, src []byte) error {
	if err := q.usable(); err != nil {
		return err
	}
	r, err := q.d.rangeOf(dst, int64(len(src)))
	if err != nil {
		return fmt.Errorf("%s: submit of %d bytes: %w", q.d.label(), len(src), err)
	}
	if len(src) == 0 {
		return nil
	}
	return q.enqueue(op{kind: opSubmit, dst: r, host: src})
}

func (q *queue) Retrieve(dst []byte, src plugin.Ptr) error {
	if err := q.usable(); err != nil {
		return err
	}
	r, err := q.d.rangeOf(src, int64(len(dst)))
	if err != nil {
		return fmt.Errorf("%s: retrieve of %d bytes: %w", q.d.label(), len(dst), err)
	}
	if len(dst) == 0 {
		return nil
	}
	return q.enqueue(op{kind: opRetrieve, src: r, host: dst})
}

// Exchange copies between this device and another OpenCL device of the
// same platform (or within this one); other devices are ErrUnsupported.
func (q *queue) Exchange(dst plugin.Device, dstPtr, src plugin.Ptr, size int64) error {
	if err := q.usable(); err != nil {
		return err
	}
	other, ok := dst.(*device)
	if !ok || other.pl != q.d.pl {
		return fmt.Errorf("%s: exchange to a %s device: %w", q.d.label(), dst.Info().Kind, plugin.ErrUnsupported)
	}
	if err := other.alive(); err != nil {
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
	return q.enqueue(op{kind: opExchange, dst: t, src: s, size: size, peer: other})
}

// Launch enqueues kernel k with args: its OpenCL C entry, or in the
// emulate mode its Go body for a kernel without OpenCL C.
func (q *queue) Launch(k plugin.Kernel, args []plugin.Arg) error {
	return q.LaunchGeometry(k, args, plugin.Geometry{})
}

// LaunchGeometry is Launch with the work-groups of g (num_teams and
// thread_limit).
func (q *queue) LaunchGeometry(k plugin.Kernel, args []plugin.Arg, geo plugin.Geometry) error {
	if err := q.usable(); err != nil {
		return err
	}
	d := q.d
	kf, err := d.kernel(k)
	if err != nil {
		return err
	}
	if kf.bind || kf.emu {
		if err := plugin.CheckArgs(k, args); err != nil {
			return fmt.Errorf("%s: %w", d.label(), err)
		}
		for i, p := range k.Params() {
			if p.Kind == plugin.Slice && args[i].Len > 0 {
				if _, _, err := d.mem.find(args[i].Ptr, int64(args[i].Len)*int64(p.Type.Size())); err != nil {
					return fmt.Errorf("%s: kernel %q argument %d ([]%s, %d elements at %#x): %w", d.label(), k.Name(), i, p.Type, args[i].Len, uint64(args[i].Ptr), err)
				}
			}
		}
		if kf.bind {
			return nil // nothing to do on an OpenCL device (see loadKernel)
		}
	}
	o := op{kind: opLaunch, k: k, kf: kf}
	if o.dims, o.global, o.local, err = d.workSize(k, kf, args, geo); err != nil {
		return fmt.Errorf("%s: %w", d.label(), err)
	}
	if kf.emu {
		return q.enqueue(op{kind: opEmulate, k: k, args: append([]plugin.Arg(nil), args...)})
	}
	if o.vals, err = d.packArgs(k, args); err != nil {
		return fmt.Errorf("%s: %w", d.label(), err)
	}
	if kf.gen {
		o.lens = sliceLens(k, args)
	}
	return q.enqueue(o)
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

// Wait makes the queue wait for an event of any OpenCL device of the same
// platform, with a barrier; other events are ErrUnsupported.
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

// Synchronize waits until every operation is issued and the command
// queue is done, reports the timed operations, and returns (and clears)
// the error state.
func (q *queue) Synchronize() error {
	err := q.l.Synchronize()
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

// Query reports whether every operation is issued and done; once it is,
// it reports the timed operations and returns (and clears) the error
// state.
func (q *queue) Query() (bool, error) {
	if !q.l.Idle() {
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
	err := q.l.TakeErr()
	if err == nil {
		err = q.d.alive()
	}
	return true, err
}

// Close refuses new work, synchronizes what was enqueued, then releases
// the command queue.
func (q *queue) Close() error {
	if !q.l.Close() {
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
// enqueued after this call, as a driver whose queue broke would: they
// fail, and the device is lost. It is for this module's tests.
func LoseQueueForTests(q plugin.Queue) error {
	return q.(*queue).enqueue(op{kind: opLose})
}
