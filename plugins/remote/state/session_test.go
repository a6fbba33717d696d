package state

import (
	"errors"
	"testing"

	"github.com/goffload/offload/plugin"
)

var errKernel = errors.New("kernel failed")

func tells(t *testing.T, got []Tell, want ...Tell) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("tells %+v, want %+v", got, want)
	}
	for i := range got {
		if got[i].Notify != want[i].Notify || !errors.Is(got[i].Err, want[i].Err) {
			t.Fatalf("tell %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestPeerHearsOnceTheHostHasTheData: an event fires after two retrieves
// went out; the peer waiting on it hears only when the host acknowledged
// both, whether it asked before the event fired or after.
func TestPeerHearsOnceTheHostHasTheData(t *testing.T) {
	s := NewSession[int]()
	if err := s.Record(1, 10); err != nil {
		t.Fatal(err)
	}
	early, late := Notify{Peer: 2, Wait: 7}, Notify{Peer: 3, Wait: 8}
	tells(t, s.Notify(1, early, 0))
	s.Sent(1)
	s.Sent(2)
	tells(t, s.Fire(1, errKernel)) // held: the host has neither retrieve
	tells(t, s.Notify(1, late, 0)) // held too
	s.Sent(3)                      // after the event: not waited for
	tells(t, s.Acked())
	tells(t, s.Acked(), Tell{early, errKernel}, Tell{late, errKernel})
	tells(t, s.Acked())
	if s.Len() != 1 {
		t.Errorf("Len %d, want the one event", s.Len())
	}
}

// TestRetrievesCountInWireOrder: a retrieve numbered later can be reported
// before an earlier one (two queues); the count is the highest number.
func TestRetrievesCountInWireOrder(t *testing.T) {
	s := NewSession[int]()
	s.Record(1, 0)
	s.Sent(2)
	s.Sent(1)
	tells(t, s.Notify(1, Notify{1, 1}, 0))
	tells(t, s.Fire(1, nil))
	tells(t, s.Acked())
	tells(t, s.Acked(), Tell{Notify{1, 1}, nil})
}

func TestNotifyOfUnknownEvent(t *testing.T) {
	s := NewSession[int]()
	tells(t, s.Notify(5, Notify{1, 2}, 0), Tell{Notify{1, 2}, plugin.ErrNotRecorded})
	if s.Len() != 0 {
		t.Errorf("an unknown event left %d entries", s.Len())
	}
}

func TestRecordTwice(t *testing.T) {
	s := NewSession[int]()
	s.Record(1, 0)
	if err := s.Record(1, 0); !errors.Is(err, plugin.ErrBadHandle) {
		t.Errorf("second record: %v", err)
	}
}

// TestEndSendsWhatWasHeld: at the session's end the host acknowledges
// nothing more; held tells go, and later ones are not held.
func TestEndSendsWhatWasHeld(t *testing.T) {
	s := NewSession[int]()
	s.Record(1, 0)
	s.Record(2, 0)
	s.Notify(1, Notify{1, 1}, 0)
	s.Sent(1)
	tells(t, s.Fire(1, nil))
	tells(t, s.End(), Tell{Notify{1, 1}, nil})
	s.Notify(2, Notify{1, 2}, 0)
	tells(t, s.Fire(2, nil), Tell{Notify{1, 2}, nil})
}

// TestForgetShrinks: events the host forgets leave the table, and a wait
// or notify naming them finds nothing.
func TestForgetShrinks(t *testing.T) {
	s := NewSession[int]()
	for id := uint64(1); id <= 100; id++ {
		s.Record(id, int(id))
		s.Fire(id, nil)
	}
	ids := make([]uint64, 100)
	for i := range ids {
		ids[i] = uint64(i + 1)
	}
	s.Forget(ids)
	if s.Len() != 0 {
		t.Errorf("Len %d after forgetting every event", s.Len())
	}
	if _, ok := s.Event(3); ok {
		t.Error("a forgotten event is still there")
	}
}

// FuzzSession drives a session's table with arbitrary inputs and checks
// its rules against a model: every tell is for a notify of a fired event,
// told once, and only when the host had every retrieve sent before the
// event fired (or the session ended); at the end, every notify of a fired
// event was told.
func FuzzSession(f *testing.F) {
	f.Add([]byte{0, 1, 3, 1, 4, 1, 2, 1, 5, 5, 6})
	f.Add([]byte{0, 1, 4, 1, 4, 1, 2, 1, 3, 5, 3, 5, 5, 7, 1, 6})
	f.Fuzz(func(t *testing.T, ops []byte) {
		s := NewSession[int]()
		type ev struct {
			recorded, fired bool
			need            uint64
			notifies        map[Notify]bool // told?
		}
		evs := map[uint64]*ev{}    // by event id, while the table has it
		byWait := map[uint64]*ev{} // by notify: an event forgotten while its tells are held is still told
		var sent, acked uint64
		ended := false
		wait := uint64(0)
		check := func(now []Tell) {
			for _, tl := range now {
				if tl.Wait >= 1<<32 { // an unknown event's answer
					continue
				}
				e := byWait[tl.Wait]
				if e == nil || !e.fired {
					t.Fatalf("tell %+v for an event that did not fire", tl)
				}
				if told, ok := e.notifies[tl.Notify]; !ok || told {
					t.Fatalf("tell %+v: not asked for, or told twice", tl)
				}
				if acked < e.need && !ended {
					t.Fatalf("tell %+v with %d of %d retrieves acknowledged", tl, acked, e.need)
				}
				e.notifies[tl.Notify] = true
			}
		}
		for len(ops) >= 2 {
			op, id := ops[0]%8, uint64(ops[1]%4)
			ops = ops[2:]
			e := evs[id]
			switch op {
			case 0:
				if e == nil {
					e = &ev{notifies: map[Notify]bool{}}
					evs[id] = e
				}
				err := s.Record(id, int(id))
				if (err == nil) == e.recorded {
					t.Fatalf("record %d: %v, recorded before: %v", id, err, e.recorded)
				}
				e.recorded = true
			case 1:
				if e != nil && e.recorded && !e.fired {
					e.fired, e.need = true, sent
					check(s.Fire(id, nil))
				}
			case 2:
				sent++
				s.Sent(sent)
			case 3:
				if acked < sent {
					acked++
					check(s.Acked())
				}
			case 4:
				wait++
				n := Notify{Peer: 1, Wait: id<<16 | wait}
				if e == nil || !e.recorded {
					n.Wait |= 1 << 32
					if now := s.Notify(id, n, 0); len(now) != 1 || !errors.Is(now[0].Err, plugin.ErrNotRecorded) {
						t.Fatalf("notify of unknown event %d: %+v", id, now)
					}
					continue
				}
				e.notifies[n] = false
				byWait[n.Wait] = e
				check(s.Notify(id, n, 0))
			case 5:
				ended = true
				check(s.End())
			case 6:
				if e != nil && e.fired { // the host forgets only events that fired
					s.Forget([]uint64{id})
					delete(evs, id)
				}
			}
		}
		for acked < sent {
			acked++
			check(s.Acked())
		}
		for _, e := range byWait {
			for n, told := range e.notifies {
				if e.fired && !told {
					t.Fatalf("an event fired, %+v never told", n)
				}
			}
		}
	})
}
