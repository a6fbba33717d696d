// Package state holds the ordering rules of goffload's remote protocol as
// plain state. They say what each side of a link has registered, and what it
// may send when. Its types take the protocol's inputs: a frame's content, or
// a local event. (A queue reaching a record, or a retrieve's data going out,
// is such an event.) They return what to do: frames to queue, in order, and
// handles to fire or fail. There is no I/O, goroutine or lock inside. The
// engine in package remote holds one lock around each call and performs what
// it returns. Tests drive the rules directly, with no processes and no
// sleeps.
//
// The rules:
//
//   - Loss fails everything registered (Host.Lose): after a loss nothing
//     new registers, and nothing registered is forgotten.
//   - A wait is never overtaken by the forgetting of its event
//     (Host.Wait, Host.Close, Host.Heard). The device forgets an event only
//     once the host heard it fired and closed it. The forget goes out after
//     every wait queued for it. A wait on a failed event that the device may
//     have forgotten fails on the host.
//   - A peer hears of an event only once the host has every retrieve sent
//     before the event fired (Session.Fire, Session.Acked). A peer that
//     reads host memory after the event must see that data. Retrieves are
//     numbered in the order they went out on the wire (Session.Sent). The
//     host acknowledges them in that order.
//   - A recorded graph's part is defined before its first run. Its
//     arguments change only between runs. Each run has a new generation. A
//     free lets the part go once its runs are done (Graphs).
//   - Every table that grows with the work shrinks with it (Len).
package state

import (
	"fmt"

	"github.com/goffload/offload/plugin"
)

// Notify is a peer device waiting to hear that an event fired: device Peer,
// as its wait Wait.
type Notify struct {
	Peer int
	Wait uint64
}

// Tell is word to send to a peer: the event behind n fired, with Err.
type Tell struct {
	Notify
	Err error
}

// Session is the device side's table of the events the host recorded, and of
// the word its peers wait for. E is the engine's handle of an event (what its
// queues wait on).
type Session[E any] struct {
	events map[uint64]*devEvent[E]
	// sent counts the retrieves that went out. acked counts those the host
	// acknowledged, in the same order.
	sent, acked uint64
	// held are tells waiting for the host's acknowledgements.
	held []heldTell
	over bool
}

type devEvent[E any] struct {
	h     E
	fired bool
	err   error
	// need is how many retrieves had gone out when the event fired.
	need uint64
	// waiting are the peers to tell when it fires.
	waiting []Notify
}

type heldTell struct {
	Tell
	need uint64
}

// NewSession returns an empty table.
func NewSession[E any]() *Session[E] {
	return &Session[E]{events: map[uint64]*devEvent[E]{}}
}

// Record registers event id, recorded by the host, with handle h. An id that
// is taken is an error of the host's; the record fails in its queue.
func (s *Session[E]) Record(id uint64, h E) error {
	if s.events[id] != nil {
		return fmt.Errorf("%w: record: event %d is recorded already", plugin.ErrBadHandle, id)
	}
	s.events[id] = &devEvent[E]{h: h}
	return nil
}

// Event returns event id's handle, for a wait. It returns false if the host
// never recorded it or told the device to forget it.
func (s *Session[E]) Event(id uint64) (E, bool) {
	e := s.events[id]
	if e == nil {
		var zero E
		return zero, false
	}
	return e.h, true
}

// Sent says the retrieve numbered seq went out. Retrieves are numbered 1, 2,
// …, in the order they go out on the wire.
func (s *Session[E]) Sent(seq uint64) { s.sent = max(s.sent, seq) }

// Fire says event id fired (its queue reached it) with err. It returns the
// tells to send now. Those that wait for the host's acknowledgements are held
// (Acked returns them).
func (s *Session[E]) Fire(id uint64, err error) []Tell {
	e := s.events[id]
	if e == nil || e.fired {
		return nil
	}
	e.fired, e.err, e.need = true, err, s.sent
	waiting := e.waiting
	e.waiting = nil
	var now []Tell
	for _, n := range waiting {
		now = s.tell(now, Tell{n, err}, e.need)
	}
	return now
}

// tell appends t to now if the host has the first need retrieves. Otherwise
// it holds it.
func (s *Session[E]) tell(now []Tell, t Tell, need uint64) []Tell {
	if s.acked < need && !s.over {
		s.held = append(s.held, heldTell{t, need})
		return now
	}
	return append(now, t)
}

// Notify registers peer n's wait for event id. If the event fired already, it
// returns the tell to send now. The tell has an error if the event is
// unknown.
func (s *Session[E]) Notify(id uint64, n Notify, device int) []Tell {
	e := s.events[id]
	if e == nil {
		return []Tell{{n, fmt.Errorf("wait on event %d of device %d: %w", id, device, plugin.ErrNotRecorded)}}
	}
	if !e.fired {
		e.waiting = append(e.waiting, n)
		return nil
	}
	return s.tell(nil, Tell{n, e.err}, e.need)
}

// Acked says the host acknowledged the next retrieve. It returns the tells
// that waited for it.
func (s *Session[E]) Acked() []Tell {
	s.acked++
	var now []Tell
	k := 0
	for _, h := range s.held {
		if h.need <= s.acked {
			now = append(now, h.Tell)
		} else {
			s.held[k] = h
			k++
		}
	}
	clear(s.held[k:])
	s.held = s.held[:k]
	return now
}

// End says the session is over. The held tells go now, as the host will not
// acknowledge anything any more. None is held after.
func (s *Session[E]) End() []Tell {
	s.over = true
	now := make([]Tell, 0, len(s.held))
	for _, h := range s.held {
		now = append(now, h.Tell)
	}
	s.held = nil
	return now
}

// Forget drops events the host closed after they fired.
func (s *Session[E]) Forget(ids []uint64) {
	for _, id := range ids {
		delete(s.events, id)
	}
}

// Len is how many events and held tells the table holds.
func (s *Session[E]) Len() int { return len(s.events) + len(s.held) }
