package engine

import (
	"fmt"
	"os"
	"runtime"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/opqueue"
	"github.com/goffload/offload/plugins/remote/proto"
	"github.com/goffload/offload/plugins/remote/state"
	"github.com/goffload/offload/plugins/remote/transport"
)

// The operations a session carries out for the host: copies within the device
// and to peers, records, and launches. Launches run on its own CPU device or
// on the device it serves.

// exchange copies within the device, or to a peer device.
func (s *Session) exchange(f *proto.Exchange) error {
	q, src, dst, size := s.queue(f.Queue), plugin.Ptr(f.Src), plugin.Ptr(f.Dst), int64(f.Size)
	if s.srv != nil {
		qid, peer := f.Queue, int(f.Peer)
		if peer == s.num {
			peer = -1
		}
		t := s.servedTimer(qid, plugin.OpExchange, 0, size)
		return q.DoTimed(func() error { return s.servedExchange(qid, dst, src, size, peer, t) }, t.timed())
	}
	timed := s.timer(f.Queue, plugin.OpExchange, 0, size)
	if peer := int(f.Peer); peer != s.num {
		return q.DoTimed(func() error {
			from, err := s.mem.Bytes(src, size)
			if err != nil {
				return err
			}
			if err := s.peers.exchange(peer, dst, from); err != nil {
				return fmt.Errorf("exchange to device %d: %w", peer, err)
			}
			return nil
		}, timed)
	}
	return q.DoTimed(func() error {
		from, err := s.mem.Bytes(src, size)
		if err != nil {
			return err
		}
		to, err := s.mem.Bytes(dst, size)
		if err != nil {
			return err
		}
		copy(to, from)
		return nil
	}, timed)
}

// record records an event at the end of a queue. When the queue reaches it,
// the event fires. The peers waiting on it hear of it, once the host has the
// retrieves sent before. So does the host.
func (s *Session) record(f *proto.Record) error {
	ev, id := opqueue.NewEvent(), f.Event
	s.emu.Lock()
	err := s.evs.Record(id, ev)
	s.emu.Unlock()
	if err != nil {
		return s.queue(f.Queue).Do(func() error { return err })
	}
	ev.Arm()
	qid := f.Queue
	var upto uint64
	if s.srv != nil {
		if err := s.servedRecord(s.queue(qid), qid, id); err != nil {
			return err
		}
		upto = s.timesMark(qid)
	}
	fire := func(failed error) error {
		if s.srv != nil {
			failed = s.servedSettle(qid, failed, false, upto)
		}
		s.emu.Lock()
		now := s.evs.Fire(id, failed)
		s.emu.Unlock()
		ev.Fire(failed)
		s.tell(now)
		return s.l.sendSoon(&proto.Event{Event: id, Status: proto.StatusOf(failed)})
	}
	return s.queue(f.Queue).MarkHere(false, fire)
}

// notify has a peer told when an event of ours fires.
func (s *Session) notify(f *proto.Notify) {
	s.emu.Lock()
	now := s.evs.Notify(f.Event, state.Notify{Peer: int(f.Peer), Wait: f.Wait}, s.num)
	s.emu.Unlock()
	s.tell(now)
}

func (s *Session) launch(f *proto.Launch, gen uint64) error {
	q := s.queue(f.Queue)
	if int(f.Kernel) >= len(s.img.Kernels) {
		n := f.Kernel
		return q.Do(func() error {
			return fmt.Errorf("%w: kernel index %d, the device has %d kernels", plugin.ErrBadKernel, n, len(s.img.Kernels))
		})
	}
	k := s.img.Kernels[f.Kernel]
	args, err := proto.DecodeArgs(f.Args, k)
	if err != nil {
		return q.Do(func() error { return err })
	}
	if s.srv != nil {
		return s.launchServed(q, f, k, args)
	}
	ctx := s.kctx
	if ctx == nil { // a session driven without hello (tests)
		ctx = plugin.NewKernelCtx(s.num, s.pool).WithStop(s.stop)
	}
	var sig *plugin.StopSignal
	if f.Stop != 0 { // its own signal, which stops with the session's too while the kernel runs
		sig = plugin.NewStopSignal()
		s.mu.Lock()
		if s.launchStops[f.Stop] == nil {
			s.launchStops[f.Stop] = sig
			s.queueStops[f.Queue] = append(s.queueStops[f.Queue], f.Stop)
		}
		s.mu.Unlock()
		ctx = ctx.WithStop(sig)
	}
	// call runs the kernel as launch does it, counted among the kernels
	// computing. Its stop signal is linked to the session's meanwhile. The
	// last kernel to end kicks the reader, or with idle set says so there.
	// The reader that ran it kicks once it has answered what was queued
	// behind it. A kick wakes a goroutine, and with it a sleeping thread.
	call := func(launch func() error, idle *bool) error {
		transport.KernelStarted()
		defer func() {
			if transport.KernelEnded() {
				// The host's next frame comes soon. A reader that parked
				// while the kernel computed polls for it, rather than pay a
				// wake-up from the doorbell.
				if idle != nil {
					*idle = true
				} else {
					s.l.kick()
				}
			}
		}()
		if sig != nil {
			defer sig.StopWith(s.stop)()
		}
		if err := launch(); err != nil {
			return fmt.Errorf("%s: %w", s.name(), err)
		}
		return nil
	}
	timed := s.timer(f.Queue, plugin.OpLaunch, f.Kernel, 0)
	// On an idle queue the reader runs the kernel itself, calling its body
	// (no runner goroutine in between). The kernel is in the queue's order
	// once it runs (the queue is busy). So from then on a standby may take
	// over reading if it runs long. What it reads goes behind the kernel. A
	// body that calls runtime.Goexit ends the reader. The queue fails with
	// the kernel's error, and the reader's role goes to a new goroutine
	// (session.read). Otherwise the queue's goroutine runs it, on a runner.
	//
	// If a standby took the role over, this goroutine ends after the kernel.
	// First it answers what was queued behind the kernel meanwhile (the
	// host's sync mark) itself. It does not hand it to a new goroutine. That
	// would cost a thread's wake-up, after a kernel long enough for the other
	// threads to sleep. Only then it kicks the reader (idle).
	var exited error
	idle := false
	ran, err := q.RunHereExitDrain(func() error {
		s.role.arm()
		return call(func() error {
			return k.LaunchHere(ctx, args, s.mem.Bytes, func(err error) { exited = fmt.Errorf("%s: %w", s.name(), err) })
		}, &idle)
	}, &exited, timed, func() bool { return !s.role.holds(gen) })
	if ran {
		s.role.disarm(gen)
	}
	if idle {
		s.l.kick()
	}
	if ran || err != nil {
		return nil
	}
	return q.DoTimed(func() error {
		// This queue's goroutine may just have readied another queue's
		// goroutine. (That is a copy out of the kernel before this one, whose
		// event it fired.) It waits on this processor as the next to run: let
		// it run first. Once the kernel computes, it waits for another
		// processor's thread to take it. Where the devices' kernels fill
		// every core, it waits for the kernel's end.
		runtime.Gosched()
		return call(func() error { return k.Launch(ctx, args, s.mem.Bytes) }, nil)
	}, timed)
}

// forgetStops forgets the numbered launches of queue qid. Its Sync mark is
// answered, so they are done (or skipped). The host will not ask them to stop
// any more.
func (s *Session) forgetStops(qid uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range s.queueStops[qid] {
		delete(s.launchStops, id)
	}
	delete(s.queueStops, qid)
}

// name is the device as errors name it.
func (s *Session) name() string {
	if s.Rank >= 0 {
		return fmt.Sprintf("mpi device %d (rank %d, pid %d)", s.num, s.Rank, os.Getpid())
	}
	return fmt.Sprintf("%s device %d (pid %d)", s.kindName(), s.num, os.Getpid())
}

// kindName is the device's kind. A session made without one (by tests) is a
// "remote" device.
func (s *Session) kindName() string {
	if s.Kind == "" {
		return "remote"
	}
	return s.Kind
}

// launchServed enqueues a launch on the served device, in q's order. A
// numbered launch gets its own stop signal, as on the CPU device.
func (s *Session) launchServed(q *opqueue.Queue, f *proto.Launch, k plugin.Kernel, args []plugin.Arg) error {
	var sig *plugin.StopSignal
	if f.Stop != 0 {
		sig = plugin.NewStopSignal()
		s.mu.Lock()
		if s.launchStops[f.Stop] == nil {
			s.launchStops[f.Stop] = sig
			s.queueStops[f.Queue] = append(s.queueStops[f.Queue], f.Stop)
		}
		s.mu.Unlock()
	}
	qid, t := f.Queue, s.servedTimer(f.Queue, plugin.OpLaunch, f.Kernel, 0)
	run := func() error { return s.servedLaunch(qid, k, args, sig, t) }
	if ran, err := q.RunHere(run, t.timed()); ran || err != nil {
		return nil
	}
	return q.DoTimed(run, t.timed())
}

// servedDev is the served device, or nil.
func (s *Session) servedDev() plugin.Device {
	if s.srv == nil {
		return nil
	}
	return s.srv.dev
}

// servedAddr is a proxied device's answer to an address request. It is the
// served device's, where its kind resolves addresses (plugin.AddrResolver).
func (s *Session) servedAddr(p plugin.Ptr) (uintptr, error) {
	r, ok := s.srv.dev.(plugin.AddrResolver)
	if !ok {
		return 0, s.servedErr(fmt.Errorf("address of %#x: %w", uint64(p), plugin.ErrUnsupported))
	}
	to, err := s.srv.addr(p, 0)
	if err != nil {
		return 0, s.servedErr(err)
	}
	a, err := r.DeviceAddr(to)
	return a, s.servedErr(err)
}
