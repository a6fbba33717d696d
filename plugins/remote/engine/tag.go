package engine

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/optrace"
	"github.com/goffload/offload/plugins/remote/proto"
)

// Timing the operations of tagged queues (plugin.Tracer), the way of package
// optrace. The host tags a queue with a TTag frame that carries the host's
// clock. The device times the queue's operations after it where they run
// (optrace.Timed). It sends each as a TTimes record with the clock readings
// the host needs. With them the host places it on its own clock (clock: the
// kind's own part). There the device's optrace.Tracer reports it.

// clockEpoch is where this process's clock readings count from, in TTag and
// TTimes frames and clock replies. It is a monotonic clock, private to the
// process.
var clockEpoch = time.Now()

// deviceClock is t on this process's clock, in nanoseconds.
func deviceClock(t time.Time) int64 { return int64(t.Sub(clockEpoch)) }

// qtag is a tagged queue's tag. It says who the operations are for, when the
// host sent it (its clock) and when it came (ours).
type qtag struct {
	tag       uint64
	sent, got int64
}

// tag handles a Tag frame, on the reader's goroutine.
func (s *Session) tag(f *proto.Tag) {
	s.mu.Lock()
	if f.Tag == 0 {
		delete(s.tags, f.Queue)
		s.mu.Unlock()
		return
	}
	s.tags[f.Queue] = qtag{tag: f.Tag, sent: int64(f.HostClock), got: deviceClock(time.Now())}
	s.mu.Unlock()
	if s.srv != nil {
		s.traceServed()
	}
}

// timer returns what reports the times of an operation of kind (a launch of
// kernel) enqueued on queue qid. It returns nil if the queue is not tagged.
// The reader calls it as it enqueues the operation.
func (s *Session) timer(qid uint32, kind plugin.OpKind, kernel uint32, bytes int64) func(start, end time.Time, err error) {
	s.mu.Lock()
	t := s.tags[qid]
	s.mu.Unlock()
	o, ok := optrace.Op(t.tag, kind, "", bytes)
	if !ok {
		return nil
	}
	return optrace.Timed(o, timesTo{s, qid, kernel, t}, timesTo.send)
}

// timesTo is where a timed operation's times go: to the host. They go as a
// record of queue's with kernel's index and the tag's clock readings.
type timesTo struct {
	s      *Session
	queue  uint32
	kernel uint32
	t      qtag
}

// send sends o's times, on this process's clock, to the host.
func (w timesTo) send(o plugin.OpTime) {
	r := proto.OpRecord{Tag: o.Tag, Sent: w.t.sent, Got: w.t.got, Start: deviceClock(o.Start), End: deviceClock(o.End),
		Bytes: o.Bytes, Kernel: w.kernel, Kind: uint8(o.Kind), Failed: o.Err}
	w.s.l.send(&proto.Times{Queue: w.queue, DevClock: uint64(deviceClock(time.Now())), Ops: proto.AppendTimes(nil, r)})
}

// clock places the device's clock readings on the host's: host = device +
// off. Probes (TClock round trips) and timed operations prove bounds on off.
// Probes are sent when tracing starts and every second after. The bounds rest
// on three facts. The device read its clock after the host sent the probe,
// and before the answer came. An operation's tag came after the host sent it.
// Its record was sent before it came.
//
// off is the lower bound. It only grows, so that a device's operations keep
// their order and durations on the host's clock. A queue's track never
// overlaps itself. Every operation shows after its tag was sent and before
// its record came, inside its task's span. It is early by at most the one-way
// latency of the best probe or record. (Across machines whose clocks drift
// apart, the bound follows the device clock that runs slower.)
type clock struct {
	mu      sync.Mutex
	lo, hi  int64 // bounds on off the probes and records prove; lo is off
	set     bool
	probed  time.Time
	probing bool
}

// probes is how many round trips a clock estimate takes.
const probes = 8

// probe measures the device's clock against the host's.
func (d *Device) probe() error {
	lo, hi := int64(-1<<63), int64(1<<63-1)
	for range probes {
		h0 := deviceClock(time.Now())
		r, err := d.call(clockReq)
		if err != nil {
			return err
		}
		h1 := deviceClock(time.Now())
		dev := int64(r.Value)
		lo, hi = max(lo, h0-dev), min(hi, h1-dev) // the device read its clock between h0 and h1
	}
	c := &d.clock
	c.mu.Lock()
	if !c.set {
		c.lo, c.set = lo, true
	}
	c.lo, c.hi, c.probed = max(c.lo, lo), hi, time.Now()
	if c.lo > c.hi { // the clocks drifted apart: the newest bound wins
		c.lo = c.hi
	}
	c.mu.Unlock()
	return nil
}

// place returns r's start and end on the host's clock, with off first raised
// to what r proves. r's tag came (got) after the host sent it. r's record was
// sent at devSent on the device's clock and came at now on the host's. That
// bounds off from above.
func (c *clock) place(r proto.OpRecord, devSent, now int64) (start, end time.Time) {
	c.mu.Lock()
	c.lo = max(c.lo, r.Sent-r.Got)
	c.hi = min(c.hi, now-devSent)
	if c.lo > c.hi { // the clocks drifted apart since the last probe: the newest bound wins
		c.lo = c.hi
	}
	off := c.lo
	c.mu.Unlock()
	return clockEpoch.Add(time.Duration(r.Start + off)), clockEpoch.Add(time.Duration(r.End + off))
}

// Trace makes the device report its tagged queues' operations to f, on the
// host's clock (plugin.Tracer).
func (d *Device) Trace(f func(plugin.OpTime)) {
	if f != nil && d.probe() != nil {
		return // a lost device: its operations fail, with nothing to time
	}
	d.tr.Trace(f)
}

// times handles a Times frame, on the reader's goroutine.
func (d *Device) times(m *proto.Times) error {
	now := deviceClock(time.Now())
	recs, err := proto.ParseTimes(m.Ops, uint8(plugin.OpWait))
	if err != nil {
		return err
	}
	f := d.tr.Sink()
	if f == nil {
		return fmt.Errorf("%w: times of operations that were not tagged", proto.ErrFrame)
	}
	for _, r := range recs {
		op := plugin.OpTime{Tag: r.Tag, Kind: plugin.OpKind(r.Kind), Bytes: r.Bytes, Err: r.Failed}
		if op.Kind == plugin.OpLaunch {
			if d.img == nil || int(r.Kernel) >= len(d.img.Kernels) {
				return fmt.Errorf("%w: times of a launch of kernel %d", proto.ErrFrame, r.Kernel)
			}
			op.Kernel = d.img.Kernels[r.Kernel].Name()
		}
		op.Start, op.End = d.clock.place(r, int64(m.DevClock), now)
		f(op)
	}
	c := &d.clock
	c.mu.Lock()
	again := !c.probing && time.Since(c.probed) > time.Second
	c.probing = c.probing || again
	c.mu.Unlock()
	if again {
		go func() { // a new estimate, for clocks that drift
			d.probe()
			c.mu.Lock()
			c.probing = false
			c.mu.Unlock()
		}()
	}
	return nil
}

// Tag tags the queue's next operations, and the device times them
// (plugin.TaggedQueue). It does nothing unless the device is traced.
func (q *queue) Tag(tag uint64) {
	if q.tag == tag || (tag != 0 && !q.d.tr.On()) {
		return
	}
	if q.enqueue(&proto.Tag{Queue: q.id, Tag: tag, HostClock: uint64(deviceClock(time.Now()))}, nil) == nil {
		q.tag = tag
	}
}

// A proxied device whose served kind times its queues (plugin.Tracer) reports
// the served device's own times. Each timed operation goes to the served
// queue tagged with an id of its own. The served kind's report of that id is
// the one the host gets: its device's times, on this process's clock. The
// served kind reports when its queue retires the operation. So nothing waits
// for the served device per operation. A queue's records go to the host in
// its order (servedTimers). They go at the latest when a retrieve, a record
// or a sync mark drains the served queue. A kind without a Tracer is timed
// here, as a CPU device is. Each timed operation then waits for the served
// device (servedTimer.sync).

// servedTimer times one operation of a tagged queue of a proxied device.
// Its fields after here are under the session's servedTimers' mutex.
type servedTimer struct {
	to   timesTo
	o    plugin.OpTime // as the host is told it: tag, kind, bytes
	seq  uint64        // its place among its queue's timed operations
	here func(start, end time.Time, err error)
	// id tags the operation on the served queue. It is 0 where the served
	// kind does not time its queues; then here reports it.
	id uint64
	// parts is how many served operations carry id. got is how many of them
	// the served kind reported. They merge into start, end and failed.
	parts, got int
	start, end time.Time
	failed     bool
	// The operation as the session's queue ran it: hs, he, herr. ended is set
	// once it did. settled says the served queue was drained after it, so
	// every report of it came.
	hs, he         time.Time
	herr           bool
	ended, settled bool
}

// servedTimers is a proxied session's timed operations, in each queue's
// order, until their records go to the host.
type servedTimers struct {
	on   atomic.Bool // the served kind times its queues (Trace was called)
	once sync.Once

	mu   sync.Mutex
	next uint64 // the last id given
	byID map[uint64]*servedTimer
	fifo map[uint32][]*servedTimer
	seq  map[uint32]uint64 // timed operations made, by queue
}

// servedTimer returns what times an operation of kind (a launch of kernel)
// enqueued on queue qid of a proxied device. It returns nil if the queue is
// not tagged. The reader calls it as it enqueues the operation.
func (s *Session) servedTimer(qid uint32, kind plugin.OpKind, kernel uint32, bytes int64) *servedTimer {
	s.mu.Lock()
	tg, ok := s.tags[qid]
	s.mu.Unlock()
	if !ok {
		return nil
	}
	ts := &s.srv.times
	if !ts.on.Load() {
		return &servedTimer{here: s.timer(qid, kind, kernel, bytes)}
	}
	o, _ := optrace.Op(tg.tag, kind, "", bytes)
	t := &servedTimer{to: timesTo{s, qid, kernel, tg}, o: o}
	ts.mu.Lock()
	ts.next++
	t.id = ts.next
	t.seq = ts.seq[qid]
	ts.seq[qid]++
	ts.byID[t.id] = t
	ts.fifo[qid] = append(ts.fifo[qid], t)
	ts.mu.Unlock()
	return t
}

// traceServed makes the served kind time its queues, if it can. It does so
// once, before the first served queue is tagged (plugin.Tracer).
func (s *Session) traceServed() {
	ts := &s.srv.times
	ts.once.Do(func() {
		if tr, ok := s.srv.dev.(plugin.Tracer); ok {
			ts.mu.Lock()
			ts.byID, ts.fifo, ts.seq = map[uint64]*servedTimer{}, map[uint32][]*servedTimer{}, map[uint32]uint64{}
			ts.mu.Unlock()
			tr.Trace(s.servedTimes)
			ts.on.Store(true)
		}
	})
}

// timed is what the session's queue tells when the operation ran. It is nil
// if the operation is not timed.
func (t *servedTimer) timed() func(start, end time.Time, err error) {
	switch {
	case t == nil:
		return nil
	case t.id == 0:
		return t.here
	}
	return t.ran
}

// sync reports whether the operation waits for the served device. It does if
// it is timed here: its time must be the served device's work.
func (t *servedTimer) sync() bool { return t != nil && t.id == 0 }

// part returns the tag of a served operation of t's: t's id, counted among
// its parts. It returns 0 if t is not timed by the served kind.
func (t *servedTimer) part() uint64 {
	if t == nil || t.id == 0 {
		return 0
	}
	ts := &t.to.s.srv.times
	ts.mu.Lock()
	t.parts++
	ts.mu.Unlock()
	return t.id
}

// unpart uncounts a part that failed to enqueue. The served kind does not
// report it.
func (t *servedTimer) unpart() {
	ts := &t.to.s.srv.times
	ts.mu.Lock()
	t.parts--
	ts.mu.Unlock()
}

// ran is told by the session's queue that the operation ran.
func (t *servedTimer) ran(start, end time.Time, err error) {
	ts := &t.to.s.srv.times
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t.hs, t.he, t.herr, t.ended = start, end, err != nil, true
	t.to.s.sendTimesLocked(t.to.queue)
}

// servedTimes is the served kind's report of an operation (plugin.Tracer).
// o.Tag is a servedTimer's id.
func (s *Session) servedTimes(o plugin.OpTime) {
	ts := &s.srv.times
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t := ts.byID[o.Tag]
	if t == nil {
		return // an operation the session forgot (its queue closed)
	}
	if t.got == 0 || o.Start.Before(t.start) {
		t.start = o.Start
	}
	if t.got == 0 || o.End.After(t.end) {
		t.end = o.End
	}
	t.failed = t.failed || o.Err
	t.got++
	s.sendTimesLocked(t.to.queue)
}

// settleTimes is told that queue qid's served queue was drained. Every
// operation that ran before has been reported. Some made before the queue's
// operation upto never ran. They were skipped and are not timed. (A mark's
// upto: the operations before it ran or were skipped.)
func (s *Session) settleTimes(qid uint32, upto uint64) {
	ts := &s.srv.times
	if !ts.on.Load() {
		return
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	q := ts.fifo[qid][:0]
	for _, t := range ts.fifo[qid] {
		switch {
		case t.ended:
			t.settled = true
		case t.seq < upto:
			delete(ts.byID, t.id)
			continue
		}
		q = append(q, t)
	}
	ts.fifo[qid] = q
	s.sendTimesLocked(qid)
}

// timesMark is where a mark enqueued now on queue qid stands among its
// timed operations (settleTimes).
func (s *Session) timesMark(qid uint32) uint64 {
	ts := &s.srv.times
	if !ts.on.Load() {
		return 0
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.seq[qid]
}

// forget forgets the timed operations of queue qid: it closed.
func (ts *servedTimers) forget(qid uint32) {
	if !ts.on.Load() {
		return
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, t := range ts.fifo[qid] {
		delete(ts.byID, t.id)
	}
	delete(ts.fifo, qid)
	delete(ts.seq, qid)
}

// sendTimesLocked sends the host the records of queue qid's operations that
// are ready, in its order. It stops at the first that is not. That one has
// not run, or the served kind has not reported all of it and the queue was
// not drained since. A record holds the served kind's times where it reported
// the operation, else the session's. It runs under the timers' mutex, which
// keeps a queue's records in order.
func (s *Session) sendTimesLocked(qid uint32) {
	ts := &s.srv.times
	q := ts.fifo[qid]
	n := 0
	var ops []byte
	for ; n < len(q); n++ {
		t := q[n]
		if !t.ended || (t.got < t.parts && !t.settled) {
			break
		}
		delete(ts.byID, t.id)
		o := t.o
		if t.got > 0 {
			o.Start, o.End, o.Err = t.start, t.end, t.failed || t.herr
		} else {
			o.Start, o.End, o.Err = t.hs, t.he, t.herr
		}
		w := t.to
		ops = proto.AppendTimes(ops, proto.OpRecord{Tag: o.Tag, Sent: w.t.sent, Got: w.t.got, Start: deviceClock(o.Start), End: deviceClock(o.End),
			Bytes: o.Bytes, Kernel: w.kernel, Kind: uint8(o.Kind), Failed: o.Err})
	}
	if n == 0 {
		return
	}
	clear(q[:n])
	ts.fifo[qid] = q[n:]
	s.l.send(&proto.Times{Queue: qid, DevClock: uint64(deviceClock(time.Now())), Ops: ops})
}
