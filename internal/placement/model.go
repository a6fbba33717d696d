package placement

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"time"
)

// Model chooses a device for each task by its expected finish time, as
// HEFT and StarPU's dmda scheduler do. On each device, the task starts once
// the device has done the work placed there before it and its inputs are
// there. An input is there once the task that writes it is expected to
// end, and once it is copied if the device's copy is not valid. The task
// ends the kernel's expected time later. The earliest end wins.
//
// Kernel times are learned per kernel, per device and per size, as the
// median of what the latest tasks took. The size is a power of two of the
// bytes the task uses. Copies' costs are learned as a latency and a
// bandwidth per pair of places (CopyCost). A kernel not yet timed on a
// device is tried there first, one task at a time, so that every device
// gets measured.
//
// A Model is not safe for concurrent use.
type Model struct {
	ndev  int
	avail []time.Time // when each device is expected to have done the work placed there
	busy  []int       // tasks placed on each device and not finished
	ran   [][]span    // each device's latest tasks: when each could start and ended (a ring)
	nran  []int       // tasks recorded in ran, per device
	exec  map[execKey]*avg
	ends  map[int64]time.Time // when each placed task not finished is expected to end, by its id (Expect)
	links map[linkKey]*link   // copies' times, learned per pair of places (Copied)
}

// linkKey is a pair of places (Host or a device), the lower first: a link
// is taken to cost the same both ways, so that the copies of each
// direction teach the model about both.
type linkKey struct{ a, b int }

func linkOf(from, to int) linkKey { return linkKey{min(from, to), max(from, to)} }

// link is what the copies between two places took: the latency of small
// copies, and the time per MiB of large ones beyond it.
type link struct {
	lat    avg
	perMiB avg
}

// latency is l's learned latency, or the fixed one (l may be nil).
func (l *link) latency() time.Duration {
	if l != nil && l.lat.n > 0 {
		return l.lat.d
	}
	return copyLatency
}

// later is the later of placed and ready (zero if unknown): when a task
// made at placed whose inputs were written at ready could start.
func later(placed, ready time.Time) time.Time {
	if ready.After(placed) {
		return ready
	}
	return placed
}

type execKey struct {
	kernel string
	dev    int
	size   int
}

type avg struct {
	d    time.Duration // the estimate: the median of recent
	n    int           // samples taken (-1: a trial under way)
	last [medianOf]time.Duration
}

// span is when a finished task could start on its device at the earliest
// and when it ended.
type span struct{ start, end time.Time }

// spansKept is how many of a device's latest tasks Done looks back on.
const spansKept = 32

// medianOf is how many of a kernel's latest times on a device its
// estimate is the median of. A time that includes a wait (the device
// shared with another kernel, a late notice of the end) moves a median
// little, where it moved a mean.
const medianOf = 7

func (a *avg) add(d time.Duration) {
	a.last[a.n%medianOf] = d
	a.n++
	k := min(a.n, medianOf)
	s := make([]time.Duration, k)
	copy(s, a.last[:k])
	slices.Sort(s)
	a.d = s[k/2]
}

// The link figures a copy's cost is counted with until copies between its
// two places were timed (Copied): about what a copy between two processes
// of one machine takes.
const (
	copyLatency = 30 * time.Microsecond
	copyBPS     = 4e9
)

// NewModel returns a model of ndev devices (0 to ndev-1).
func NewModel(ndev int) *Model {
	return &Model{
		ndev:  ndev,
		avail: make([]time.Time, ndev),
		busy:  make([]int, ndev),
		ran:   make([][]span, ndev),
		nran:  make([]int, ndev),
		exec:  map[execKey]*avg{},
		ends:  map[int64]time.Time{},
		links: map[linkKey]*link{},
	}
}

// SizeClass is the size class of a task that uses n bytes.
func SizeClass(n int64) int {
	if n <= 0 {
		return 0
	}
	return bits.Len64(uint64(n))
}

// CopyCost is the expected time of a copy of n bytes between two places
// (Host or a device): a latency and a time per byte.
// They are learned from the copies between the places, either way, as the
// medians of the latest. The latency is the median of small copies' times.
// The bandwidth comes from larger copies' times beyond the latency.
// Until copies are timed, they are 30 µs and 4 GB/s.
//
// A copy's time is counted from when it could start to its end as the
// program saw it. That is what a task that waits for the copy waits: the
// hand-offs on both sides and the link. The cost is a latency and a
// bandwidth, not a time per size, so a copy of more bytes never looks
// cheaper. The placement's choices between devices that need copies of a
// few rows each turn on that.
func (m *Model) CopyCost(from, to int, n int64) time.Duration {
	l := m.links[linkOf(from, to)]
	perMiB := time.Duration(float64(1<<20) / copyBPS * float64(time.Second))
	if l != nil && l.perMiB.n > 0 {
		perMiB = l.perMiB.d
	}
	return l.latency() + time.Duration(float64(n)/(1<<20)*float64(perMiB))
}

// smallCopy is the size of the copies that time a link's latency (at most
// it) and its bandwidth (larger ones).
const smallCopy = 64 << 10

// Copied records a copy of n bytes from one place to another (Host or a
// device). The copy was made at placed, its inputs were written at ready
// (zero if unknown), and it ended at end.
// A device's copies to others run in its queue. So a copy's time is
// counted from when the source's tasks that could start before it ended
// (Done's rule), not from when its data was written. A copy that waited
// behind the source's next kernel is not a slow link.
func (m *Model) Copied(from, to int, n int64, placed, ready, end time.Time) {
	start := later(placed, ready)
	if from >= 0 && from < m.ndev {
		start = m.startOn(from, start, end)
	}
	d := max(end.Sub(start), time.Microsecond)
	k := linkOf(from, to)
	l := m.links[k]
	if l == nil {
		l = &link{}
		m.links[k] = l
	}
	switch {
	case n <= smallCopy:
		l.lat.add(d)
	default:
		l.perMiB.add(max(time.Duration(float64(d-l.latency())/(float64(n)/(1<<20))), time.Nanosecond))
	}
}

// Estimate returns the expected time of kernel on device d for a task of
// size class size, and whether it was measured.
func (m *Model) Estimate(kernel string, d, size int) (time.Duration, bool) {
	if a := m.exec[execKey{kernel, d, size}]; a != nil && a.n > 0 {
		return a.d, true
	}
	return 0, false
}

// Choice is a placement and why it was made, for the trace and the info
// output.
type Choice struct {
	Dev    int
	Finish time.Duration // the expected finish time, from now
	Queued time.Duration // until the work already placed there is done
	Inputs time.Duration // when its inputs are expected there: written, and copied where needed
	Copies time.Duration // the copies the task needs there, summed
	Exec   time.Duration // and the kernel itself
	Trial  bool          // the kernel was not timed there yet: tried
}

// String says why: "device 1: expected to finish in … (queued …, copies
// …, kernel …)".
func (c Choice) String() string {
	if c.Trial {
		return fmt.Sprintf("device %d: the kernel was not timed there yet", c.Dev)
	}
	if c.Inputs > 0 {
		return fmt.Sprintf("device %d: expected to finish in %v (queued %v, inputs there in %v, copies %v, kernel %v)", c.Dev, c.Finish, c.Queued, c.Inputs, c.Copies, c.Exec)
	}
	return fmt.Sprintf("device %d: expected to finish in %v (queued %v, copies %v, kernel %v)", c.Dev, c.Finish, c.Queued, c.Copies, c.Exec)
}

// Choose returns the device where a task of kernel, of size class size,
// is expected to finish first. copies(d) is the cost of the copies it
// needs on d. inputs is when the tasks that write its inputs are expected
// to end (Inputs; zero: written). Choice's times are from now.
// Devices for which ok(d) is false, such as lost ones, are left out.
// Choose returns -1 if none is left.
//
// A task starts on d when d has done the work placed there before it (its
// queue) and its inputs are there: written, then copied. That is HEFT's
// earliest start time, without its insertion into gaps. Tasks may be
// placed far ahead of their completion, as by a program that makes every
// iteration's tasks at once. There, a queue counted as the sum of its
// tasks' kernel times, as dmda counts it, grows though the devices wait
// for each other's results. The device whose kernel times were learned a
// little shorter looked free ever sooner, until tasks left their data for
// it.
//
// Kernel times within sameSpeed (25%) of the fastest device's count as the
// fastest's. Devices of one speed have learned times that differ by noise.
// Otherwise their queued work would drift apart by that noise with every
// task placed ahead, until moving the data looked worth it. The bands of a
// stencil would hop between two equal devices.
func (m *Model) Choose(now time.Time, kernel string, size int, inputs time.Time, copies func(d int) time.Duration, ok func(d int) bool) Choice {
	return m.ChooseReady(now, kernel, size, func(d int) (time.Time, time.Duration) {
		c := copies(d)
		return later(now, inputs).Add(c), c
	}, ok)
}

// ChooseReady is Choose with the time a task's inputs are on each device
// given input by input. ready(d) returns when they all are there, and the
// copies' summed cost. Each input is written, then copied where d's copy
// is not valid. A copy starts when the tasks that write its part end, not
// when the last of all the task's inputs is written.
// It is HEFT's data-ready time, a communication per predecessor.
// Take a task that reads a large part written late and a small part
// written early. On the device that holds the large part, it is ready when
// that part is written. On another device, it is ready only once the large
// part is copied too.
func (m *Model) ChooseReady(now time.Time, kernel string, size int, ready func(d int) (time.Time, time.Duration), ok func(d int) bool) Choice {
	best := Choice{Dev: -1, Finish: math.MaxInt64}
	ests := make([]time.Duration, m.ndev)
	fastest := time.Duration(math.MaxInt64)
	for d := range m.ndev {
		if ok != nil && !ok(d) {
			continue
		}
		est, timed := m.Estimate(kernel, d, size)
		if !timed {
			// Not timed here yet: try it here, unless a trial is
			// running here already (then the others go on as they
			// would).
			if !m.trying(kernel, d, size) {
				m.startTrial(kernel, d, size)
				return Choice{Dev: d, Trial: true}
			}
			est = m.guess(kernel, size)
		}
		ests[d] = est
		fastest = min(fastest, est)
	}
	for d := range m.ndev {
		if ok != nil && !ok(d) {
			continue
		}
		est := ests[d]
		if float64(est) <= float64(fastest)*sameSpeed {
			est = fastest
		}
		at, cost := ready(d)
		c := Choice{Dev: d, Queued: max(0, m.avail[d].Sub(now)), Inputs: max(0, at.Sub(now)), Copies: cost, Exec: est}
		c.Finish = max(c.Queued, c.Inputs) + c.Exec
		if c.Finish < best.Finish || (c.Finish == best.Finish && m.busy[d] < m.busy[best.Dev]) {
			best = c
		}
	}
	return best
}

// sameSpeed is how much slower than the fastest a device's kernel time
// may be and still count as the fastest's (Choose).
const sameSpeed = 1.25

func (m *Model) trying(kernel string, d, size int) bool {
	a := m.exec[execKey{kernel, d, size}]
	return a != nil && a.n < 0
}

func (m *Model) startTrial(kernel string, d, size int) {
	m.exec[execKey{kernel, d, size}] = &avg{n: -1}
}

// guess is a kernel's expected time on a device where it was not timed
// yet: its mean on the devices where it was, or nothing.
func (m *Model) guess(kernel string, size int) time.Duration {
	var sum time.Duration
	n := 0
	for d := range m.ndev {
		if a := m.exec[execKey{kernel, d, size}]; a != nil && a.n > 0 {
			sum += a.d
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / time.Duration(n)
}

// Expect records that task id is expected to end c.Finish after now, for
// the tasks that read what it writes (Inputs). id is a number the caller
// gives each task. The record holds until Forget.
func (m *Model) Expect(id int64, now time.Time, c Choice) {
	if !c.Trial && c.Dev >= 0 {
		m.ends[id] = now.Add(c.Finish)
	}
}

// Forget drops what Expect recorded of task id: it ended.
func (m *Model) Forget(id int64) { delete(m.ends, id) }

// Inputs returns when the latest of tasks ids is expected to end: zero if
// each has ended, or is not known (Expect).
func (m *Model) Inputs(ids []int64) time.Time {
	var in time.Time
	for _, id := range ids {
		if at, ok := m.ends[id]; ok && at.After(in) {
			in = at
		}
	}
	return in
}

// Ready is when a task has its inputs on a device, and the copies' summed
// cost: ChooseReady's ready. reads are the task's inputs' parts, with the
// tasks that wrote them (Table.Writers). copies are the copies it needs on
// the device (Table.Plan's). A part that is not copied is there once its
// writer is expected to end (Inputs). A copied part is there once the
// writers of its part have ended and the copy is made (CopyCost).
func (m *Model) Ready(now time.Time, reads [][]Piece, copies []Copy) (time.Time, time.Duration) {
	at, sum := now, time.Duration(0)
	var ws []int64
	for _, c := range copies {
		ws = ws[:0]
		for _, ps := range reads {
			for _, p := range ps {
				if p.Writer != 0 && p.Buf.Overlaps(c.Buf) {
					ws = append(ws, p.Writer)
				}
			}
		}
		cost := m.CopyCost(c.From, c.To, int64(c.Buf.Size))
		sum += cost
		at = later(at, later(now, m.Inputs(ws)).Add(cost))
	}
	for _, ps := range reads {
		for _, p := range ps {
			if p.Writer != 0 && !slices.ContainsFunc(copies, func(c Copy) bool { return c.Buf.Overlaps(p.Buf) }) {
				at = later(at, m.ends[p.Writer]) // zero once it ended
			}
		}
	}
	return at, sum
}

// Expected is how many tasks Expect recorded and Forget did not drop.
func (m *Model) Expected() int { return len(m.ends) }

// Placed records that a task was placed by choice c, made at now: the
// device is expected to be busy until it ends.
func (m *Model) Placed(now time.Time, c Choice) {
	m.busy[c.Dev]++
	if !c.Trial {
		m.avail[c.Dev] = now.Add(c.Finish)
	}
}

// startOn is when a task of device d, which could start at s and ended at
// end, started by the device's latest tasks. It is the latest end, before
// end, of those that could start at s or before: it waited behind them.
func (m *Model) startOn(d int, s, end time.Time) time.Time {
	start := s
	for _, r := range m.ran[d] {
		if !r.start.After(s) && !r.end.After(end) && r.end.After(start) {
			start = r.end
		}
	}
	return start
}

// Done records that a task of kernel, size class size, placed on d at
// time placed, finished at end. Its time on the device is counted from
// when it could start there at the earliest. That is the latest of:
//   - when it was placed;
//   - when the last task it waited for finished (ready, zero if unknown);
//   - when a task of d that could start before it ended.
//
// A task that waits for its inputs, or behind another in the device's
// queue, must not teach the model that its kernel is slow.
// A task that could start only after it and ended first ran beside it: a
// device runs tasks that do not wait for each other at once. Such a task
// does not move its start. So a long kernel that short ones ran beside is
// not taken for a short one.
func (m *Model) Done(kernel string, d, size int, placed, ready, end time.Time) {
	m.Ran(kernel, d, size, placed, ready, end, 0)
}

// Ran is Done with the kernel's time as the device measured it (took).
// took is 0 if the device did not measure it; then Done's rule counts it.
// A device may report its tasks' ends together, or late. Then only its own
// clock says how long a short kernel ran.
func (m *Model) Ran(kernel string, d, size int, placed, ready, end time.Time, took time.Duration) {
	m.busy[d]--
	s := later(placed, ready)
	start := m.startOn(d, s, end)
	ran := m.ran[d]
	if len(ran) < spansKept {
		m.ran[d] = append(ran, span{s, end})
	} else {
		ran[m.nran[d]%spansKept] = span{s, end}
	}
	m.nran[d]++
	if m.busy[d] == 0 {
		m.avail[d] = end // nothing left there, however long it was expected to take
	}
	k := execKey{kernel, d, size}
	a := m.exec[k]
	if a == nil || a.n < 0 {
		a = &avg{}
		m.exec[k] = a
	}
	if took <= 0 {
		took = end.Sub(start)
	}
	a.add(max(took, time.Microsecond))
}
