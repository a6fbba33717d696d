package mapping

import (
	"errors"
	"fmt"
	"testing"
	"unsafe"

	"github.com/goffload/offload/plugin"
)

// The tests' issuer: it does what a plan says to a fake device (allocations
// are numbers, copies are events that are only counted) and reports back
// as core's issuer does. No device takes part.

// arena is the host memory the tests' items map.
var arena [1 << 10]byte

// at is the item for arena[lo:hi] with map type typ.
func at(lo, hi int, typ MapType) item {
	return item{Buf{Ptr: unsafe.Pointer(&arena[lo]), Size: int64(hi - lo), Name: fmt.Sprintf("a[%d:%d]", lo, hi)}, typ}
}

// item is a map clause of a construct: a buffer and its map type.
type item struct {
	b   Buf
	typ MapType
}

// The table's answers, as values.
func (s *sim) planEnter(it item) (p Plan)  { s.t.Enter(&p, &it.b, it.typ); return p }
func (s *sim) planExit(it item) (p Plan)   { s.t.Exit(&p, &it.b, it.typ); return p }
func (s *sim) planUpdate(it item) (p Plan) { s.t.Update(&p, &it.b, it.typ); return p }
func (s *sim) planUse(addr uintptr, size int64) (p Plan) {
	s.t.Use(&p, addr, size)
	return p
}
func (s *sim) planAssociate(it item, tgt plugin.Ptr) (p Plan) {
	s.t.Associate(&p, &it.b, tgt)
	return p
}
func (s *sim) planDisassociate(addr uintptr) (p Plan) { s.t.Disassociate(&p, addr); return p }

// addr is the host address of arena[i].
func addr(i int) uintptr { return uintptr(unsafe.Pointer(&arena[i])) }

// fakeEvent is a copy's event: the table only keeps it and hands it back.
type fakeEvent struct{ closed bool }

func (e *fakeEvent) Synchronize() error   { return nil }
func (e *fakeEvent) Query() (bool, error) { return true, nil }
func (e *fakeEvent) Close() error         { e.closed = true; return nil }

// alloc is the fake device's allocation of size bytes.
func (s *sim) alloc(size int64) plugin.Ptr {
	s.next += 0x1000
	s.live[s.next] = size
	return s.next
}

// event is a new copy's event.
func (s *sim) event() plugin.Event {
	ev := &fakeEvent{}
	s.events = append(s.events, ev)
	return ev
}

var errCreate = errors.New("fake: allocation failed")

// sim is a fake device and the issuer's bookkeeping: live allocations,
// uses held by open constructs, creations not reported yet.
type sim struct {
	tb      testing.TB
	t       *Table
	next    plugin.Ptr
	live    map[plugin.Ptr]int64 // allocations not freed
	freed   int
	open    []*Entry   // uses of constructs not over
	pending []*Entry   // new entries whose creation is not reported yet
	copyIn  []bool     // pending's: plan says CopyIn
	entered []enterRef // counts moved by open constructs' enters, for Unref
	events  []*fakeEvent
	seen    map[*Entry]bool // every entry a plan used
}

type enterRef struct {
	e    *Entry
	hold bool
}

func newSim(tb testing.TB) *sim {
	return &sim{tb: tb, t: NewTable(), live: map[plugin.Ptr]int64{}, seen: map[*Entry]bool{}}
}

// take records a plan's use: the construct holds it until close.
func (s *sim) take(p Plan) {
	if p.Entry != nil && p.Do&Retry == 0 {
		s.open = append(s.open, p.Entry)
		s.seen[p.Entry] = true
	}
}

// create reports the creation of pending entry i: created, or failed (its
// allocation is freed, as the issuer frees it).
func (s *sim) create(i int, fail bool) {
	e, in := s.pending[i], s.copyIn[i]
	s.pending = append(s.pending[:i], s.pending[i+1:]...)
	s.copyIn = append(s.copyIn[:i], s.copyIn[i+1:]...)
	if fail {
		s.t.Failed(e, errCreate)
		return
	}
	var ev plugin.Event
	if in {
		ev = s.event()
	}
	s.t.Created(e, s.alloc(e.Size()), ev)
}

// enter plans it and does the plan; pending leaves a new entry's creation
// unreported.
func (s *sim) enter(it item, pending bool) Plan {
	p := s.planEnter(it)
	s.take(p)
	if p.Entry != nil {
		s.entered = append(s.entered, enterRef{p.Entry, it.typ&MapHold != 0})
	}
	if p.Do&Alloc != 0 {
		s.pending = append(s.pending, p.Entry)
		s.copyIn = append(s.copyIn, p.Do&CopyIn != 0)
		if !pending {
			s.create(len(s.pending)-1, false)
		}
	} else if p.Do&CopyIn != 0 && p.Do&Settle == 0 {
		s.copied(p.Entry)
	}
	return p
}

// copied reports a copy into e.
func (s *sim) copied(e *Entry) {
	if old := s.t.Copied(e, s.event()); old != nil {
		_ = old.Close()
	}
}

// close ends every open construct's uses, freeing what the table says.
func (s *sim) close() {
	s.closeFrom(0)
	s.entered = s.entered[:0]
}

// closeFrom ends the uses open[i:] (the constructs that took them are
// over), freeing what the table says.
// They end together (DoneAll), as a construct's do.
func (s *sim) closeFrom(i int) {
	for _, g := range s.t.DoneAll(s.open[i:], nil) {
		e, ev := g.Entry, g.Event
		if e.Owned() {
			if _, ok := s.live[e.Tgt()]; !ok {
				s.tb.Fatalf("entry [%#x, %#x) freed twice, or never allocated: Tgt=%#x", e.HstBegin, e.HstEnd, uint64(e.Tgt()))
			}
			delete(s.live, e.Tgt())
			s.freed++
		}
		if ev != nil {
			_ = ev.Close()
		}
	}
	s.open = s.open[:i]
}

// check verifies the table's invariants: entries in address order that
// overlap nothing, only entries being created or live in the tree, counts
// never negative, a live entry of the table referenced.
func (s *sim) check() {
	s.tb.Helper()
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	var prev *Entry
	s.t.tree.Ascend(func(k tkey) bool {
		e := k.e
		switch {
		case k.begin != e.HstBegin:
			s.tb.Fatalf("tree key %#x for entry at %#x", k.begin, e.HstBegin)
		case prev != nil && prev.HstEnd > e.HstBegin:
			s.tb.Fatalf("entries overlap: [%#x, %#x) and [%#x, %#x)", prev.HstBegin, prev.HstEnd, e.HstBegin, e.HstEnd)
		case e.state != creating && e.state != live:
			s.tb.Fatalf("entry [%#x, %#x) in the table in state %d", e.HstBegin, e.HstEnd, e.state)
		case e.dyn < 0 || e.hold < 0 || e.busy < 0:
			s.tb.Fatalf("entry [%#x, %#x): negative count: dyn %d hold %d busy %d", e.HstBegin, e.HstEnd, e.dyn, e.hold, e.busy)
		case e.state == live && e.dyn == 0 && e.hold == 0:
			s.tb.Fatalf("entry [%#x, %#x) live with no reference", e.HstBegin, e.HstEnd)
		}
		prev = e
		return true
	})
}

// idle verifies that nothing is in use: no construct holds an entry, and no
// entry out of the table holds device memory.
func (s *sim) idle() {
	s.tb.Helper()
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	for e := range s.seen {
		if e.busy != 0 {
			s.tb.Fatalf("entry [%#x, %#x): %d uses left with every construct over", e.HstBegin, e.HstEnd, e.busy)
		}
		if e.state == deleting {
			s.tb.Fatalf("entry [%#x, %#x) left the table and was never freed", e.HstBegin, e.HstEnd)
		}
	}
}
