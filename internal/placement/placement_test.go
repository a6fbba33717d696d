package placement

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestTableAgainstModel drives a table with random tasks on random
// devices, executing the copies it plans on a model of every place's
// memory (a version number per buffer per place), and checks that every
// task reads the latest version of each input, that Stale names exactly
// the buffers whose host copy is old, and that a lost device's only copies
// are reported.
func TestTableAgainstModel(t *testing.T) {
	const ndev, nbuf = 3, 5
	for seed := range 50 {
		r := rand.New(rand.NewPCG(uint64(seed), 1))
		tb := NewTable()
		bufs := make([]Buf, nbuf)
		for i := range bufs {
			bufs[i] = Buf{Addr: uintptr(0x1000 * (i + 1)), Size: 64}
		}
		latest := make([]int, nbuf) // the version the program has written last
		have := map[[2]int]int{}    // (place+1, buf) → version held there
		mapped := map[[2]int]bool{} // (dev, buf) → memory there
		for b := range nbuf {
			have[[2]int{0, b}] = 0 // the host holds version 0
		}
		lost := map[int]bool{}
		for step := range 200 {
			d := r.IntN(ndev)
			if lost[d] {
				continue
			}
			var acc []Access
			perm := r.Perm(nbuf)[:1+r.IntN(3)]
			for _, b := range perm {
				w := r.IntN(3)
				acc = append(acc, Access{Buf: bufs[b], Read: w != 1, Write: w != 0})
			}
			copies, alloc, err := tb.Plan(d, acc, func(from, to int, b Buf) float64 { return float64(r.IntN(10)) })
			if err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			for _, b := range alloc {
				mapped[[2]int{d, idx(bufs, b)}] = true
			}
			for _, c := range copies {
				b := idx(bufs, c.Buf)
				if !mapped[[2]int{d, b}] {
					t.Fatalf("seed %d step %d: copy into device %d before its memory", seed, step, d)
				}
				v, ok := have[[2]int{c.From + 1, b}]
				if !ok || v != latest[b] {
					t.Fatalf("seed %d step %d: buffer %d copied from %d, which holds version %d (ok %v), latest %d", seed, step, b, c.From, v, ok, latest[b])
				}
				have[[2]int{d + 1, b}] = v
			}
			for _, a := range acc {
				b := idx(bufs, a.Buf)
				if a.Read && have[[2]int{d + 1, b}] != latest[b] {
					t.Fatalf("seed %d step %d: device %d reads buffer %d at version %d, latest %d", seed, step, d, b, have[[2]int{d + 1, b}], latest[b])
				}
			}
			tb.Commit(d, acc, 1)
			for _, a := range acc {
				if a.Write {
					b := idx(bufs, a.Buf)
					latest[b]++
					have[[2]int{d + 1, b}] = latest[b]
				}
			}
			// Now and then: the host copies back what is stale.
			if r.IntN(10) == 0 {
				for _, c := range tb.Stale() {
					b := idx(bufs, c.Buf)
					if have[[2]int{c.From + 1, b}] != latest[b] {
						t.Fatalf("seed %d step %d: stale buffer %d copied back from %d, which is not the latest", seed, step, b, c.From)
					}
					have[[2]int{0, b}] = latest[b]
					tb.HostValid(c.Buf)
				}
			}
			for b := range nbuf {
				_, host := tb.Valid(bufs[b])
				if host != (have[[2]int{0, b}] == latest[b]) {
					t.Fatalf("seed %d step %d: buffer %d host valid %v, model says host version %d of %d", seed, step, b, host, have[[2]int{0, b}], latest[b])
				}
			}
			if step == 150 && !lost[(d+1)%ndev] {
				ld := (d + 1) % ndev
				lost[ld] = true
				gone := tb.Lost(ld)
				for b := range nbuf {
					devs, host := tb.Valid(bufs[b])
					only := !host && len(devs) == 0
					if only != contains(gone, bufs[b]) {
						t.Fatalf("seed %d: after losing device %d, buffer %d: no copy left %v, reported %v", seed, ld, b, only, contains(gone, bufs[b]))
					}
				}
				if len(gone) > 0 {
					break // lineage would recompute them: out of the table's scope
				}
			}
		}
	}
}

func idx(bufs []Buf, b Buf) int {
	for i, c := range bufs {
		if c == b {
			return i
		}
	}
	return -1
}

func contains(bs []Buf, b Buf) bool {
	for _, c := range bs {
		if c == b {
			return true
		}
	}
	return false
}

// TestTableRefusesOverlap: a section that partly overlaps a tracked buffer
// is refused; disjoint sections and the same one are not; Release forgets
// everything and says where memory was.
func TestTableRefusesOverlap(t *testing.T) {
	tb := NewTable()
	a := Buf{Addr: 0x1000, Size: 64}
	tb.Commit(0, []Access{{Buf: a, Read: true}}, 1)
	if _, _, err := tb.Plan(1, []Access{{Buf: Buf{Addr: 0x1020, Size: 64}, Read: true}}, nil); !errors.Is(err, ErrOverlap) {
		t.Errorf("overlapping section: %v, want ErrOverlap", err)
	}
	if _, _, err := tb.Plan(1, []Access{{Buf: Buf{Addr: 0x1040, Size: 64}, Read: true}, {Buf: a, Read: true}}, nil); err != nil {
		t.Errorf("disjoint section and the same one: %v", err)
	}
	if _, _, err := tb.Plan(1, []Access{{Buf: a, Read: true}, {Buf: a, Write: true}}, nil); err == nil {
		t.Error("a task reading and writing one buffer through two parameters: no error")
	}
	if _, _, err := tb.Plan(1, []Access{{Buf: a, Read: true}, {Buf: Buf{Addr: a.Addr, Size: 32}, Read: true}}, nil); err == nil {
		t.Error("a task reading a buffer and a part of it through two parameters: no error")
	}
	// Reading one section through two parameters is one read: one copy.
	if copies, alloc, err := tb.Plan(1, []Access{{Buf: a, Read: true}, {Buf: a, Read: true}}, nil); err != nil || len(copies) != 1 || len(alloc) != 1 {
		t.Errorf("a task reading one buffer through two parameters: copies %v, alloc %v, %v; want one of each", copies, alloc, err)
	}
	rel := tb.Release()
	if len(rel) != 1 || len(rel[a]) != 1 || rel[a][0] != 0 || tb.Len() != 0 {
		t.Errorf("Release = %v, Len %d", rel, tb.Len())
	}
}

// TestModelChooses: every device is tried once per kernel and size; then
// the faster device takes the tasks until its queue makes the slower one
// finish first; copies count; a lost device is left out.
func TestModelChooses(t *testing.T) {
	m := NewModel(2)
	none := func(int) time.Duration { return 0 }
	t0 := time.Unix(1000, 0)
	for d := range 2 {
		c := m.Choose(t0, "k", 3, time.Time{}, none, nil)
		if !c.Trial || c.Dev != d {
			t.Fatalf("choice %d = %+v, want a trial on device %d", d, c, d)
		}
		m.Placed(t0, c)
	}
	m.Done("k", 0, 3, t0, time.Time{}, t0.Add(1*time.Millisecond))
	// Device 1's task waited 6 ms for its inputs, then ran 4 ms: the
	// wait is not the kernel's.
	m.Done("k", 1, 3, t0.Add(-6*time.Millisecond), t0, t0.Add(4*time.Millisecond))
	var on [2]int
	now := t0.Add(4 * time.Millisecond) // both devices idle
	for range 10 {
		c := m.Choose(now, "k", 3, time.Time{}, none, nil)
		m.Placed(now, c)
		on[c.Dev]++
	}
	if on[0] != 8 || on[1] != 2 {
		t.Errorf("10 tasks of 1 ms on device 0 and 4 ms on device 1 went %v, want [8 2]", on)
	}
	m = timedModel(t0, "k", 3, time.Millisecond, time.Millisecond)
	if c := m.Choose(t0, "k", 3, time.Time{}, func(d int) time.Duration { return time.Duration(1-d) * time.Millisecond }, nil); c.Dev != 1 {
		t.Errorf("with copies of 1 ms to device 0 only: %+v, want device 1", c)
	}
	if c := m.Choose(t0, "k", 3, time.Time{}, none, func(d int) bool { return d != 0 }); c.Dev != 1 {
		t.Errorf("device 0 lost: %+v, want device 1", c)
	}
	if c := m.Choose(t0, "k", 3, time.Time{}, none, func(int) bool { return false }); c.Dev != -1 {
		t.Errorf("every device lost: %+v, want -1", c)
	}
}

// TestTableSectionsAgainstModel is TestTableAgainstModel with sections:
// each buffer is first used whole (or, for odd seeds, named whole first
// with Track, valid on the host only), then tasks read and write random
// sections of it (slots of 8 bytes), and the model keeps a version per slot
// per place. Every task must read the latest version of every slot it
// reads, copies must come from places holding the latest version, and Stale
// must name exactly the slots whose host copy is old. Host tasks (PlanHost,
// CommitHost) are among the tasks.
func TestTableSectionsAgainstModel(t *testing.T) {
	const ndev, nbuf, slots = 3, 3, 8
	for seed := range 100 {
		r := rand.New(rand.NewPCG(uint64(seed), 2))
		tb := NewTable()
		base := func(b int) uintptr { return uintptr(0x10000 * (b + 1)) }
		latest := make([][slots]int, nbuf)
		writer := make([][slots]int64, nbuf)
		have := map[[3]int]int{} // (place+1, buf, slot) → version
		slotOf := func(addr uintptr) (int, int) { return int(addr/0x10000) - 1, int(addr%0x10000) / 8 }
		section := func(b, lo, hi int) Buf { return Buf{Addr: base(b) + uintptr(8*lo), Size: uintptr(8 * (hi - lo))} }
		for b := range nbuf { // first use: whole, on device 0, read only
			if seed%2 == 1 { // or named whole first (Track): valid on the host only
				if region, made, err := tb.Track(section(b, 0, slots)); err != nil || !made || region != section(b, 0, slots) {
					t.Fatalf("Track: %v %v %v", region, made, err)
				}
				if _, made, err := tb.Track(section(b, 2, 4)); err != nil || made {
					t.Fatalf("Track of a section inside: %v %v", made, err)
				}
				for d := range ndev {
					for s := range slots {
						have[[3]int{d + 1, b, s}] = -1 // no copy
					}
				}
				continue
			}
			acc := []Access{{Buf: section(b, 0, slots), Read: true}}
			copies, _, err := tb.Plan(0, acc, nil)
			if err != nil || len(copies) != 1 || copies[0].From != Host {
				t.Fatalf("first use: %v %v", copies, err)
			}
			tb.Commit(0, acc, 1)
			for s := range slots {
				have[[3]int{1, b, s}] = 0
			}
		}
		for step := range 300 {
			d := r.IntN(ndev+1) - 1 // Host: a host task
			b := r.IntN(nbuf)
			lo := r.IntN(slots)
			hi := lo + 1 + r.IntN(slots-lo)
			w := r.IntN(3)
			acc := []Access{{Buf: section(b, lo, hi), Read: w != 1, Write: w != 0}}
			var copies []Copy
			var err error
			if d == Host {
				copies, err = tb.PlanHost(acc)
			} else {
				copies, _, err = tb.Plan(d, acc, func(from, to int, b Buf) float64 { return float64(r.IntN(10)) })
			}
			if err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			for _, c := range copies {
				for a := c.Buf.Addr; a < c.Buf.Addr+c.Buf.Size; a += 8 {
					cb, cs := slotOf(a)
					if v := have[[3]int{c.From + 1, cb, cs}]; v != latest[cb][cs] {
						t.Fatalf("seed %d step %d: slot %d.%d copied from %d at version %d, latest %d", seed, step, cb, cs, c.From, v, latest[cb][cs])
					}
					have[[3]int{d + 1, cb, cs}] = latest[cb][cs]
				}
			}
			if w != 1 {
				for s := lo; s < hi; s++ {
					if have[[3]int{d + 1, b, s}] != latest[b][s] {
						t.Fatalf("seed %d step %d: device %d reads slot %d.%d at version %d, latest %d", seed, step, d, b, s, have[[3]int{d + 1, b, s}], latest[b][s])
					}
				}
			}
			// The lineage: each slot read names the task that wrote its
			// latest version (0: none yet).
			if w != 1 {
				n := uintptr(0)
				for _, p := range tb.Writers(acc[0].Buf) {
					for a := p.Buf.Addr; a < p.Buf.Addr+p.Buf.Size; a += 8 {
						cb, cs := slotOf(a)
						if p.Writer != writer[cb][cs] {
							t.Fatalf("seed %d step %d: slot %d.%d written last by task %d, Writers says %d", seed, step, cb, cs, writer[cb][cs], p.Writer)
						}
						n += 8
					}
				}
				if n != acc[0].Buf.Size {
					t.Fatalf("seed %d step %d: Writers covers %d bytes of %d", seed, step, n, acc[0].Buf.Size)
				}
			}
			id := int64(step + 2)
			if d == Host {
				tb.CommitHost(acc, id)
			} else {
				tb.Commit(d, acc, id)
			}
			if w != 0 {
				for s := lo; s < hi; s++ {
					latest[b][s]++
					have[[3]int{d + 1, b, s}] = latest[b][s]
					writer[b][s] = id
				}
			}
			if r.IntN(8) == 0 {
				stale := map[[2]int]bool{}
				for _, c := range tb.Stale() {
					for a := c.Buf.Addr; a < c.Buf.Addr+c.Buf.Size; a += 8 {
						cb, cs := slotOf(a)
						stale[[2]int{cb, cs}] = true
						if have[[3]int{c.From + 1, cb, cs}] != latest[cb][cs] {
							t.Fatalf("seed %d step %d: slot %d.%d copied back from %d, not the latest", seed, step, cb, cs, c.From)
						}
						have[[3]int{0, cb, cs}] = latest[cb][cs]
					}
					tb.HostValid(c.Buf)
				}
				for cb := range nbuf {
					for cs := range slots {
						if want := latest[cb][cs] != 0 && !stale[[2]int{cb, cs}] && have[[3]int{0, cb, cs}] != latest[cb][cs]; want {
							t.Fatalf("seed %d step %d: slot %d.%d is old on the host but Stale left it out", seed, step, cb, cs)
						}
					}
				}
			}
		}
		// A section that sticks out of its region is refused, by Track too.
		if _, _, err := tb.Plan(0, []Access{{Buf: Buf{Addr: base(0) + 8, Size: 8 * slots}, Read: true}}, nil); !errors.Is(err, ErrOverlap) {
			t.Fatalf("a section past its region's end: %v, want ErrOverlap", err)
		}
		if _, _, err := tb.Track(Buf{Addr: base(0) - 8, Size: 16}); !errors.Is(err, ErrOverlap) {
			t.Fatalf("Track of a section past its region's start: %v, want ErrOverlap", err)
		}
	}
}

// TestEvictable: a region whose only valid copy of some part is on the
// device cannot be dropped there; one whose parts are valid elsewhere too
// can, largest first, and not the ones the task being placed needs; after
// Drop, the device needs a copy again.
func TestEvictable(t *testing.T) {
	tb := NewTable()
	a, b, c := Buf{Addr: 0x1000, Size: 64}, Buf{Addr: 0x2000, Size: 128}, Buf{Addr: 0x3000, Size: 32}
	tb.Commit(0, []Access{{Buf: a, Read: true}}, 1)              // valid on the host and device 0
	tb.Commit(0, []Access{{Buf: b, Read: true}}, 2)              // the same
	tb.Commit(0, []Access{{Buf: c, Read: true, Write: true}}, 3) // device 0 only
	if got := tb.Evictable(0, nil); !slices.Equal(got, []Buf{b, a}) {
		t.Errorf("Evictable = %v, want [b a] (largest first, not c)", got)
	}
	if got := tb.Evictable(0, []Buf{b}); !slices.Equal(got, []Buf{a}) {
		t.Errorf("Evictable keeping b = %v, want [a]", got)
	}
	if got := tb.Evictable(1, nil); len(got) != 0 {
		t.Errorf("Evictable on a device that holds nothing = %v", got)
	}
	tb.Drop(0, b)
	copies, alloc, err := tb.Plan(0, []Access{{Buf: b, Read: true}}, nil)
	if err != nil || len(copies) != 1 || copies[0].From != Host || !slices.Equal(alloc, []Buf{b}) {
		t.Errorf("after Drop: copies %v alloc %v err %v, want a copy from the host and memory again", copies, alloc, err)
	}
	// Half of a region written on device 0 only: not evictable.
	tb.Commit(0, []Access{{Buf: Buf{Addr: a.Addr, Size: 32}, Read: true, Write: true}}, 4)
	if got := tb.Evictable(0, nil); len(got) != 0 {
		t.Errorf("Evictable with a part of a valid on device 0 only = %v", got)
	}
}

// TestModelEqualDevicesKeepTheirData: two devices whose learned times for
// a kernel differ by noise (5%), and tasks placed far ahead of their
// completion, each reading data that lives on one device (moving it costs
// 2 ms): every task stays with its data. Before, the queued work drifted
// apart by the noise until a move looked worth it.
func TestModelEqualDevicesKeepTheirData(t *testing.T) {
	t0 := time.Unix(1000, 0)
	m := timedModel(t0, "band", 5, 1000*time.Microsecond, 1050*time.Microsecond)
	moves := 0
	for i := range 400 {
		home := i % 2 // band i%2's data is on device home
		c := m.Choose(t0, "band", 5, time.Time{}, func(d int) time.Duration {
			if d == home {
				return 0
			}
			return 2 * time.Millisecond
		}, nil)
		if c.Dev != home {
			moves++
		}
		m.Placed(t0, c)
	}
	if moves != 0 {
		t.Errorf("%d of 400 tasks left their data for a device 5%% faster", moves)
	}
	// A device twice as fast still wins work once its queue allows.
	m = timedModel(t0, "k", 5, 1000*time.Microsecond, 2000*time.Microsecond)
	var on [2]int
	for range 30 {
		c := m.Choose(t0, "k", 5, time.Time{}, func(int) time.Duration { return 0 }, nil)
		on[c.Dev]++
		m.Placed(t0, c)
	}
	if on[0] != 20 || on[1] != 10 {
		t.Errorf("30 tasks on devices of 1 ms and 2 ms went %v, want [20 10]", on)
	}
}

// TestModelDoneBesideOthers: a long kernel that short tasks ran beside
// (they could start only after it) is timed whole; tasks that queued behind
// one another (each could start when the first did) are each timed from the
// end of the one before.
func TestModelDoneBesideOthers(t *testing.T) {
	m := NewModel(1)
	t0 := time.Unix(1000, 0)
	ms := func(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Millisecond))) }
	m.busy[0] = 5
	// The long one could start at 0 and ends at 4; two short ones could
	// start at 1 and 2 and end at 1.1 and 2.1, beside it.
	m.Done("short", 0, 1, ms(1), time.Time{}, ms(1.1))
	m.Done("short", 0, 1, ms(2), time.Time{}, ms(2.1))
	m.Done("long", 0, 9, t0, time.Time{}, ms(4))
	if est, _ := m.Estimate("long", 0, 9); est != 4*time.Millisecond {
		t.Errorf("the long kernel with short tasks beside it: %v, want 4ms", est)
	}
	// Two more placed at 4 together, run one after the other: 1 ms each.
	m.Done("k", 0, 3, ms(4), time.Time{}, ms(5))
	m.Done("k", 0, 3, ms(4), time.Time{}, ms(6))
	if est, _ := m.Estimate("k", 0, 3); est != time.Millisecond {
		t.Errorf("two tasks queued together, ending 1 ms apart: %v, want 1ms", est)
	}
}

// TestModelRanTakesTheDevicesTime: a device that reports the ends of
// queued tasks together makes all but the first look as if they took no
// time (each one's start is the end of the one before, which came with
// it); the time the device measured (Ran) is learned instead. Without
// one, Done's rule stands.
func TestModelRanTakesTheDevicesTime(t *testing.T) {
	m := NewModel(1)
	t0 := time.Unix(1000, 0)
	ms := func(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Millisecond))) }
	m.busy[0] = 4
	// Three placed together at 0, run one after another; their ends
	// seen at 6 (one notice).
	for range 3 {
		m.Done("k", 0, 3, t0, time.Time{}, ms(6))
	}
	if est, _ := m.Estimate("k", 0, 3); est != time.Microsecond {
		t.Fatalf("ends seen together, by the host's clock: %v, want the floor of 1µs (the rule Ran corrects)", est)
	}
	m = NewModel(1)
	m.busy[0] = 4
	for range 3 {
		m.Ran("k", 0, 3, t0, time.Time{}, ms(6), 2*time.Millisecond)
	}
	if est, _ := m.Estimate("k", 0, 3); est != 2*time.Millisecond {
		t.Errorf("ends seen together, timed by the device at 2ms each: %v, want 2ms", est)
	}
	m.Ran("j", 0, 3, t0, time.Time{}, ms(1.5), 0) // not timed there: Done's rule
	if est, _ := m.Estimate("j", 0, 3); est != 1500*time.Microsecond {
		t.Errorf("a task the device did not time: %v, want 1.5ms", est)
	}
}

// TestModelReadyPerInput: HEFT's data-ready time, a copy per input. A
// stencil's edge task reads two rows written late on device 1 (by the
// band there) and a row written early on device 0 (by the other band's
// edge task); a copy of either costs the link's 1 ms latency. On device 1
// its inputs are there when the late rows are written (the early row's
// copy is made long before); on device 0 only once those are copied too.
// Counted as the last input's time plus all the copies, both devices
// would tie, and the task would go either way.
func TestModelReadyPerInput(t *testing.T) {
	t0 := time.Unix(1000, 0)
	m := timedModel(t0, "edge", 3, 100*time.Microsecond, 100*time.Microsecond)
	m.Copied(0, 1, 1024, t0.Add(time.Millisecond), time.Time{}, t0.Add(2*time.Millisecond)) // the link: 1 ms
	now := t0.Add(time.Second)
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	m.Expect(1, now, Choice{Dev: 1, Finish: ms(10)}) // the band on device 1
	m.Expect(2, now, Choice{Dev: 0, Finish: ms(1)})  // the edge task on device 0
	late, early := Buf{Addr: 0x1000, Size: 256}, Buf{Addr: 0x1100, Size: 128}
	reads := [][]Piece{{{Buf: late, Writer: 1}, {Buf: early, Writer: 2}}}
	copies := [][]Copy{{{Buf: late, Region: late, From: 1, To: 0}}, {{Buf: early, Region: early, From: 0, To: 1}}}
	cl, ce := m.CopyCost(1, 0, 256), m.CopyCost(0, 1, 128) // 1 ms and some ns
	for d, want := range []struct{ at, cost time.Duration }{{ms(10) + cl, cl}, {ms(10), ce}} {
		if at, cost := m.Ready(now, reads, copies[d]); at.Sub(now) != want.at || cost != want.cost {
			t.Errorf("inputs on device %d in %v, copies %v; want %v, %v", d, at.Sub(now), cost, want.at, want.cost)
		}
	}
	c := m.ChooseReady(now, "edge", 3, func(d int) (time.Time, time.Duration) { return m.Ready(now, reads, copies[d]) }, nil)
	if c.Dev != 1 || c.Finish != ms(10.1) {
		t.Errorf("ChooseReady: %v, want device 1 ending in 10.1ms", c)
	}
	if old := m.Choose(now, "edge", 3, m.Inputs([]int64{1, 2}), func(int) time.Duration { return ms(1) }, nil); old.Finish != ms(11.1) {
		t.Errorf("Choose, the last input's time plus the copies: %v, want 11.1ms on either device", old)
	}
}

// TestModelInputsKeepTasksWithTheirData: the Jacobi pattern placed far
// ahead. Two devices whose learned kernel times differ by a third; each
// step, two bands, each reading its own rows (on its device; moving them
// costs 8 ms) and a halo row of the other's (0.1 ms to copy), written by
// the step before. The devices wait for each other's results, so the
// faster one is not free sooner: each band stays with its data for 500
// steps. Without the inputs' expected ends, the faster device's queue
// looked shorter and shorter until the bands moved to it.
func TestModelInputsKeepTasksWithTheirData(t *testing.T) {
	t0 := time.Unix(1000, 0)
	m := timedModel(t0, "band", 5, 3*time.Millisecond, 4*time.Millisecond)
	now := t0.Add(4 * time.Millisecond)
	var id int64
	prev := [2]int64{}
	moves := 0
	for step := range 500 {
		var cur [2]int64
		for band := range 2 {
			c := m.Choose(now, "band", 5, m.Inputs(prev[:]), func(d int) time.Duration {
				if d == band {
					return 100 * time.Microsecond
				}
				return 8 * time.Millisecond
			}, nil)
			if c.Dev != band {
				moves++
				if moves == 1 {
					t.Logf("step %d, band %d: %v", step, band, c)
				}
			}
			id++
			m.Placed(now, c)
			m.Expect(id, now, c)
			cur[band] = id
		}
		prev = cur
	}
	if moves != 0 {
		t.Errorf("%d of 1000 bands left their data", moves)
	}
	if m.Expected() != 1000 {
		t.Errorf("Expected() = %d after 1000 tasks placed, want 1000", m.Expected())
	}
	for i := range id {
		m.Forget(i + 1)
	}
	if m.Expected() != 0 {
		t.Errorf("Expected() = %d after every task ended, want 0", m.Expected())
	}
}

// TestModelLearnsCopies: a copy's cost is the fixed link figures until
// copies between its places (either way) were timed; then a learned
// latency, from small copies counted from the end of the source's task
// they waited behind, and a learned bandwidth, from large ones. A larger
// copy never costs less than a smaller one.
func TestModelLearnsCopies(t *testing.T) {
	m := NewModel(2)
	t0 := time.Unix(1000, 0)
	us := func(n float64) time.Time { return t0.Add(time.Duration(n * float64(time.Microsecond))) }
	fixed := m.CopyCost(0, 1, 16<<10)
	if fixed != copyLatency+time.Duration(float64(16<<10)/copyBPS*float64(time.Second)) {
		t.Fatalf("untimed copy: %v", fixed)
	}
	// A kernel on device 0 could start at 0 and ran to 5 ms; the copy
	// from device 0, ready at 1 ms, waited behind it and ended 300 µs
	// after it.
	m.busy[0] = 1
	m.Done("k", 0, 9, t0, time.Time{}, us(5000))
	m.Copied(0, 1, 16<<10, t0, us(1000), us(5300))
	perMiB := time.Duration(float64(1<<20) / copyBPS * float64(time.Second))
	if got, want := m.CopyCost(0, 1, 16<<10), 300*time.Microsecond+perMiB/64; got != want {
		t.Errorf("timed copy: %v, want %v", got, want)
	}
	if got, want := m.CopyCost(1, 0, 16<<10), m.CopyCost(0, 1, 16<<10); got != want {
		t.Errorf("the other way: %v, want the same %v", got, want)
	}
	if got := m.CopyCost(0, 1, 32<<10); got <= m.CopyCost(0, 1, 16<<10) {
		t.Errorf("32 KiB: %v, not more than 16 KiB's %v", got, m.CopyCost(0, 1, 16<<10))
	}
	// 16 MiB from the host in 30 µs (the fixed latency: none timed
	// there) + 2 ms: 125 µs per MiB.
	m.Copied(Host, 1, 16<<20, t0, time.Time{}, us(2030))
	if got, want := m.CopyCost(1, Host, 32<<20), copyLatency+32*125*time.Microsecond; got != want {
		t.Errorf("32 MiB after a 16 MiB copy: %v, want %v", got, want)
	}
}

// timedModel is a model of two devices that has timed one task of kernel,
// of size class size, on each, placed at t0 and taking d0 and d1; nothing
// is placed on them, and neither is expected busy.
func timedModel(t0 time.Time, kernel string, size int, d0, d1 time.Duration) *Model {
	m := NewModel(2)
	m.Done(kernel, 0, size, t0, time.Time{}, t0.Add(d0))
	m.Done(kernel, 1, size, t0, time.Time{}, t0.Add(d1))
	m.busy = []int{0, 0}
	return m
}
