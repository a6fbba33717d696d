package cuda

import (
	"sync"
	"time"

	"github.com/goffload/offload/internal/cudadrv"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/gpukind"
	"github.com/goffload/offload/plugin/optrace"
)

// Timing the operations of tagged queues (plugin.Tracer): the device times a
// tagged queue's launches, copies and waits on the GPU. It uses CUDA events
// recorded on the stream before and after each. (A copy through staging
// buffers records before its first chunk's DMA and after its last's.) It
// reports them on the host's clock once the host has seen them done.
//
// The clock: a reference event is recorded on a stream of the device's own
// and synchronized. An event's time is the reference's plus
// cuEventElapsedTime from it. The reference completed after the host issued
// its record. Each timing read proves more: its records completed after the
// host issued them. The reference's time is the latest the proofs allow. So
// times are early, if anything, by the GPU's latency in running an idle
// stream's record. They are not late by the host's latency in seeing it done,
// which a loaded machine makes milliseconds. A reference serves the
// operations issued in the second after it. (float32 milliseconds lose
// precision, and the GPU's clock drifts from the host's.) An operation starts
// after the queue's operation before it ended; two references may disagree a
// little. It ends before the host saw it done.
//
// Issuing: the queue's goroutine may issue an operation with a non-zero tag,
// the queue's when it was enqueued. Such an operation records its events on
// the stream and appends its timing to the queue's FIFO. An emulated kernel,
// or an operation that failed when issued, is timed with the host's clock. A
// record notes the FIFO's length in its event (rq, rpos).
//
// Reporting: the goroutine that sees an event fire reports the timings of the
// event's queue up to the event's position. That is in Event.Synchronize or
// Query before they say so, in OnFire, or in the device's poller before it
// runs OnFire's function. Queue.Synchronize, and a Queue.Query that says
// done, report all of them. Queue.Close drops what is left.
//
// Reporting takes the queue's drain mutex. It copies the timings out of the
// FIFO under the FIFO's mutex. It reads their times from the driver without
// that mutex, under the device's tracing.life (read). It removes them from
// the FIFO. It calls the tracer's function holding only the drain mutex.
// Nothing but another report of the same queue takes that mutex. So a queue's
// reports go out in order, and the function holds nothing its caller or
// another queue needs. Then it gives the timing events back to the device's
// pool.
//
// A timing whose records are not complete stops the report; a later one
// reports it. An event may fire with the queue's error, without a record. It
// first waits on the queue's goroutine for the stream to finish the timed
// operations before it (settle).

const (
	refreshClock  = time.Second // how long a clock reference serves new operations
	maxIdleTimers = 4096        // the most timing events a device keeps for reuse
	keepTimings   = 1024        // the most room for timings a queue keeps when it has none
	reportAll     = ^uint64(0)  // the position past every timing of a queue
)

// tracing is a device's timing of its queues' operations.
type tracing struct {
	optrace.Tracer // where the times go; not traced until Trace

	refMu sync.Mutex   // held while a reference is taken, and by close
	life  sync.RWMutex // read while reports read timing events; written by close

	mu         sync.Mutex
	free       []cudadrv.Event            // timing events to reuse
	live       map[cudadrv.Event]struct{} // every timing event not destroyed
	ref        *clockRef                  // the reference new operations use
	refreshing bool                       // a new reference is being taken
	stream     cudadrv.Stream             // where references are recorded (0 until the first)
	closed     bool
}

// qtimes is a queue's timing of its tagged operations.
type qtimes struct {
	cur opTiming // the operation being issued: the issuing goroutine's

	drain sync.Mutex // held while reporting (see above)
	batch []opTiming // reused under drain
	out   []plugin.OpTime
	order optrace.Order // the operations reported, in the stream's order; under drain

	mu   sync.Mutex
	fifo []opTiming // fifo[head:] are issued and not reported, in order
	head int
	next uint64 // timings ever appended
}

// opTiming is a timed operation.
type opTiming struct {
	op    plugin.OpTime // what the trace says of it (optrace.Op); its times are read later
	ref   *clockRef
	start cudadrv.Event // 0 until recorded
	end   cudadrv.Event
	// issued and ended are the host's clock just before the start and end
	// records were issued. For a timing on the host's clock (host), they are
	// the operation's start and end.
	issued, ended time.Time
	host          bool
}

// Trace makes the device report its tagged queues' operations to f, on the
// host's clock (plugin.Tracer). nil stops the reports.
func (d *device) Trace(f func(plugin.OpTime)) { d.tr.Trace(f) }

// timer starts timing o, on the issuing goroutine; nil if o is not timed.
func (q *queue) timer(o *op) *opTiming {
	var kernel string
	var bytes int64
	switch o.kind {
	case gpukind.OpSubmit, gpukind.OpRetrieve:
		bytes = int64(len(o.host))
	case gpukind.OpExchange:
		bytes = o.size
	case gpukind.OpLaunch, gpukind.OpEmulate:
		kernel = o.k.Name()
	}
	desc, ok := optrace.Op(o.tag, o.kind.Traced(), kernel, bytes)
	if !ok {
		return nil
	}
	t := &q.tm.cur
	*t = opTiming{op: desc, issued: time.Now()}
	return t
}

// begin records t's start event on q's stream, once, with the device's
// context current. Without a reference or an event, t is timed on the host's
// clock.
func (t *opTiming) begin(q *queue) {
	if t == nil || t.start != 0 || t.host {
		return
	}
	d := q.d
	if t.ref == nil {
		if t.ref = d.tr.clock(d); t.ref == nil {
			t.host = true
			return
		}
	}
	t.start = t.record(q, &t.issued)
}

// finish records t's end event on q's stream, once, after begin.
func (t *opTiming) finish(q *queue) {
	if t == nil || t.start == 0 || t.end != 0 || t.host {
		return
	}
	t.end = t.record(q, &t.ended)
}

// record records a timing event on q's stream, with *at the host's clock just
// before, and returns it. Without an event, or if the record fails, it
// returns 0, and t is timed on the host's clock.
func (t *opTiming) record(q *queue, at *time.Time) cudadrv.Event {
	d := q.d
	ev := d.tr.get(d)
	if ev == 0 {
		t.host = true
		return 0
	}
	*at = time.Now()
	if d.drv.EventRecord(ev, q.stream) != nil {
		d.tr.put(d, ev)
		t.host = true
		return 0
	}
	return ev
}

// hostTimes times t on the host's clock: from start to end.
func (t *opTiming) hostTimes(start, end time.Time) {
	if t != nil {
		t.host, t.issued, t.ended = true, start, end
	}
}

// done ends t, whose operation was issued with err, and appends it to q's
// FIFO.
func (t *opTiming) done(q *queue, err error) {
	if t == nil {
		return
	}
	if err == nil { // an operation that put nothing on the stream (an empty copy)
		t.begin(q)
		t.finish(q)
	}
	if err != nil || t.end == 0 {
		t.op.Err = err != nil
		if !t.host || t.ended.IsZero() {
			t.ended = time.Now()
		}
		t.host = true
	}
	tm := &q.tm
	tm.mu.Lock()
	tm.fifo = append(tm.fifo, *t)
	tm.next++
	tm.mu.Unlock()
	*t = opTiming{}
}

// recordMark is what an event that q records notes (gpukind.Event.Fire). That
// is q, and how many timed operations q issued before it. It is nil if the
// device is not traced. On the issuing goroutine.
func (q *queue) recordMark() (gpukind.Reporter, uint64) {
	if !q.d.tr.On() {
		return nil, 0
	}
	q.tm.mu.Lock()
	defer q.tm.mu.Unlock()
	return q, q.tm.next
}

// settle waits until the stream has done the timed operations issued before
// an event that fires at once, with the queue's error. On the issuing
// goroutine.
func (q *queue) settle() {
	q.tm.mu.Lock()
	pending := q.tm.head < len(q.tm.fifo)
	q.tm.mu.Unlock()
	if pending {
		_ = q.d.drv.StreamSynchronize(q.stream)
	}
}

// Report reports the queue's timings before position upto that are done, in
// order (reportAll: every one). It calls the tracer's function holding only
// q.tm.drain.
func (q *queue) Report(upto uint64) {
	tm := &q.tm
	tm.drain.Lock()
	defer tm.drain.Unlock()
	tm.mu.Lock()
	pending := len(tm.fifo) - tm.head
	first := tm.next - uint64(pending)
	n := 0
	if upto > first {
		n = int(min(upto-first, uint64(pending)))
	}
	tm.batch = append(tm.batch[:0], tm.fifo[tm.head:tm.head+n]...)
	tm.mu.Unlock()
	if n == 0 {
		return
	}
	d := q.d
	f := d.tr.Sink()
	k := n // not traced any more: dropped
	if f != nil {
		tm.out, k = d.tr.times(d, tm.batch, tm.out[:0], &tm.order)
	}
	tm.mu.Lock()
	clear(tm.fifo[tm.head : tm.head+k])
	tm.head += k
	switch {
	case tm.head == len(tm.fifo) && cap(tm.fifo) > keepTimings:
		tm.fifo, tm.head = nil, 0
	case tm.head == len(tm.fifo):
		tm.fifo, tm.head = tm.fifo[:0], 0
	case tm.head >= 64 && tm.head >= len(tm.fifo)/2:
		n := copy(tm.fifo, tm.fifo[tm.head:])
		clear(tm.fifo[n:])
		tm.fifo, tm.head = tm.fifo[:n], 0
	}
	tm.mu.Unlock()
	if f != nil {
		for _, o := range tm.out {
			f(o)
		}
	}
	d.tr.release(d, tm.batch[:k])
	clear(tm.batch)
	clear(tm.out)
	if cap(tm.batch) > keepTimings {
		tm.batch, tm.out = nil, nil
	}
}

// dropTimes drops the queue's timings that are left, unreported: the queue is
// closed.
func (q *queue) dropTimes() {
	tm := &q.tm
	tm.drain.Lock()
	defer tm.drain.Unlock()
	tm.mu.Lock()
	ts := append([]opTiming(nil), tm.fifo[tm.head:]...)
	tm.fifo, tm.head = nil, 0
	tm.mu.Unlock()
	q.d.tr.release(q.d, ts)
}

// times appends the host-clock times of the timings at the front of ts whose
// records are complete to out. It returns how many there were, stopping at
// the first whose records are not. On a closed device it drops them all.
// order is the queue's operations reported. The next starts after the last
// ended, as a stream runs them one after the other.
func (tr *tracing) times(d *device, ts []opTiming, out []plugin.OpTime, order *optrace.Order) ([]plugin.OpTime, int) {
	tr.life.RLock()
	defer tr.life.RUnlock()
	tr.mu.Lock()
	closed := tr.closed
	tr.mu.Unlock()
	if closed {
		return out, len(ts)
	}
	k := 0
	read := func() error {
		for _, t := range ts[k:] {
			o := t.op
			o.Start, o.End = t.issued, t.ended
			if !t.host {
				start, end, err := t.read(d)
				switch now := time.Now(); { // after the operation was done
				case cudadrv.Code(err) == cudadrv.ErrNotReady:
					return nil
				case err != nil: // a lost device: what happened to the operation is unknown
					o.Err = true
				default:
					o.Start = minTime(maxTime(start, t.issued), now)
					o.End = minTime(maxTime(end, t.ended), now)
				}
			}
			order.Place(&o)
			out = append(out, o)
			k++
		}
		return nil
	}
	if d.with(read) != nil { // no context: the times cannot be read
		for i := k; i < len(ts); i++ {
			ts[i].host, ts[i].op.Err = true, true
		}
		read()
	}
	return out, k
}

// read returns t's start and end on the host's clock, from its events.
func (t *opTiming) read(d *device) (start, end time.Time, err error) {
	a, err := d.drv.EventElapsedTime(t.ref.ev, t.start)
	if err != nil {
		return start, end, err
	}
	b, err := d.drv.EventElapsedTime(t.start, t.end)
	if err != nil {
		return start, end, err
	}
	r := t.ref
	// The records completed after the host issued them.
	r.prove(t.issued.Sub(r.base) - ms(a))
	r.prove(t.ended.Sub(r.base) - ms(a) - ms(b))
	start = r.base.Add(time.Duration(r.lo.Load()) + ms(a))
	return start, start.Add(ms(b)), nil
}
