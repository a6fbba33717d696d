package engine

import (
	"fmt"
	"sync"
	"time"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/optrace"
	"github.com/goffload/offload/plugins/remote/proto"
)

// Timing the operations of tagged queues (plugin.Tracer), the way of
// package optrace: the host tags a queue with a TTag frame that carries
// the host's clock; the device times the queue's operations after it
// where they run (optrace.Timed) and sends each as a TTimes record with
// the clock readings the host needs to place it on its own clock (clock:
// the kind's own part), where the device's optrace.Tracer reports it.

// clockEpoch is where this process's clock readings (in TTag and TTimes
// frames, and clock replies) count from: a monotonic clock, private to the
// process.
var clockEpoch = time.Now()

// deviceClock is t on this process's clock, in nanoseconds.
func deviceClock(t time.Time) int64 { return int64(t.Sub(clockEpoch)) }

// qtag is a tagged queue's tag: who to say the operations are for, when the
// host sent it (its clock) and when it came (ours).
type qtag struct {
	tag       uint64
	sent, got int64
}

// tag handles a Tag frame, on the reader's goroutine.
func (s *Session) tag(f *proto.Tag) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.Tag == 0 {
		delete(s.tags, f.Queue)
		return
	}
	s.tags[f.Queue] = qtag{tag: f.Tag, sent: int64(f.HostClock), got: deviceClock(time.Now())}
}

// timer returns what reports the times of an operation of kind (a launch
// of kernel) enqueued on queue qid if the queue is tagged, or nil. The
// reader calls it as it enqueues the operation.
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

// timesTo is where a timed operation's times go: to the host, as a record
// of queue's with kernel's index and the tag's clock readings.
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
// off. Probes (TClock round trips) when tracing starts and every second
// after, and every timed operation, prove bounds on off: the device read
// its clock after the host sent the probe (and before the answer came), an
// operation's tag came after the host sent it, and its record was sent
// before it came. off is the lower bound: it only grows, so that a
// device's operations keep their order and durations on the host's clock
// (a queue's track never overlaps itself), and every operation shows after
// its tag was sent and before its record came, inside its task's span. It
// is early by at most the one-way latency of the best probe or record.
// (Across machines whose clocks drift apart, the bound follows the device
// clock that runs slower.)
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

// place returns r's start and end on the host's clock, with off first
// raised to what r proves: r's tag came (got) after the host sent it (and
// r's record, sent at devSent on the device's clock, came at now on the
// host's, which bounds off from above).
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

// Trace makes the device report its tagged queues' operations to f, on
// the host's clock (plugin.Tracer).
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

// Tag tags the queue's next operations: the device times them
// (plugin.TaggedQueue). It does nothing unless the device is traced.
func (q *queue) Tag(tag uint64) {
	if q.tag == tag || (tag != 0 && !q.d.tr.On()) {
		return
	}
	if q.enqueue(&proto.Tag{Queue: q.id, Tag: tag, HostClock: uint64(deviceClock(time.Now()))}, nil) == nil {
		q.tag = tag
	}
}
