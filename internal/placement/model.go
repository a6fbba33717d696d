package placement

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
	"time"
)

// Model chooses a device for each task by its expected finish time, as
// StarPU's dmda scheduler does: for each device, the work already placed
// there and not finished, plus the copies the task would need there, plus
// the kernel's expected time there; the smallest wins. Kernel times are
// learned per kernel, per device and per size (a power of two of the bytes
// the task uses), as the median of what the latest tasks took; a copy costs
// a fixed latency and bandwidth (CopyCost: not learned yet). A kernel not yet timed on a device is tried there
// first (one task at a time), so that every device gets measured.
//
// A Model is not safe for concurrent use.
type Model struct {
	ndev    int
	pending []time.Duration // expected work placed on each device and not finished
	busy    []int           // tasks placed on each device and not finished
	last    []time.Time     // when each device last finished a task
	exec    map[execKey]*avg
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

// medianOf is how many of a kernel's latest times on a device its
// estimate is the median of: a time that includes a wait (the device
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

// The link figures a copy's cost is counted with: about what a copy
// between two processes of one machine takes.
const (
	copyLatency = 30 * time.Microsecond
	copyBPS     = 4e9
)

// NewModel returns a model of ndev devices (0 to ndev-1).
func NewModel(ndev int) *Model {
	return &Model{
		ndev:    ndev,
		pending: make([]time.Duration, ndev),
		busy:    make([]int, ndev),
		last:    make([]time.Time, ndev),
		exec:    map[execKey]*avg{},
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
// (Host or a device): the same for every pair until links are measured.
func (m *Model) CopyCost(from, to int, n int64) time.Duration {
	return copyLatency + time.Duration(float64(n)/copyBPS*float64(time.Second))
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
	Queued time.Duration // of which the work already placed there
	Copies time.Duration // the copies the task needs there
	Exec   time.Duration // and the kernel itself
	Trial  bool          // the kernel was not timed there yet: tried
}

// String says why: "device 1: expected to finish in … (queued …, copies
// …, kernel …)".
func (c Choice) String() string {
	if c.Trial {
		return fmt.Sprintf("device %d: the kernel was not timed there yet", c.Dev)
	}
	return fmt.Sprintf("device %d: expected to finish in %v (queued %v, copies %v, kernel %v)", c.Dev, c.Finish, c.Queued, c.Copies, c.Exec)
}

// Choose returns the device where a task of kernel, of size class size,
// is expected to finish first; copies(d) is the cost of the copies it
// needs on d. Devices for which ok(d) is false are left out (lost ones);
// it returns -1 if none is left.
//
// Kernel times within sameSpeed (25%) of the fastest device's count as the
// fastest's: devices of one speed, whose learned times differ by noise,
// would otherwise see their queued work drift apart by that noise with
// every task placed ahead, until moving the data looked worth it (the
// bands of a stencil would hop between two equal devices).
func (m *Model) Choose(kernel string, size int, copies func(d int) time.Duration, ok func(d int) bool) Choice {
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
		c := Choice{Dev: d, Queued: m.pending[d], Copies: copies(d), Exec: est}
		c.Finish = c.Queued + c.Copies + c.Exec
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

// Placed records that a task expected to take est was placed on d.
func (m *Model) Placed(d int, est time.Duration) {
	m.pending[d] += est
	m.busy[d]++
}

// Done records that a task of kernel, size class size, placed on d with
// the estimate est at time placed, finished at end. Its time on the device
// is counted from when it could start there at the earliest: when it was
// placed, when the device's previous task finished, or when the last task
// it waited for finished (ready, zero if unknown), whichever is latest: a
// task that waits for its inputs must not teach the model that its kernel
// is slow.
func (m *Model) Done(kernel string, d, size int, est time.Duration, placed, ready, end time.Time) {
	m.pending[d] = max(0, m.pending[d]-est)
	m.busy[d]--
	start := placed
	if m.last[d].After(start) {
		start = m.last[d]
	}
	if ready.After(start) {
		start = ready
	}
	if end.After(m.last[d]) {
		m.last[d] = end
	}
	if m.busy[d] == 0 {
		m.pending[d] = 0 // what the estimates left over
	}
	k := execKey{kernel, d, size}
	a := m.exec[k]
	if a == nil || a.n < 0 {
		a = &avg{}
		m.exec[k] = a
	}
	a.add(max(end.Sub(start), time.Microsecond))
}
