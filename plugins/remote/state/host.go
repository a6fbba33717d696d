package state

import (
	"fmt"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/devstate"
	"github.com/goffload/offload/plugins/remote/proto"
)

// Host is the host side's table of one remote device. It holds the calls
// waiting for answers, the events the device will fire, the transfers under
// way, and the allocations the host numbered. C is the engine's handle of a
// call (what its answer goes to). E is that of an event, and P of an arriving
// transfer.
//
// Methods that return frames return them in the order they must go out. The
// engine queues them on the link before it releases the lock it holds around
// the call. So frames from different callers keep the order the table saw
// them in.
//
// Whether the device is closed or lost is its devstate.State's, as for every
// kind. The table reads it there and keeps no copy. Its Lose is the only one
// the State gets, under the engine's lock. So it knows which loss is the
// first.
type Host[C, E, P any] struct {
	life *devstate.State
	next uint64
	// calls wait for their answers. Each answer ends the transfers the call
	// lists.
	calls  map[uint64]hostCall[C]
	events map[uint64]*hostEvent[E]
	pushes map[uint64][]byte // pulled submits: data the device will pull
	pulls  map[uint64]P      // retrieves: where arriving data goes
	forget []uint64          // closed, fired events for the device to forget
	// vnext is the address of the next allocation: the host numbers them.
	vnext plugin.Ptr
	sizes map[plugin.Ptr]int64
	inUse int64
	// allocs counts the allocations made. The device has read the first seen
	// of them: an answer came after them. These are marks, not a count of
	// unseen ones. Two round trips begun for the same allocations both report
	// them. That must not make later ones count as read.
	allocs, seen uint64
}

type hostCall[C any] struct {
	h     C
	xfers []uint64
}

type hostEvent[E any] struct {
	h        E
	recorded bool
	closed   bool
	heard    bool
	err      error
	implies  []E
	xfers    []uint64
}

// ForgetBatch is how many forgotten events go in one Forget frame.
const ForgetBatch = 512

// NewHost returns an empty table for the device whose label, closing and loss
// life keeps. Its label names the device in errors.
func NewHost[C, E, P any](life *devstate.State) *Host[C, E, P] {
	return &Host[C, E, P]{
		life:   life,
		calls:  map[uint64]hostCall[C]{},
		events: map[uint64]*hostEvent[E]{},
		pushes: map[uint64][]byte{},
		pulls:  map[uint64]P{},
		sizes:  map[plugin.Ptr]int64{},
		vnext:  1 << 52, // any start: these addresses are the device's names for its blocks
	}
}

// Alive returns why the device cannot take work: its loss, or its close. The
// loss comes first: a device closed after its loss reports the loss.
func (h *Host[C, E, P]) Alive() error {
	if err := h.life.Lost(); err != nil {
		return err
	}
	return h.life.Alive()
}

func (h *Host[C, E, P]) name() string { return h.life.Label() }

// ID numbers something new: a request, event, transfer or wait.
func (h *Host[C, E, P]) ID() uint64 {
	h.next++
	return h.next
}

// Call registers call c for the answer to request id (ID), which ends
// transfers xfers.
func (h *Host[C, E, P]) Call(id uint64, c C, xfers []uint64) error {
	if err := h.Alive(); err != nil {
		return err
	}
	h.calls[id] = hostCall[C]{c, xfers}
	return nil
}

// Answer takes the call that request id's answer completes, and ends its
// transfers. An answer to no call is a protocol error.
func (h *Host[C, E, P]) Answer(id uint64) (C, error) {
	c, ok := h.calls[id]
	if !ok {
		var zero C
		return zero, fmt.Errorf("%w: answer to unknown request %d", proto.ErrFrame, id)
	}
	delete(h.calls, id)
	h.dropXfers(c.xfers)
	return c.h, nil
}

// NewEvent registers a new event with handle e and returns its id.
func (h *Host[C, E, P]) NewEvent(e E) (uint64, error) {
	if err := h.Alive(); err != nil {
		return 0, err
	}
	id := h.ID()
	h.events[id] = &hostEvent[E]{h: e}
	return id, nil
}

// Record says a queue records event id after waiting on implies, and after
// transfers xfers. implies are other devices' events: if id fires without
// error, they fired. xfers are over when it fires.
func (h *Host[C, E, P]) Record(id uint64, implies []E, xfers []uint64) {
	if e := h.events[id]; e != nil {
		e.recorded, e.implies, e.xfers = true, implies, xfers
	}
}

// Heard says the device fired event id with err. It returns the event's
// handle and the events it implies, to fire if err is nil. It returns a
// Forget to send if the batch is full. An event that is not in the table is a
// protocol error.
func (h *Host[C, E, P]) Heard(id uint64, err error) (e E, implies []E, forget *proto.Forget, ferr error) {
	ev := h.events[id]
	if ev == nil {
		return e, nil, nil, fmt.Errorf("%w: unknown event %d fired", proto.ErrFrame, id)
	}
	if ev.heard {
		return ev.h, nil, nil, nil
	}
	ev.heard, ev.err = true, err
	implies, ev.implies = ev.implies, nil
	h.dropXfers(ev.xfers)
	ev.xfers = nil
	if ev.closed {
		forget = h.forgetEvent(id)
	}
	return ev.h, implies, forget, nil
}

// HeardOf reports whether the device's word that event id fired has come. An
// event the table forgot (heard, then closed) counts as heard. Only an event
// recorded and not yet heard stays in the table unheard.
func (h *Host[C, E, P]) HeardOf(id uint64) bool {
	ev := h.events[id]
	return ev == nil || ev.heard
}

// Close says the host closed event id: no queue will wait on it again once it
// fired. It returns a Forget to send if the batch is full.
func (h *Host[C, E, P]) Close(id uint64) *proto.Forget {
	ev := h.events[id]
	if ev == nil || ev.closed {
		return nil
	}
	ev.closed = true
	switch {
	case ev.heard: // no queue will wait on it again
		return h.forgetEvent(id)
	case !ev.recorded: // no word from the device is to come
		delete(h.events, id)
	}
	return nil
}

// forgetEvent drops event id and adds it to the batch the device forgets.
func (h *Host[C, E, P]) forgetEvent(id uint64) *proto.Forget {
	delete(h.events, id)
	h.forget = append(h.forget, id)
	if len(h.forget) < ForgetBatch {
		return nil
	}
	f := &proto.Forget{Events: h.forget}
	h.forget = nil
	return f
}

// Wait returns the Wait frame that makes queue q wait on event id, or skip if
// the wait is over at once. fired and firedErr are what the engine's handle
// of the event says. It fires when the device says so. It fires without error
// when a queue got past the event on its device, whose word may still be on
// its way.
//
// A wait is over at once if the event fired without error. A wait on an event
// that failed goes to the device, which fails the queue. But the device may
// have forgotten the event: the host heard it and closed it. Then the error
// comes back at once.
func (h *Host[C, E, P]) Wait(q uint32, id uint64, fired bool, firedErr error) (f *proto.Wait, skip bool, err error) {
	if err := h.Alive(); err != nil {
		return nil, false, err
	}
	ev := h.events[id]
	switch {
	case ev == nil: // heard and closed, and forgotten: fired says how
		if !fired {
			return nil, false, fmt.Errorf("%s: %w: wait on event %d, which is closed", h.name(), plugin.ErrBadHandle, id)
		}
		if firedErr != nil {
			return nil, false, fmt.Errorf("%s: waited-for event failed: %w", h.name(), firedErr)
		}
		return nil, true, nil
	case ev.heard && ev.err == nil, !ev.heard && fired && firedErr == nil:
		return nil, true, nil
	}
	return &proto.Wait{Queue: q, Event: id}, false, nil
}

// Settled reports whether a wait on event id by a queue of another device is
// over at once (skip), or fails at once (err). It decides as Wait does.
func (h *Host[C, E, P]) Settled(id uint64, fired bool, firedErr error) (skip bool, err error) {
	_, skip, err = h.Wait(0, id, fired, firedErr)
	return skip, err
}

// Push registers transfer id of a pulled submit: data. The device pulls it
// when its queue reaches the submit.
func (h *Host[C, E, P]) Push(id uint64, data []byte) { h.pushes[id] = data }

// Pulled takes the data of transfer id, which the device pulls. A pull of no
// transfer is a protocol error.
func (h *Host[C, E, P]) Pulled(id uint64) ([]byte, error) {
	data, ok := h.pushes[id]
	if !ok {
		return nil, fmt.Errorf("%w: pull of unknown transfer %d", proto.ErrFrame, id)
	}
	delete(h.pushes, id)
	return data, nil
}

// Expect registers transfer id of a retrieve: p, where its data goes.
func (h *Host[C, E, P]) Expect(id uint64, p P) { h.pulls[id] = p }

// Arriving returns where transfer id's data goes. Data for no transfer is a
// protocol error.
func (h *Host[C, E, P]) Arriving(id uint64) (P, error) {
	p, ok := h.pulls[id]
	if !ok {
		return p, fmt.Errorf("%w: data for unknown transfer %d", proto.ErrFrame, id)
	}
	return p, nil
}

// Arrived says all of transfer id's data is in place.
func (h *Host[C, E, P]) Arrived(id uint64) { delete(h.pulls, id) }

// dropXfers forgets transfers that are over: done, or skipped by the device
// after an earlier failure. Their buffers are the caller's again.
func (h *Host[C, E, P]) dropXfers(ids []uint64) {
	for _, id := range ids {
		delete(h.pushes, id)
		delete(h.pulls, id)
	}
}

// Alloc numbers an allocation of size bytes on a device whose memory is limit
// bytes. It returns its address and the frame that tells the device.
func (h *Host[C, E, P]) Alloc(size, limit int64) (plugin.Ptr, *proto.Alloc, error) {
	if err := h.Alive(); err != nil {
		return 0, nil, err
	}
	if size < 0 {
		return 0, nil, fmt.Errorf("%s: %w: negative size %d", h.name(), plugin.ErrBadPointer, size)
	}
	if size > limit-h.inUse {
		return 0, nil, fmt.Errorf("%s: %w: %d bytes with %d bytes in use is more than the device's memory (%d bytes)", h.name(), plugin.ErrOutOfMemory, size, h.inUse, limit)
	}
	p := h.vnext
	h.vnext += plugin.Ptr((max(size, 1) + 4095) &^ 4095)
	h.sizes[p] = size
	h.inUse += size
	h.allocs++
	return p, &proto.Alloc{Ptr: uint64(p), Size: uint64(size)}, nil
}

// Free checks that p is a live allocation and returns the frame that frees
// it on the device.
func (h *Host[C, E, P]) Free(p plugin.Ptr) (*proto.Free, error) {
	if err := h.Alive(); err != nil {
		return nil, err
	}
	size, ok := h.sizes[p]
	if !ok {
		return nil, fmt.Errorf("%s: %w: free of %#x, which is not the start of a live allocation", h.name(), plugin.ErrBadPointer, uint64(p))
	}
	h.inUse -= size
	delete(h.sizes, p)
	return &proto.Free{Ptr: uint64(p)}, nil
}

// Unseen is how many allocations the device may not have read yet.
func (h *Host[C, E, P]) Unseen() int { return int(h.allocs - h.seen) }

// Allocs is the mark of the allocations made so far. It is for SeenUpTo once
// an answer to a frame sent after them came.
func (h *Host[C, E, P]) Allocs() uint64 { return h.allocs }

// SeenUpTo says the device read the allocations made before Allocs
// returned mark (an answer came after them).
func (h *Host[C, E, P]) SeenUpTo(mark uint64) { h.seen = max(h.seen, min(mark, h.allocs)) }

// Lose fails the device with err; the device's State is lost with it. It
// returns every call and event registered, for the engine to fail. From then
// on nothing registers. It reports false if the device was lost already.
func (h *Host[C, E, P]) Lose(err error) (calls []C, events []E, first bool) {
	if h.life.Lost() != nil {
		return nil, nil, false
	}
	h.life.Lose(err)
	for _, c := range h.calls {
		calls = append(calls, c.h)
	}
	for _, e := range h.events {
		events = append(events, e.h)
	}
	clear(h.calls)
	clear(h.events)
	clear(h.pushes)
	clear(h.pulls)
	clear(h.sizes)
	h.inUse, h.seen, h.forget = 0, h.allocs, nil
	return calls, events, true
}

// Transfers is how many transfers are under way.
func (h *Host[C, E, P]) Transfers() int { return len(h.pushes) + len(h.pulls) }

// Len is how many calls, events, transfers, allocations and forgotten events
// the table holds. The forgotten events are those waiting for their batch.
func (h *Host[C, E, P]) Len() int {
	return len(h.calls) + len(h.events) + len(h.pushes) + len(h.pulls) + len(h.sizes) + len(h.forget)
}
