// Package optrace times the operations of tagged queues for plugin.Tracer,
// one way for every kind. A device keeps a [Tracer]: where the times go, the
// function the core gave Trace. Each of its queues keeps a [Tag]: the task
// the operations enqueued next are for. An operation enqueued on a tagged
// queue of a traced device is timed. [Tracer.Tagged] says so when it is
// enqueued, and [Op] describes it. What a kind does then depends on its
// clock, the one part that is the kind's own:
//
//   - Some kinds' queues run on the host's clock: the host kind, and a
//     device process, whose clock is its own process's. Such a kind times
//     the operation where it runs, with the function [Timed] returns
//     (opqueue's DoTimed takes it). That function reports the operation's
//     start, end and failure to the kind's report function. For the host
//     kind that is the Tracer's Report; for a device process, a message to
//     the host.
//   - Some kinds' devices have a clock of their own: a GPU, or a device
//     process seen from the host. Such a kind reads the device's times when
//     it can and places them on the host's clock by its own estimate. It
//     reports them with [Tracer.Report] in each queue's order, kept by an
//     [Order].
//
// Every type here is safe for concurrent use unless it says otherwise.
package optrace

import (
	"sync/atomic"
	"time"

	"github.com/goffload/offload/plugin"
)

// Tracer is a device's side of plugin.Tracer: where its queues' timed
// operations are reported. The zero Tracer is not traced. A device holds one
// and calls its Trace from its own. Or it embeds it, which makes Trace the
// device's.
type Tracer struct {
	f atomic.Pointer[func(plugin.OpTime)]
}

// Trace makes Report call f (plugin.Tracer's Trace); nil stops the reports.
func (t *Tracer) Trace(f func(plugin.OpTime)) {
	if f == nil {
		t.f.Store(nil)
		return
	}
	t.f.Store(&f)
}

// On reports whether the device is traced.
func (t *Tracer) On() bool { return t.f.Load() != nil }

// Sink returns the function Trace set, or nil. It is for a kind that decides
// once, for a batch of reports, whether to read its device's times.
func (t *Tracer) Sink() func(plugin.OpTime) {
	if p := t.f.Load(); p != nil {
		return *p
	}
	return nil
}

// Report reports o to the function Trace set, if it set one; otherwise o is
// dropped. A queue's reports are made in its order. They are made before
// anything recorded after the operation fires (plugin.Tracer).
func (t *Tracer) Report(o plugin.OpTime) {
	if p := t.f.Load(); p != nil {
		(*p)(o)
	}
}

// Tagged returns the tag of an operation enqueued now on a queue tagged g. It
// is g's tag if the device is traced, and 0 (not timed) if it is not.
func (t *Tracer) Tagged(g *Tag) uint64 {
	if !t.On() {
		return 0
	}
	return g.Get()
}

// Tag is a queue's side of plugin.TaggedQueue. It is the tag of the
// operations enqueued after the last Tag, 0 until then (not timed). A queue
// holds one and calls its Tag from its own. Or it embeds it, which makes Tag
// the queue's.
type Tag struct {
	v atomic.Uint64
}

// Tag sets the tag of the operations enqueued after it (0: not timed).
func (g *Tag) Tag(tag uint64) { g.v.Store(tag) }

// Get returns the tag Tag set last.
func (g *Tag) Get() uint64 { return g.v.Load() }

// Op describes an operation of kind (a launch of kernel, a copy of bytes)
// enqueued with tag, as a trace reports it. It reports whether it is timed:
// tag is not 0. Its times are for the kind to fill in.
func Op(tag uint64, kind plugin.OpKind, kernel string, bytes int64) (plugin.OpTime, bool) {
	return plugin.OpTime{Tag: tag, Kind: kind, Kernel: kernel, Bytes: bytes}, tag != 0
}

// Timed returns the function that times o where it runs, on the clock of the
// process it runs in. The queue that runs the operation calls it once the
// operation is done. (For a wait, it calls it once the wait is over.) It
// passes the operation's start and end and its error. The function then calls
// report with o, its times, whether it failed, and c. c is what the kind
// keeps of the operation beside o, such as where to send it. report must not
// block. A kind on the host's clock reports with (*Tracer).Report:
//
//	optrace.Timed(o, d.tracer, (*optrace.Tracer).Report)
func Timed[C any](o plugin.OpTime, c C, report func(C, plugin.OpTime)) func(start, end time.Time, err error) {
	return func(start, end time.Time, err error) {
		o.Start, o.End, o.Err = start, end, err != nil
		report(c, o)
	}
}

// Order keeps a queue's operations in order on the host's clock as they are
// reported. It is for a kind whose device times them. Their times are placed
// on the host's clock by estimates that may disagree a little, so they could
// overlap. With an Order, each operation starts no earlier than the one
// before it ended. It ends no earlier than it starts. An Order is the
// queue's. It is not for concurrent use: a queue's reports are made one at a
// time, in order.
type Order struct {
	last time.Time // the end of the operation placed last
}

// Place moves o's times into order after the operations placed before it.
func (q *Order) Place(o *plugin.OpTime) {
	if o.Start.Before(q.last) {
		o.Start = q.last
	}
	if o.End.Before(o.Start) {
		o.End = o.Start
	}
	q.last = o.End
}
