package gpukind

import (
	"fmt"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/devstate"
	"github.com/goffload/offload/plugin/opqueue"
	"github.com/goffload/offload/plugin/optrace"
)

// An Issuer is the kind's side of a queue. It issues the kind's operations,
// of type O, to the driver (opqueue.Runner). Where the goroutine that issues
// needs setting up, it is an opqueue.Binder too. It makes the operations that
// record and wait for an event.
type Issuer[O any, H comparable] interface {
	opqueue.Runner[O]
	// RecordOp returns the operation that records ev, tagged tag (see
	// Queue.Tagged). Issuing it calls ev.Fire, then ev.Unref.
	RecordOp(ev *Event[H], tag uint64) O
	// WaitOp returns the operation that waits for ev, tagged tag. Issuing it
	// waits for ev.Issued. It then makes the driver wait, unless ev.Waitable
	// says the record is complete. Last it calls ev.Unref.
	WaitOp(ev *Event[H], tag uint64) O
}

// Queue is what a GPU kind's queues share. It holds the in-order loop of the
// kind's operations, with its error state. It gives plugin.Queue's Record,
// Wait and Launch. It gives SetInline (plugin.InlineQueue) and Tag
// (plugin.TaggedQueue). And it makes the checks of a launch (Launchable). A
// kind's queue embeds one, made ready by Init. The kind adds its copies,
// LaunchGeometry, Synchronize, Query and Close.
type Queue[O any, H, F comparable] struct {
	L opqueue.Loop[O] // the operations, issued in order; the error state

	d   *Device[H, F]
	st  *devstate.State
	evs *Events[H]
	is  Issuer[O, H]
	gl  plugin.GeometryLauncher
	tr  *optrace.Tracer
	tag optrace.Tag
}

// Init makes q ready: a queue of d whose operations is issues. Its Launch is
// gl's LaunchGeometry without a geometry; gl is the kind's queue. tr is the
// device's tracer, which says whether operations are timed (Tagged). It is
// nil if the kind times none.
func (q *Queue[O, H, F]) Init(d *Device[H, F], is Issuer[O, H], gl plugin.GeometryLauncher, tr *optrace.Tracer) {
	q.d, q.st, q.evs, q.is, q.gl, q.tr = d, &d.St, &d.Events, is, gl, tr
	q.L.Init(is)
}

// Tag sets the tag of the operations enqueued after it (plugin.TaggedQueue).
// The device times them if it is traced, unless tag is 0.
func (q *Queue[O, H, F]) Tag(tag uint64) { q.tag.Tag(tag) }

// Tagged is the tag of an operation enqueued now: the queue's if the
// device is traced, else 0 (not timed).
func (q *Queue[O, H, F]) Tagged() uint64 {
	if q.tr == nil {
		return 0
	}
	return q.tr.Tagged(&q.tag)
}

// Launch enqueues kernel k with args, in the geometry the kind chooses
// (plugin.Queue's Launch).
func (q *Queue[O, H, F]) Launch(k plugin.Kernel, args []plugin.Arg) error {
	return q.gl.LaunchGeometry(k, args, plugin.Geometry{})
}

// Launchable returns how the queue's device launches k with args. It checks
// them as the contract asks before a launch is enqueued. The queue must take
// work, and the device must have k. args must be k's (plugin.CheckArgs). Each
// slice must lie in device memory (CheckSlices). run is false if there is
// nothing to launch: the bind kernel (Kernel.Bind).
func (q *Queue[O, H, F]) Launchable(k plugin.Kernel, args []plugin.Arg) (kf Kernel[F], run bool, err error) {
	if err := q.Usable(); err != nil {
		return kf, false, err
	}
	if kf, err = q.d.Kernel(k); err != nil {
		return kf, false, err
	}
	err = plugin.CheckArgs(k, args)
	if err == nil {
		err = CheckSlices(k, args, q.d.mem.Check)
	}
	if err != nil {
		return kf, false, fmt.Errorf("%s: %w", q.st.Label(), err)
	}
	return kf, !kf.Bind, nil
}

// Peer returns dst, the destination device of an exchange that q enqueues, as
// a device of the kind. It does so if same says q's device can copy to it.
// Else it returns an error wrapping plugin.ErrUnsupported. It is an error too
// if q cannot take work (Usable), or dst is closed or lost.
func Peer[D interface {
	plugin.Device
	Alive() error
}, O any, H, F comparable](q *Queue[O, H, F], dst plugin.Device, same func(D) bool) (D, error) {
	var other D
	if err := q.Usable(); err != nil {
		return other, err
	}
	other, ok := dst.(D)
	if !ok || !same(other) {
		return other, fmt.Errorf("%s: exchange to a %s device: %w", q.st.Label(), dst.Info().Kind, plugin.ErrUnsupported)
	}
	return other, other.Alive()
}

// Usable returns an error if the queue or its device cannot take work.
func (q *Queue[O, H, F]) Usable() error {
	if q.L.Closed() {
		return fmt.Errorf("%s: %w: queue is closed", q.st.Label(), plugin.ErrBadHandle)
	}
	return q.st.Alive()
}

// Put enqueues o, to be issued after what was enqueued before it.
func (q *Queue[O, H, F]) Put(o O) error {
	if _, err := q.L.Put(o, opqueue.Queued, false); err != nil {
		return fmt.Errorf("%s: %w", q.st.Label(), err)
	}
	return nil
}

// SetInline makes operations enqueued on the idle queue be issued by the
// enqueueing goroutine (plugin.InlineQueue).
func (q *Queue[O, H, F]) SetInline(on bool) { q.L.SetInline(on) }

// Record enqueues the record of e, an event of the queue's device.
func (q *Queue[O, H, F]) Record(e plugin.Event) error {
	ev, ok := q.evs.Mine(e)
	if err := q.st.Mine("record", e, ok); err != nil {
		return err
	}
	if err := q.Usable(); err != nil {
		return err
	}
	if err := ev.Arm(); err != nil {
		return fmt.Errorf("%s: record: %w", q.st.Label(), err)
	}
	if err := q.Put(q.is.RecordOp(ev, q.Tagged())); err != nil {
		ev.Disarm()
		return err
	}
	return nil
}

// Wait enqueues a wait for e. It must be an event of a device whose queues
// this one can wait on (Events.CanWait). Other events are
// plugin.ErrUnsupported.
func (q *Queue[O, H, F]) Wait(e plugin.Event) error {
	ev, _ := e.(*Event[H])
	if err := q.st.Waitable(e, q.evs.CanWait(e)); err != nil {
		return err
	}
	if err := q.Usable(); err != nil {
		return err
	}
	if err := ev.Ref(); err != nil {
		return fmt.Errorf("%s: wait: %w", q.st.Label(), err)
	}
	if err := q.Put(q.is.WaitOp(ev, q.Tagged())); err != nil {
		ev.Unref()
		return err
	}
	return nil
}
