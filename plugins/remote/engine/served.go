package engine

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/opqueue"
	"github.com/goffload/offload/plugins/remote/state"
)

// A proxied device: a session that serves a device of another kind drives it
// through the plugin contract. The device is a GPU, an OpenCL device, or a
// host device of this process. It is driven where the Go CPU device's memory
// and kernels would be.
//
// The host chooses the addresses of its allocations, so a mapping never waits
// for the device. The served device chooses its own. The session translates
// the host's ranges into the served device's pointers (state.Ranges), base
// plus offset.
//
// Each of the host's queues is one queue of the served device. The session's
// own queues (opqueue) keep the protocol's order, waits and marks as for a
// CPU device. Their operations enqueue on the served queue without waiting
// for it. A retrieve, a record and a sync mark drain it first (Synchronize).
// Its data must be in, and its event must fire after everything before it. So
// nowait and depend keep the host out of the way. A task's copies and kernels
// pipeline on the served device.

// served is the device a proxying session drives.
type served struct {
	dev   plugin.Device
	label string // the served device as errors name it: its kind and name

	mu  sync.Mutex
	mem state.Ranges
	qs  map[uint32]*servedQueue
	// put is the queue that peers' exchanges into this device's memory use,
	// under putMu.
	putMu sync.Mutex
	put   *servedQueue
	// stage holds the buffers copies go through, for the next ones. A fresh
	// one costs its page faults each time.
	stage stager
	// evs are the host's events recorded on served queues, by id, under mu. A
	// wait of another queue of the device waits on the served kind's event,
	// inside the served device.
	evs map[uint64]*servedEvent
	// times are the timed operations the served kind times (tag.go).
	times servedTimers
}

// servedEvent is a host's event as the served device has it. Once ready is
// closed, ev is the served kind's event recorded in the queue's place. ev is
// nil where the record did not reach the served queue. The queue had failed
// then, and waits take the session's event and its error.
type servedEvent struct {
	ready chan struct{}
	ev    plugin.Event
}

// stager keeps a few large staging buffers for reuse.
type stager struct {
	mu   sync.Mutex
	free [][]byte
}

// Buffers below stageMin are not kept; at most stageKeep are, of
// stageMax bytes together.
const (
	stageMin  = 1 << 20
	stageKeep = 4
	stageMax  = 1 << 30
)

// get returns a buffer of size bytes, a kept one if one is large enough.
func (st *stager) get(size int64) []byte {
	if size >= stageMin {
		st.mu.Lock()
		best := -1
		for i, b := range st.free {
			if int64(cap(b)) >= size && (best < 0 || cap(b) < cap(st.free[best])) {
				best = i
			}
		}
		if best >= 0 {
			b := st.free[best]
			st.free = append(st.free[:best], st.free[best+1:]...)
			st.mu.Unlock()
			return b[:size]
		}
		st.mu.Unlock()
	}
	return make([]byte, size)
}

// put keeps b for a later get, if it is large and there is room.
func (st *stager) put(b []byte) {
	if cap(b) < stageMin {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	total := cap(b)
	for _, k := range st.free {
		total += cap(k)
	}
	if len(st.free) < stageKeep && total <= stageMax {
		st.free = append(st.free, b[:cap(b)])
	}
}

// servedQueue is one of the host's queues on the served device. Its methods
// are called in the session queue's order, by one goroutine at a time.
type servedQueue struct {
	st  *stager // where its buffers go back once drained
	q   plugin.Queue
	tq  plugin.TaggedQueue // q, where its kind times its queues
	cur uint64             // the tag q has
	err error              // the queue could not be made
	// pending says operations were enqueued since the last drain. keep holds
	// their buffers until then. failed is a failure a drain found. The
	// operations after it report it until the host's sync clears it.
	pending bool
	keep    [][]byte
	failed  error
}

// Proxy makes the session serve dev, a device of kind, in place of the
// process's Go CPU device. dev is loaded at hello and closed when the session
// ends. Call it before Serve.
func (s *Session) Proxy(dev plugin.Device, kind string) {
	in := dev.Info()
	s.srv = &served{dev: dev, label: fmt.Sprintf("%s device %q", kind, in.Name), qs: map[uint32]*servedQueue{}, evs: map[uint64]*servedEvent{}}
}

// Proxied reports whether the session serves a device of another kind.
func (s *Session) Proxied() bool { return s.srv != nil }

// servedErr wraps err with the session's device and the served one.
func (s *Session) servedErr(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %s: %w", s.name(), s.srv.label, err)
}

func (sv *served) queue(id uint32) *servedQueue {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	w := sv.qs[id]
	if w == nil {
		w = &servedQueue{st: &sv.stage}
		w.q, w.err = sv.dev.NewQueue()
		w.tq, _ = w.q.(plugin.TaggedQueue)
		sv.qs[id] = w
	}
	return w
}

// closeQueue closes the served queue of the host's queue id, after the
// session's queue drained.
func (sv *served) closeQueue(id uint32) {
	sv.mu.Lock()
	w := sv.qs[id]
	delete(sv.qs, id)
	sv.mu.Unlock()
	if w != nil && w.q != nil {
		w.q.Close()
	}
	sv.times.forget(id)
}

// addr is the served device's address of the host's [p, p+size).
func (sv *served) addr(p plugin.Ptr, size int64) (plugin.Ptr, error) {
	sv.mu.Lock()
	defer sv.mu.Unlock()
	return sv.mem.Lookup(uint64(p), uint64(size))
}

// alloc allocates size bytes on the served device for the host's range
// at p. A failure is kept for the operations that use the range.
func (sv *served) alloc(p plugin.Ptr, size int64) error {
	to, err := sv.dev.Alloc(size)
	if err != nil {
		err = fmt.Errorf("%s: allocation of %d bytes: %w", sv.label, size, err)
	}
	sv.mu.Lock()
	defer sv.mu.Unlock()
	if aerr := sv.mem.Add(uint64(p), uint64(size), to, err); aerr != nil {
		if err == nil {
			sv.dev.Free(to)
		}
		return aerr
	}
	return nil
}

// free frees the allocation at the host's p; false if there is none.
func (sv *served) free(p plugin.Ptr) bool {
	sv.mu.Lock()
	to, err, ok := sv.mem.Remove(uint64(p))
	sv.mu.Unlock()
	if ok && err == nil {
		if ferr := sv.dev.Free(to); ferr != nil {
			fmt.Fprintf(os.Stderr, "goffload device (pid %d): %s: free: %v\n", os.Getpid(), sv.label, ferr)
		}
	}
	return ok
}

// do enqueues an operation on w's served queue, unless an earlier drain
// failed. That failure is the operation's, as a queue's error state has it.
// t, if the served kind times it, tags it there.
func (w *servedQueue) do(t *servedTimer, op func(q plugin.Queue) error, keep []byte) error {
	if w.err != nil {
		return w.err
	}
	if w.failed != nil {
		return w.failed
	}
	var tag uint64
	if w.tq != nil {
		tag = t.part()
	}
	w.tagAs(tag)
	w.pending = true
	if keep != nil {
		w.keep = append(w.keep, keep)
	}
	err := op(w.q)
	if err != nil && tag != 0 {
		t.unpart()
	}
	return err
}

// tagAs tags w's served queue's next operations with tag (0: not timed),
// where its kind times them.
func (w *servedQueue) tagAs(tag uint64) {
	if w.tq != nil && w.cur != tag {
		w.tq.Tag(tag)
		w.cur = tag
	}
}

// drain waits for everything enqueued on w's served queue. It returns the
// first failure since the host's last sync.
func (w *servedQueue) drain() error {
	if w.err != nil {
		return w.err
	}
	if w.failed != nil || !w.pending {
		return w.failed
	}
	w.failed = w.q.Synchronize()
	for _, b := range w.keep {
		w.st.put(b)
	}
	w.pending, w.keep = false, nil
	return w.failed
}

// settle is a record's or a sync mark's failure. It is the session queue's,
// else the served queue's once drained. clear (a sync mark) forgets it after.
func (w *servedQueue) settle(failed error, clear bool) error {
	err := w.drain()
	if failed == nil {
		failed = err
	}
	if clear {
		w.failed = nil
	}
	return failed
}

// submit copies data to the host's dst on queue qid, in its order, timed by
// t. data must stay as it is: the served queue reads it until drained.
func (s *Session) servedSubmit(qid uint32, dst plugin.Ptr, data []byte, t *servedTimer) error {
	to, err := s.srv.addr(dst, int64(len(data)))
	if err != nil {
		return s.servedErr(err)
	}
	w := s.srv.queue(qid)
	err = w.do(t, func(q plugin.Queue) error { return q.Submit(to, data) }, data)
	if err == nil && t.sync() {
		err = s.drainServed(qid, w) // timed here: its time is the copy's
	}
	return s.servedErr(err)
}

// drainServed drains w, queue qid's served queue, from one of its operations.
// The timed operations before have all been reported.
func (s *Session) drainServed(qid uint32, w *servedQueue) error {
	err := w.drain()
	s.settleTimes(qid, 0)
	return err
}

// submitPart is how many bytes of a submit arriving in fragments go to the
// served device at once. The device copies a part while the next arrives.
const submitPart = 4 << 20

// servedSubmitAsItComes copies a submit's data arriving in p (pulled or
// pushed) to the host's dst on queue qid. It copies a part at a time as it
// comes, timed by t.
func (s *Session) servedSubmitAsItComes(qid uint32, dst plugin.Ptr, p *incoming, t *servedTimer) error {
	if p.err != nil {
		return p.wait()
	}
	to, err := s.srv.addr(dst, int64(p.size))
	if err != nil {
		return s.servedErr(err)
	}
	w := s.srv.queue(qid)
	kept := false
	for done := 0; done < p.size; {
		ended := false
		select {
		case <-p.prog:
		case <-p.done:
			ended = true
		}
		got := int(p.avail.Load())
		if got-done >= submitPart || (got > done && (got == p.size || ended)) {
			part := p.dst[done:got]
			var keep []byte
			if !kept {
				keep, kept = p.dst, true // back to the stager once drained
			}
			at := to + plugin.Ptr(done)
			if err := w.do(t, func(q plugin.Queue) error { return q.Submit(at, part) }, keep); err != nil {
				return s.servedErr(err)
			}
			done = got
		}
		if ended && done < p.size {
			if err := p.wait(); err != nil {
				return err
			}
		}
	}
	if t.sync() {
		return s.servedErr(s.drainServed(qid, w)) // timed here: its time is the copy's
	}
	return nil
}

// servedRetrieve reads size bytes at the host's src on queue qid, in its
// order. It returns them once they are in, in a staging buffer. The caller
// gives the buffer back (s.srv.stage.put) when done with it. t times it.
func (s *Session) servedRetrieve(qid uint32, src plugin.Ptr, size int64, t *servedTimer) ([]byte, error) {
	from, err := s.srv.addr(src, size)
	if err != nil {
		return nil, s.servedErr(err)
	}
	b := s.srv.stage.get(size)
	w := s.srv.queue(qid)
	if err := w.do(t, func(q plugin.Queue) error { return q.Retrieve(b, from) }, nil); err != nil {
		return nil, s.servedErr(err)
	}
	if err := s.drainServed(qid, w); err != nil {
		return nil, s.servedErr(err)
	}
	return b, nil
}

// servedLaunch runs kernel k with args (the host's addresses) on queue qid,
// in its order, timed by t. Where t is timed here, it waits for the kernel,
// whose time it is.
func (s *Session) servedLaunch(qid uint32, k plugin.Kernel, args []plugin.Arg, stop *plugin.StopSignal, t *servedTimer) error {
	args = append([]plugin.Arg(nil), args...)
	for i, p := range k.Params() {
		if p.Kind != plugin.Slice || (args[i].Ptr == 0 && args[i].Len == 0) {
			continue
		}
		to, err := s.srv.addr(args[i].Ptr, 0)
		if err != nil {
			return s.servedErr(fmt.Errorf("kernel %q argument %d: %w", k.Name(), i, err))
		}
		args[i].Ptr = to
	}
	w := s.srv.queue(qid)
	err := w.do(t, func(q plugin.Queue) error {
		if sl, ok := q.(plugin.StopLauncher); ok && stop != nil {
			return sl.LaunchStop(k, args, stop)
		}
		return q.Launch(k, args)
	}, nil)
	if err == nil && t.sync() {
		err = s.drainServed(qid, w)
	}
	return s.servedErr(err)
}

// servedExchange copies size bytes from the host's src to dst. For this
// device (peer < 0), it copies on the served queue when that can copy within
// its device. Else it copies through this process's memory. For device peer,
// its process puts them in its memory. t times it; through this process's
// memory, that is here, as the copy ends.
func (s *Session) servedExchange(qid uint32, dst, src plugin.Ptr, size int64, peer int, t *servedTimer) error {
	if peer < 0 {
		to, err := s.srv.addr(dst, size)
		if err != nil {
			return s.servedErr(err)
		}
		from, err := s.srv.addr(src, size)
		if err != nil {
			return s.servedErr(err)
		}
		w := s.srv.queue(qid)
		if ex, ok := w.q.(plugin.Exchanger); ok && w.err == nil {
			err := w.do(t, func(plugin.Queue) error { return ex.Exchange(s.srv.dev, to, from, size) }, nil)
			if err == nil && t.sync() {
				err = s.drainServed(qid, w)
			}
			if !errors.Is(err, plugin.ErrUnsupported) {
				return s.servedErr(err)
			}
		}
	}
	if o := s.sibling(peer); peer >= 0 && o != nil && o.srv != nil {
		// A device of this process: the copy stays in it. It goes straight
		// between the devices where their kind can.
		to, err := o.srv.addr(dst, size)
		if err != nil {
			return o.servedErr(err)
		}
		from, err := s.srv.addr(src, size)
		if err != nil {
			return s.servedErr(err)
		}
		w := s.srv.queue(qid)
		if ex, ok := w.q.(plugin.Exchanger); ok && w.err == nil {
			err := w.do(t, func(plugin.Queue) error { return ex.Exchange(o.srv.dev, to, from, size) }, nil)
			if !errors.Is(err, plugin.ErrUnsupported) {
				return s.servedErr(err)
			}
		}
		b, err := s.servedRetrieve(qid, src, size, nil)
		if err != nil {
			return err
		}
		defer s.srv.stage.put(b)
		return o.servedPut(dst, b)
	}
	b, err := s.servedRetrieve(qid, src, size, nil)
	if err != nil {
		return err
	}
	if peer < 0 {
		err := s.servedSubmit(qid, dst, b, nil) // b goes back once drained
		if err == nil && t != nil {
			err = s.servedErr(s.drainServed(qid, s.srv.queue(qid))) // timed here: its time is the copy's
		}
		return err
	}
	defer s.srv.stage.put(b)
	if err := s.peers.exchange(peer, dst, b); err != nil {
		return fmt.Errorf("exchange to device %d: %w", peer, err)
	}
	return nil
}

// servedRecord records event id on the served queue qid, in q's order. That
// is before the session's own record of it, which drains the queue and tells
// the host. Waits of the device's other queues wait on it there.
func (s *Session) servedRecord(q *opqueue.Queue, qid uint32, id uint64) error {
	se := &servedEvent{ready: make(chan struct{})}
	s.srv.mu.Lock()
	s.srv.evs[id] = se
	s.srv.mu.Unlock()
	return q.MarkHere(false, func(failed error) error {
		defer close(se.ready)
		w := s.srv.queue(qid)
		if failed != nil || w.err != nil || w.failed != nil {
			return nil
		}
		ev, err := s.srv.dev.NewEvent()
		if err != nil {
			return nil
		}
		w.tagAs(0)
		if err := w.q.Record(ev); err != nil {
			ev.Close()
			return nil
		}
		w.pending = true
		se.ev = ev
		return nil
	})
}

// servedWait makes queue qid wait for event id, recorded on another queue of
// this device; ev is the session's event. The served queue waits on the
// served kind's event. So what comes after is enqueued there once the other
// queue has reached the record, not once it is done. It reports false if id
// was not recorded on a served queue.
func (s *Session) servedWait(q *opqueue.Queue, qid uint32, id uint64, ev *opqueue.Event, t *servedTimer) (bool, error) {
	s.srv.mu.Lock()
	se := s.srv.evs[id]
	s.srv.mu.Unlock()
	if se == nil {
		return false, nil
	}
	return true, q.DoTimed(func() error {
		<-se.ready
		if se.ev == nil { // its queue had failed: the session's event says how
			if err := ev.Synchronize(); err != nil {
				return fmt.Errorf("waited-for event failed: %w", err)
			}
			return nil
		}
		return s.servedErr(s.srv.queue(qid).do(t, func(q plugin.Queue) error { return q.Wait(se.ev) }, nil))
	}, t.timed())
}

// forgetEvents closes the served events of the host's events ids. The host
// forgot them.
func (sv *served) forgetEvents(ids []uint64) {
	for _, id := range ids {
		sv.mu.Lock()
		se := sv.evs[id]
		delete(sv.evs, id)
		sv.mu.Unlock()
		if se != nil {
			go func() { // once its record has run; waits enqueued on it still work
				<-se.ready
				if se.ev != nil {
					se.ev.Close()
				}
			}()
		}
	}
}

// servedPut writes a peer's exchange into the host's dst and waits until
// it is in.
func (s *Session) servedPut(dst plugin.Ptr, data []byte) error {
	to, err := s.srv.addr(dst, int64(len(data)))
	if err != nil {
		return s.servedErr(err)
	}
	s.srv.putMu.Lock()
	defer s.srv.putMu.Unlock()
	if s.srv.put == nil {
		s.srv.put = &servedQueue{}
		s.srv.put.q, s.srv.put.err = s.srv.dev.NewQueue()
	}
	w := s.srv.put
	if err := w.do(nil, func(q plugin.Queue) error { return q.Submit(to, data) }, nil); err != nil {
		return s.servedErr(err)
	}
	return s.servedErr(w.settle(nil, true))
}

// settle is the failure a record (clear false) or a sync mark (clear true) of
// queue qid reports, once the served queue is drained. upto is where the mark
// stands among the queue's timed operations (timesMark).
func (s *Session) servedSettle(qid uint32, failed error, clear bool, upto uint64) error {
	err := s.srv.queue(qid).settle(failed, clear)
	s.settleTimes(qid, upto)
	if err != failed {
		return s.servedErr(err)
	}
	return err
}

// servedInfo is the served device's description, as the host sees it. It is
// the served kind's own, with the process that serves it.
func (s *Session) servedInfo() plugin.Info {
	in := s.srv.dev.Info()
	host, _ := os.Hostname()
	in.Serves = in.Kind
	in.Kind = s.kindName()
	in.Host, in.PID = host, os.Getpid()
	return in
}

// servedInfoJSON is the Info reply of a proxying session. It holds the served
// device's description and the kernels it cannot launch, with why, by index.
// So the host's placement can leave them out.
func (s *Session) servedInfoJSON() []byte {
	type info struct {
		plugin.Info
		Refused map[int]string `json:",omitempty"`
		NoStop  bool           `json:",omitempty"`
	}
	v := info{Info: s.servedInfo()}
	if q, err := s.srv.dev.NewQueue(); err == nil {
		_, stops := q.(plugin.StopLauncher)
		v.NoStop = !stops
		q.Close()
	}
	if kc, ok := s.srv.dev.(plugin.KernelChecker); ok && s.img != nil {
		for i, k := range s.img.Kernels {
			if err := kc.CanLaunch(k); err != nil {
				if v.Refused == nil {
					v.Refused = map[int]string{}
				}
				v.Refused[i] = err.Error()
			}
		}
	}
	b, _ := json.Marshal(v)
	return b
}

// close closes the served device's queues and the device.
func (sv *served) close() {
	sv.mu.Lock()
	qs := sv.qs
	sv.qs = map[uint32]*servedQueue{}
	sv.mem.Each(func(plugin.Ptr) {}) // the device's Close frees them
	sv.evs = map[uint64]*servedEvent{}
	sv.mu.Unlock()
	for _, w := range qs {
		if w.q != nil {
			w.q.Close()
		}
	}
	if sv.put != nil && sv.put.q != nil {
		sv.put.q.Close()
	}
	sv.dev.Close()
}
