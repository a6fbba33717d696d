package mapping

import (
	"testing"

	"github.com/goffload/offload/plugin"
)

// FuzzPresentTable runs a sequence of random calls on a table — enters,
// exits, updates and uses of overlapping ranges with any map type,
// associations, creations reported late or failed, rollbacks, constructs
// ending — and checks the table's invariants after each: entries overlap
// nothing, counts are never negative, a live entry is referenced. Then it
// ends every construct and unmaps everything: the table must be empty and
// every allocation freed exactly once.
func FuzzPresentTable(f *testing.F) {
	f.Add([]byte{0, 0x14, 0x01, 2, 0x14, 0x02})                                             // to, then from
	f.Add([]byte{0x10, 0x14, 0x01, 0, 0x14, 0x03, 2, 0x14, 0x02, 5, 0, 0, 7, 0, 0})         // a pending creation, a map waiting for it, an exit retried
	f.Add([]byte{0x10, 0x14, 0x01, 0, 0x14, 0x01, 0x15, 0, 0, 7, 0, 0, 0, 0x14, 0x01})      // a failed creation, mapped again
	f.Add([]byte{0, 0x14, 0x01, 0x02, 0x14, 0x02, 0, 0x14, 0x01, 7, 0, 0})                  // unmapped while a new map comes in
	f.Add([]byte{8, 0x24, 0, 0, 0x24, 0x20, 9, 0x24, 0, 2, 0x24, 0x20, 9, 0x20, 0})         // an association held by a region
	f.Add([]byte{0, 0x14, 0x01, 0, 0x22, 0x01, 0, 0x10, 0x21, 6, 0, 0, 3, 0x18, 0x01})      // overlaps, a rollback, an update
	f.Add([]byte{0, 0x14, 0x21, 0, 0x14, 0x05, 2, 0x14, 0x08, 2, 0x14, 0x22, 4, 0x14, 0x0}) // hold, always, delete, a use
	f.Fuzz(func(t *testing.T, ops []byte) {
		if len(ops) > 3*200 {
			ops = ops[:3*200]
		}
		s := newSim(t)
		for ; len(ops) >= 3; ops = ops[3:] {
			s.step(ops[0], ops[1], ops[2])
			s.check()
		}
		s.unmapAll()
	})
}

// fuzzTypes are the map type bits the fuzzer sets.
const fuzzTypes = MapTo | MapFrom | MapAlways | MapDelete | MapPresent | MapHold

// step does one fuzzed call: op picks the call, rb the range (16-byte
// aligned begin, size a multiple of 8, zero included), tb the map type.
func (s *sim) step(op, rb, tb byte) {
	lo := int(rb>>4) * 16
	hi := lo + int(rb&15)*8
	it := at(lo, hi, MapType(tb)&fuzzTypes)
	switch op % 10 {
	case 0, 1:
		s.enter(it, op&0x10 != 0)
	case 2:
		s.take(s.planExit(it)) // Retry: the issuer waits and plans again; here nothing happens
	case 3:
		p := s.planUpdate(it)
		s.take(p)
		if p.Do&CopyIn != 0 {
			s.copied(p.Entry)
		}
	case 4:
		s.take(s.planUse(it.b.Addr(), it.b.Size))
	case 5:
		if len(s.pending) > 0 {
			s.create(int(tb)%len(s.pending), op&0x10 != 0)
		}
	case 6:
		if n := len(s.entered); n > 0 {
			r := s.entered[n-1]
			s.entered = s.entered[:n-1]
			s.t.Unref(r.e, r.hold)
		}
	case 7:
		s.close()
	case 8:
		if it.b.Size > 0 {
			s.planAssociate(it, plugin.Ptr(0x10000000+lo))
		}
	case 9:
		s.planDisassociate(it.b.Addr())
	}
}

// unmapAll reports every pending creation, ends every construct, then
// unmaps every entry (hold counts first, then delete, or disassociate) and
// checks that nothing is left: no entry, no use, no allocation.
func (s *sim) unmapAll() {
	for len(s.pending) > 0 {
		s.create(0, false)
	}
	s.close()
	s.check()
	for i := 0; s.t.Len() > 0; i++ {
		if i > 1000 {
			s.tb.Fatalf("the table does not empty: %+v", s.t.Snapshot())
		}
		s.t.mu.Lock()
		k, _ := s.t.tree.Min()
		e, inf, held := k.e, isInf(k.e.dyn), k.e.hold > 0
		s.t.mu.Unlock()
		it := item{b: Buf{Ptr: e.keep, Size: e.Size()}}
		switch {
		case held:
			it.typ = MapHold
			s.take(s.planExit(it))
		case inf:
			if p := s.planDisassociate(e.HstBegin); p.Fault != OK {
				s.tb.Fatalf("disassociate of an association with no hold: %v", p.Fault)
			}
		default:
			it.typ = MapDelete | MapFrom
			if p := s.planExit(it); p.Do&(Unmapped|CopyOut) != Unmapped|CopyOut {
				s.tb.Fatalf("exit delete of the entry [%#x, %#x): plan %v, want Unmapped|CopyOut", e.HstBegin, e.HstEnd, p.Do)
			} else {
				s.take(p)
			}
		}
		s.close()
		s.check()
	}
	s.idle()
	if len(s.live) != 0 {
		s.tb.Fatalf("%d allocations never freed with the table empty", len(s.live))
	}
}
