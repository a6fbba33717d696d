package mapping

import (
	"testing"

	"github.com/goffload/offload/plugin"
)

// step is one call of a table test: a construct's item and the plan it must
// get, or a report of the issuer.
type step struct {
	op      string // enter, exit, update, use, associate, disassociate; create, fail (the oldest pending creation); unref (the last enter); close
	lo, hi  int    // the item's range of the arena
	typ     MapType
	open    bool // the construct's uses last until close (else they end with the step)
	pending bool // enter: the new entry's creation is reported later (create, fail)
	tgt     int  // associate: the device address (default 0x99000)

	do        Action // the plan wanted
	fault     Fault
	dyn, hold int64 // the plan's counts, checked when it has an Entry or a fault about Other
}

// span is an entry wanted at the end: arena[lo:hi] with its counts.
type span struct {
	lo, hi    int
	dyn, hold int64
}

const (
	to      = MapTo
	from    = MapFrom
	tofrom  = MapTo | MapFrom
	alloc   = MapType(0)
	release = MapType(0)
	always  = MapAlways
	present = MapPresent
	hold    = MapHold
	del     = MapDelete
)

var tableTests = []struct {
	name  string
	steps []step
	want  []span // the entries at the end
	freed int    // allocations freed
}{
	{"to allocates and copies in once; the last from copies out and frees", []step{
		{op: "enter", lo: 0, hi: 64, typ: to, do: Alloc | CopyIn, dyn: 1},
		{op: "enter", lo: 0, hi: 64, typ: tofrom, do: WaitCopy, dyn: 2},
		{op: "exit", lo: 0, hi: 64, typ: from, dyn: 1},
		{op: "exit", lo: 0, hi: 64, typ: from, do: Unmapped | CopyOut},
	}, nil, 1},
	{"alloc allocates without a copy; nothing to wait for", []step{
		{op: "enter", lo: 0, hi: 64, typ: alloc, do: Alloc, dyn: 1},
		{op: "enter", lo: 0, hi: 64, typ: alloc, dyn: 2},
		{op: "exit", lo: 0, hi: 64, typ: release, dyn: 1},
	}, []span{{0, 64, 1, 0}}, 0},
	{"always to copies into a present entry, which later maps wait for", []step{
		{op: "enter", lo: 0, hi: 64, typ: alloc, do: Alloc, dyn: 1},
		{op: "enter", lo: 0, hi: 64, typ: always | to, do: CopyIn, dyn: 2},
		{op: "enter", lo: 0, hi: 64, typ: to, do: WaitCopy, dyn: 3},
	}, []span{{0, 64, 3, 0}}, 0},
	{"always from copies out before the last reference; release never copies", []step{
		{op: "enter", lo: 0, hi: 64, typ: to, do: Alloc | CopyIn, dyn: 1},
		{op: "enter", lo: 0, hi: 64, typ: to, do: WaitCopy, dyn: 2},
		{op: "exit", lo: 0, hi: 64, typ: always | from, do: CopyOut, dyn: 1},
		{op: "exit", lo: 0, hi: 64, typ: release, do: Unmapped},
	}, nil, 1},
	{"delete drops the dynamic count at once, copying out with from", []step{
		{op: "enter", lo: 0, hi: 64, typ: to, do: Alloc | CopyIn, dyn: 1},
		{op: "enter", lo: 0, hi: 64, typ: to, do: WaitCopy, dyn: 2},
		{op: "enter", lo: 0, hi: 64, typ: to, do: WaitCopy, dyn: 3},
		{op: "exit", lo: 0, hi: 64, typ: del | from, do: Unmapped | CopyOut},
		{op: "exit", lo: 0, hi: 64, typ: from},
	}, nil, 1},
	{"present demands a mapping; without it an absent item is a no-op", []step{
		{op: "enter", lo: 0, hi: 64, typ: present | to, fault: NotPresent},
		{op: "exit", lo: 0, hi: 64, typ: present | from, fault: NotPresent},
		{op: "update", lo: 0, hi: 64, typ: present | to, fault: NotPresent},
		{op: "exit", lo: 0, hi: 64, typ: from},
		{op: "update", lo: 0, hi: 64, typ: to},
		{op: "enter", lo: 0, hi: 64, typ: to, do: Alloc | CopyIn, dyn: 1},
		{op: "enter", lo: 16, hi: 32, typ: present | to, do: WaitCopy, dyn: 2},
		{op: "update", lo: 16, hi: 32, typ: present | from, do: CopyOut, dyn: 2},
		{op: "update", lo: 16, hi: 32, typ: to, do: CopyIn, dyn: 2},
	}, []span{{0, 64, 2, 0}}, 0},
	{"a hold map has a count of its own, which delete does not drop", []step{
		{op: "enter", lo: 0, hi: 64, typ: hold | to, do: Alloc | CopyIn, hold: 1},
		{op: "enter", lo: 0, hi: 64, typ: to, do: WaitCopy, dyn: 1, hold: 1},
		{op: "exit", lo: 0, hi: 64, typ: del, hold: 1},
		{op: "exit", lo: 0, hi: 64, typ: hold | from, do: Unmapped | CopyOut},
	}, nil, 1},
	{"an association's count is infinite: maps never allocate, copy or free it", []step{
		{op: "associate", lo: 0, hi: 64, dyn: -1},
		{op: "associate", lo: 0, hi: 64},                                      // the same association again
		{op: "associate", lo: 0, hi: 64, tgt: 0x5000, fault: Mapped, dyn: -1}, // other memory
		{op: "associate", lo: 16, hi: 32, fault: Mapped, dyn: -1},
		{op: "enter", lo: 0, hi: 64, typ: to, dyn: -1},
		{op: "enter", lo: 8, hi: 16, typ: alloc, dyn: -1},
		{op: "exit", lo: 0, hi: 64, typ: del | from, dyn: -1},
		{op: "update", lo: 0, hi: 64, typ: to, do: CopyIn, dyn: -1},
		{op: "enter", lo: 0, hi: 64, typ: to, do: WaitCopy, dyn: -1},
		{op: "enter", lo: 0, hi: 64, typ: hold, do: WaitCopy, dyn: -1, hold: 1},
		{op: "disassociate", lo: 0, fault: Held, dyn: -1, hold: 1},
		{op: "exit", lo: 0, hi: 64, typ: hold | from, dyn: -1},
		{op: "disassociate", lo: 8, fault: NotPresent},
		{op: "disassociate", lo: 0, dyn: -1},
		{op: "disassociate", lo: 0, fault: NotPresent},
	}, nil, 0},
	{"only an association disassociates", []step{
		{op: "enter", lo: 0, hi: 64, typ: to, do: Alloc | CopyIn, dyn: 1},
		{op: "disassociate", lo: 0, fault: NotAssociated, dyn: 1},
		{op: "associate", lo: 0, hi: 64, fault: Mapped, dyn: 1},
	}, []span{{0, 64, 1, 0}}, 0},
	{"zero-length items move nothing", []step{
		{op: "enter", lo: 8, hi: 8, typ: to},
		{op: "enter", lo: 0, hi: 64, typ: to, do: Alloc | CopyIn, dyn: 1},
		{op: "enter", lo: 8, hi: 8, typ: present | to},
		{op: "exit", lo: 8, hi: 8, typ: del | from},
		{op: "update", lo: 8, hi: 8, typ: present | from},
		{op: "exit", lo: 100, hi: 100, typ: present | from},
	}, []span{{0, 64, 1, 0}}, 0},
	{"a section lies inside one mapping: one that extends it is a conflict", []step{
		{op: "enter", lo: 64, hi: 128, typ: to, do: Alloc | CopyIn, dyn: 1},
		{op: "enter", lo: 80, hi: 96, typ: to, do: WaitCopy, dyn: 2},
		{op: "enter", lo: 32, hi: 96, typ: to, fault: Conflict},    // extends it down
		{op: "enter", lo: 96, hi: 160, typ: to, fault: Conflict},   // extends it up
		{op: "enter", lo: 0, hi: 256, typ: to, fault: Conflict},    // covers it
		{op: "exit", lo: 32, hi: 96, typ: from, fault: Conflict},   // exit of a partly mapped range
		{op: "update", lo: 100, hi: 200, typ: to, fault: Conflict}, // update of one
		{op: "associate", lo: 120, hi: 130, fault: Conflict},
		{op: "enter", lo: 128, hi: 192, typ: to, do: Alloc | CopyIn, dyn: 1}, // adjacent
		{op: "enter", lo: 0, hi: 64, typ: alloc, do: Alloc, dyn: 1},
		{op: "exit", lo: 80, hi: 96, typ: release, dyn: 1},
	}, []span{{0, 64, 1, 0}, {64, 128, 1, 0}, {128, 192, 1, 0}}, 0},
	{"a new map of an entry being deleted makes a new entry at once", []step{
		{op: "enter", lo: 0, hi: 64, typ: to, do: Alloc | CopyIn, dyn: 1},
		{op: "exit", lo: 0, hi: 64, typ: from, open: true, do: Unmapped | CopyOut}, // its copy out still queued
		{op: "enter", lo: 0, hi: 64, typ: to, do: Alloc | CopyIn, dyn: 1},
		{op: "exit", lo: 0, hi: 64, typ: from, do: Unmapped | CopyOut},
		{op: "enter", lo: 0, hi: 64, typ: to, do: Alloc | CopyIn, dyn: 1},
		{op: "close"}, // the first copy out is done: its entry is freed
	}, []span{{0, 64, 1, 0}}, 2},
	{"maps of an entry being created wait for it to settle; exits retry", []step{
		{op: "enter", lo: 0, hi: 64, typ: to, open: true, pending: true, do: Alloc | CopyIn, dyn: 1},
		{op: "enter", lo: 0, hi: 64, typ: tofrom, open: true, do: Settle | WaitCopy, dyn: 2},
		{op: "enter", lo: 0, hi: 64, typ: always | to, open: true, do: Settle | CopyIn, dyn: 3},
		{op: "exit", lo: 0, hi: 64, typ: from, do: Retry},
		{op: "use", lo: 0, hi: 64, do: Retry},
		{op: "update", lo: 0, hi: 64, typ: to},                              // not mapped yet: skipped
		{op: "update", lo: 0, hi: 64, typ: present | to, fault: NotPresent}, // the present modifier says so
		{op: "create"},
		{op: "exit", lo: 0, hi: 64, typ: from, dyn: 2},
		{op: "use", lo: 8, hi: 16, do: WaitCopy, dyn: 2},
		{op: "close"},
	}, []span{{0, 64, 2, 0}}, 0},
	{"a failed creation takes the entry out; a new map tries again", []step{
		{op: "enter", lo: 0, hi: 64, typ: to, open: true, pending: true, do: Alloc | CopyIn, dyn: 1},
		{op: "enter", lo: 0, hi: 64, typ: to, open: true, do: Settle | WaitCopy, dyn: 2},
		{op: "fail"},
		{op: "exit", lo: 0, hi: 64, typ: present | from, fault: NotPresent},
		{op: "use", lo: 0, hi: 64},
		{op: "close"}, // the failed entry's uses end: nothing to free
		{op: "enter", lo: 0, hi: 64, typ: to, do: Alloc | CopyIn, dyn: 1},
	}, []span{{0, 64, 1, 0}}, 0},
	{"unref takes back a failed construct's reference; the last one unmaps", []step{
		{op: "enter", lo: 0, hi: 64, typ: to, do: Alloc | CopyIn, dyn: 1},
		{op: "enter", lo: 0, hi: 64, typ: to, open: true, do: WaitCopy, dyn: 2},
		{op: "unref"},
		{op: "close"},
		{op: "enter", lo: 64, hi: 128, typ: hold | to, open: true, do: Alloc | CopyIn, hold: 1},
		{op: "unref"},
		{op: "enter", lo: 64, hi: 128, typ: to, do: Alloc | CopyIn, dyn: 1}, // a new entry: the old one is deleting
		{op: "close"},
	}, []span{{0, 64, 1, 0}, {64, 128, 1, 0}}, 1},
}

func TestTable(t *testing.T) {
	for _, tt := range tableTests {
		t.Run(tt.name, func(t *testing.T) {
			s := newSim(t)
			for i, st := range tt.steps {
				s.run(t, i, st)
				s.check()
			}
			s.close()
			s.check()
			s.idle()
			var got []span
			for _, e := range s.t.Snapshot() {
				lo := int(e.HstBegin - addr(0))
				got = append(got, span{lo, lo + int(e.Size), e.Dyn, e.Hold})
			}
			if len(got) != len(tt.want) {
				t.Fatalf("entries at the end: %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("entries at the end: %v, want %v", got, tt.want)
				}
			}
			if s.freed != tt.freed {
				t.Errorf("%d allocations freed, want %d", s.freed, tt.freed)
			}
			if n := len(s.live) - len(got); n != 0 {
				t.Errorf("%d allocations neither freed nor in an entry", n)
			}
		})
	}
}

// run does step i and checks its plan.
func (s *sim) run(t *testing.T, i int, st step) {
	t.Helper()
	n := len(s.open)
	var p Plan
	switch st.op {
	case "enter":
		p = s.enter(at(st.lo, st.hi, st.typ), st.pending)
	case "exit":
		p = s.planExit(at(st.lo, st.hi, st.typ))
		s.take(p)
	case "update":
		p = s.planUpdate(at(st.lo, st.hi, st.typ))
		s.take(p)
		if p.Do&CopyIn != 0 {
			s.copied(p.Entry)
		}
	case "use":
		p = s.planUse(addr(st.lo), int64(st.hi-st.lo))
		s.take(p)
	case "associate":
		tgt := st.tgt
		if tgt == 0 {
			tgt = 0x99000
		}
		p = s.planAssociate(at(st.lo, st.hi, 0), plugin.Ptr(tgt))
	case "disassociate":
		p = s.planDisassociate(addr(st.lo))
	case "create", "fail":
		s.create(0, st.op == "fail")
		return
	case "unref":
		r := s.entered[len(s.entered)-1]
		s.entered = s.entered[:len(s.entered)-1]
		s.t.Unref(r.e, r.hold)
		return
	case "close":
		s.close()
		return
	default:
		t.Fatalf("step %d: unknown op %q", i, st.op)
	}
	if p.Do != st.do || p.Fault != st.fault {
		t.Fatalf("step %d (%s [%d, %d) %#x): plan %v, fault %v; want %v, fault %v", i, st.op, st.lo, st.hi, st.typ, p.Do, p.Fault, st.do, st.fault)
	}
	if (p.Entry != nil || p.Fault == Mapped || p.Fault == NotAssociated || p.Fault == Held) && (p.Dyn != st.dyn || p.Hold != st.hold) {
		t.Fatalf("step %d (%s [%d, %d)): DynRefCount=%d HoldRefCount=%d, want %d %d", i, st.op, st.lo, st.hi, p.Dyn, p.Hold, st.dyn, st.hold)
	}
	if !st.open {
		s.closeFrom(n)
	}
}

// TestPresentMapAllocatesNothing: the plans of a map of a present entry
// (a target region's maps of a buffer mapped already), and the end of its
// uses, allocate nothing.
func TestPresentMapAllocatesNothing(t *testing.T) {
	s := newSim(t)
	s.enter(at(0, 64, to), false)
	s.close()
	b := at(0, 64, 0).b
	var p, q Plan
	n := testing.AllocsPerRun(100, func() {
		s.t.Enter(&p, &b, tofrom)
		s.t.Exit(&q, &b, from)
		s.t.Done(p.Entry)
		s.t.Done(q.Entry)
	})
	if n != 0 {
		t.Errorf("Enter, Exit and Done of a present entry: %v allocations, want 0", n)
	}
	var gone [2]Gone
	n = testing.AllocsPerRun(100, func() {
		s.t.Enter(&p, &b, tofrom)
		s.t.Exit(&q, &b, from)
		if g := s.t.DoneAll([]*Entry{p.Entry, q.Entry}, gone[:0]); len(g) != 0 {
			t.Fatalf("DoneAll of a present entry's uses: %d entries gone, want 0", len(g))
		}
	})
	if n != 0 {
		t.Errorf("Enter, Exit and DoneAll of a present entry: %v allocations, want 0", n)
	}
}

// BenchmarkPresentMap is the table's part of a target region's map of a
// present buffer: Enter, Exit and the end of both uses.
func BenchmarkPresentMap(b *testing.B) {
	s := newSim(b)
	s.enter(at(0, 64, to), false)
	s.close()
	buf := at(0, 64, 0).b
	var p, q Plan
	for b.Loop() {
		s.t.Enter(&p, &buf, tofrom)
		s.t.Exit(&q, &buf, from)
		s.t.Done(p.Entry)
		s.t.Done(q.Entry)
	}
}
