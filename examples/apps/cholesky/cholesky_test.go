package cholesky

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/goffload/offload"
	"github.com/goffload/offload/role"
	"github.com/goffload/offload/tool"
)

// TestMain serves as a device in the device processes TestFactorAny's
// local devices start (this test binary, run again).
func TestMain(m *testing.M) {
	role.ServeDevice()
	os.Exit(m.Run())
}

// TestFactor factors on two host devices and on one, and checks L against
// the plain-Go factorization and L Lᵀ against the matrix itself.
func TestFactor(t *testing.T) {
	if err := offload.Start(offload.WithDevices("host:2")); err != nil {
		t.Fatal(err)
	}
	defer offload.Stop()
	for _, c := range []struct{ t, b int }{{1, 5}, {3, 4}, {5, 7}} {
		want := NewMatrix(c.t, c.b)
		Reference(want, 2)
		for _, devs := range [][]offload.Device{{offload.On(0), offload.On(1)}, {offload.On(1)}} {
			m := NewMatrix(c.t, c.b)
			tasks, _, err := Factor(devs, m)
			if err != nil {
				t.Fatalf("%d×%d tiles of %d on %d devices: %v", c.t, c.t, c.b, len(devs), err)
			}
			if wantTasks := c.t * (c.t + 1) * (c.t + 2) / 6; tasks != wantTasks {
				t.Errorf("%d tasks, want %d", tasks, wantTasks)
			}
			if err := Check(m, want); err != nil {
				t.Errorf("%d×%d tiles of %d on %d devices: %v", c.t, c.t, c.b, len(devs), err)
			}
			checkProduct(t, m, NewMatrix(c.t, c.b))
		}
	}
	// A matrix that is not positive definite fails in potrf, with an error.
	m := NewMatrix(2, 3)
	m.Tile(0, 0)[0] = -1
	if _, _, err := Factor([]offload.Device{offload.On(0)}, m); !errors.Is(err, offload.ErrKernelFailed) {
		t.Errorf("factoring a matrix that is not positive definite: %v; want ErrKernelFailed", err)
	}
}

// TestFactorAny factors with Any-tasks on two host devices and on two
// device processes, and checks L as TestFactor does; a matrix that is not
// positive definite fails with an error.
func TestFactorAny(t *testing.T) {
	for _, devices := range []string{"host:2", "local:2"} {
		if err := offload.Start(offload.WithDevices(devices), offload.WithOffload("MANDATORY")); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct{ t, b int }{{1, 5}, {4, 6}} {
			want := NewMatrix(c.t, c.b)
			Reference(want, 2)
			m := NewMatrix(c.t, c.b)
			tasks, _, err := FactorAny(m)
			if err != nil {
				t.Fatalf("%s: %d×%d tiles of %d: %v", devices, c.t, c.t, c.b, err)
			}
			if wantTasks := c.t * (c.t + 1) * (c.t + 2) / 6; tasks != wantTasks {
				t.Errorf("%d tasks, want %d", tasks, wantTasks)
			}
			if err := Check(m, want); err != nil {
				t.Errorf("%s: %d×%d tiles of %d: %v", devices, c.t, c.t, c.b, err)
			}
		}
		m := NewMatrix(2, 3)
		m.Tile(0, 0)[0] = -1
		if _, _, err := FactorAny(m); !errors.Is(err, offload.ErrKernelFailed) {
			t.Errorf("%s: factoring a matrix that is not positive definite: %v; want ErrKernelFailed", devices, err)
		}
		if err := offload.Stop(); err != nil {
			t.Fatal(err)
		}
	}
}

// checkProduct checks that L Lᵀ = a, L the lower triangle of factored m.
func checkProduct(t *testing.T, m, a *Matrix) {
	t.Helper()
	n := m.T * m.B
	l := func(r, c int) float64 {
		if c > r {
			return 0
		}
		return m.Tile(r/m.B, c/m.B)[(r%m.B)*m.B+c%m.B]
	}
	for r := range n {
		for c := 0; c <= r; c++ {
			s := 0.0
			for k := 0; k <= c; k++ {
				s += l(r, k) * l(c, k)
			}
			want := a.Tile(r/m.B, c/m.B)[(r%m.B)*m.B+c%m.B]
			if math.Abs(s-want) > 1e-9*math.Max(1, math.Abs(want)) {
				t.Fatalf("(L Lᵀ)[%d][%d] = %g, want %g", r, c, s, want)
			}
		}
	}
}

// TestRowOwners: rows of tiles are dealt out by their work: the devices'
// loads differ no more than when rows are dealt in turn (and, for 8 rows on
// 2 devices, by less than half the heaviest row), and every device gets
// rows when there are enough.
func TestRowOwners(t *testing.T) {
	work := func(i int) int { return 2*i + i*(i-1) + 1 }
	spread := func(t, n int, owner func(i int) int) (int, []int) {
		load := make([]int, n)
		for i := range t {
			load[owner(i)] += work(i)
		}
		lo, hi := load[0], load[0]
		for _, l := range load {
			lo, hi = min(lo, l), max(hi, l)
		}
		return hi - lo, load
	}
	for _, c := range []struct{ t, n int }{{8, 2}, {8, 3}, {3, 2}, {1, 2}, {16, 4}} {
		owner := rowOwners(c.t, Equal(c.n))
		for i, d := range owner {
			if d < 0 || d >= c.n {
				t.Fatalf("%d rows on %d devices: row %d on device %d", c.t, c.n, i, d)
			}
		}
		got, load := spread(c.t, c.n, func(i int) int { return owner[i] })
		inTurn, _ := spread(c.t, c.n, func(i int) int { return i % c.n })
		if got > inTurn {
			t.Errorf("%d rows on %d devices: loads %v differ by %d, dealt in turn by %d", c.t, c.n, load, got, inTurn)
		}
		if c.t >= c.n {
			for d, l := range load {
				if l == 0 {
					t.Errorf("%d rows on %d devices: device %d gets no row", c.t, c.n, d)
				}
			}
		}
	}
	if got, _ := spread(8, 2, func(i int) int { return rowOwners(8, Equal(2))[i] }); got > work(7)/2 {
		t.Errorf("8 rows on 2 devices: loads differ by %d", got)
	}
}

// faultAt is a Tool that hurts device 1's process (SIGKILL, or SIGSTOP)
// when the nth construct on device 1 ends: halfway through a
// factorization, with tasks queued there and tiles only it holds. With do
// set, it calls do instead of sending a signal (do must not block).
type faultAt struct {
	n   int
	sig syscall.Signal
	pid int
	do  func()
	// all counts the constructs of every device, not device 1's only: for
	// a placement that may leave device 1 little work.
	all bool

	mu   sync.Mutex
	seen int
	did  bool
}

func (f *faultAt) TargetBegin(tool.TargetEvent)  {}
func (f *faultAt) DataOp(tool.DataEvent)         {}
func (f *faultAt) KernelLaunch(tool.KernelEvent) {}
func (f *faultAt) Wait(tool.WaitEvent)           {}
func (f *faultAt) TargetEnd(e tool.TargetEvent) {
	if e.Device != 1 && !f.all {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.seen++; f.seen == f.n && f.do != nil {
		f.do()
		f.did = true
	} else if f.seen == f.n && f.pid > 0 {
		syscall.Kill(f.pid, f.sig)
		f.did = true
	}
}

func (f *faultAt) hurt() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.did
}

// TestFactorAnyAfterFault: a device process SIGKILLed, or SIGSTOPped (lost
// once GOFFLOAD_DEVICE_TIMEOUT passes in silence), halfway through FactorAny
// on local:2: the factorization still succeeds and is right, its lost
// tasks having run again on the device left and the tiles only the lost
// device held recomputed from their lineage.
//
// The small cases hurt device 1 after its first construct, while most of
// the graph waits on the tasks it holds: the recovery of its first task
// once waited for a dependent whose enqueue had failed, which waited for
// that task (a hang in every SIGSTOP run).
func TestFactorAnyAfterFault(t *testing.T) {
	cases := []struct{ tiles, b, at int }{{6, 24, 6 * 7 * 8 / 6 / 4}, {2, 4, 1}, {3, 8, 1}, {3, 8, 2}}
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP} {
		for _, c := range cases {
			t.Run(fmt.Sprintf("%v/tiles=%d/at=%d", sig, c.tiles, c.at), func(t *testing.T) {
				factorAnyAfterFault(t, sig, c.tiles, c.b, c.at)
			})
		}
	}
}

func factorAnyAfterFault(t *testing.T, sig syscall.Signal, tiles, b, at int) {
	if sig == syscall.SIGSTOP {
		t.Setenv("GOFFLOAD_DEVICE_TIMEOUT", "500ms")
	}
	f := &faultAt{n: at, sig: sig}
	if err := offload.Start(offload.WithDevices("local:2"), offload.WithOffload("MANDATORY"), offload.WithTool(f)); err != nil {
		t.Fatal(err)
	}
	info, err := offload.On(1).Info()
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.pid = info.PID
	f.mu.Unlock()
	t.Cleanup(func() {
		syscall.Kill(info.PID, syscall.SIGKILL) // a stopped process is not ended by Stop's signals
		if err := offload.Stop(); err != nil && !errors.Is(err, offload.ErrDeviceLost) {
			t.Errorf("Stop: %v", err)
		}
	})
	want := NewMatrix(tiles, b)
	Reference(want, 2)
	m := NewMatrix(tiles, b)
	if _, _, err := FactorAny(m); err != nil {
		t.Fatalf("FactorAny with device 1 hurt by %v: %v", sig, err)
	}
	if !f.hurt() {
		t.Fatalf("device 1 ran fewer than %d constructs: the fault never came", f.n)
	}
	if err := Check(m, want); err != nil {
		t.Errorf("after %v: %v", sig, err)
	}
	if _, err := offload.On(1).Info(); !errors.Is(err, offload.ErrDeviceLost) {
		t.Errorf("device 1 after %v: %v, want ErrDeviceLost", sig, err)
	}
}

// TestOwners: ByRows with the devices' speeds gives each about its share
// of the work (within the heaviest row), RoundRobin deals the tiles in
// turn, and FactorOn factors with either placement, and refuses a
// placement on a device it was not given.
func TestOwners(t *testing.T) {
	work := func(i, j int) float64 { // the tasks that write tile (i, j)
		if i == j {
			return float64(1 + i)
		}
		return float64(1 + 2*j)
	}
	const tiles = 8
	for _, speeds := range [][]float64{{1, 1}, {1, 0.5}, {1, 1.0 / 3}, {0.25, 1}, {3, 2, 1}} {
		load, total := make([]float64, len(speeds)), 0.0
		owner := ByRows(tiles, speeds)
		for i := range tiles {
			for j := 0; j <= i; j++ {
				load[owner(i, j)] += work(i, j)
				total += work(i, j)
			}
		}
		sum := 0.0
		for _, s := range speeds {
			sum += s
		}
		for d, s := range speeds {
			if want := total * s / sum; math.Abs(load[d]-want) > work(tiles-1, tiles-2)+float64(tiles) {
				t.Errorf("speeds %v: device %d has work %g of %g, want about %g", speeds, d, load[d], total, want)
			}
		}
	}
	rr := RoundRobin(2)
	var n [2]int
	for i := range tiles {
		for j := 0; j <= i; j++ {
			n[rr(i, j)]++
		}
	}
	if n[0] != 18 || n[1] != 18 || rr(0, 0) != 0 || rr(1, 0) != 1 || rr(1, 1) != 0 {
		t.Errorf("RoundRobin(2) over 8×8 tiles: %v tiles per device, (0,0) on %d, (1,0) on %d, (1,1) on %d; want 18 each, 0, 1, 0", n, rr(0, 0), rr(1, 0), rr(1, 1))
	}
	if err := offload.Start(offload.WithDevices("host:2")); err != nil {
		t.Fatal(err)
	}
	defer offload.Stop()
	devs := []offload.Device{offload.On(0), offload.On(1)}
	want := NewMatrix(5, 6)
	Reference(want, 2)
	for name, owner := range map[string]Owners{"RoundRobin": RoundRobin(2), "ByRows 1:0.4": ByRows(5, []float64{1, 0.4})} {
		m := NewMatrix(5, 6)
		if _, _, err := FactorOn(devs, m, owner); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := Check(m, want); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	m := NewMatrix(3, 4)
	if _, _, err := FactorOn(devs, m, RoundRobin(3)); err == nil || !strings.Contains(err.Error(), "device 2 of 2") {
		t.Errorf("tiles placed on a third device of two: %v, want an error naming it", err)
	}
}

// TestFactorAnyFaultNoLeak: runtimes started and stopped in turn, each
// with a factorization whose device 1 is SIGKILLed or SIGSTOPped halfway,
// leave nothing behind: after each Stop the goroutines are back to what
// they were before the first Start, and both device processes are gone
// (reaped), the stopped one too (the runtime kills a device process it
// finds silent: no one else sends it SIGKILL here).
func TestFactorAnyFaultNoLeak(t *testing.T) {
	t.Setenv("GOFFLOAD_DEVICE_TIMEOUT", "300ms")
	const tiles, b = 5, 16
	want := NewMatrix(tiles, b)
	Reference(want, 2)
	round := func(sig syscall.Signal) [2]int {
		f := &faultAt{n: tiles * (tiles + 1) * (tiles + 2) / 6 / 4, sig: sig}
		if sig == 0 {
			f.n = 1 << 30
		}
		if err := offload.Start(offload.WithDevices("local:2"), offload.WithOffload("MANDATORY"), offload.WithTool(f)); err != nil {
			t.Fatal(err)
		}
		var pids [2]int
		for d := range pids {
			info, err := offload.On(d).Info()
			if err != nil {
				offload.Stop()
				t.Fatal(err)
			}
			pids[d] = info.PID
		}
		f.mu.Lock()
		f.pid = pids[1]
		f.mu.Unlock()
		m := NewMatrix(tiles, b)
		_, _, err := FactorAny(m)
		if serr := offload.Stop(); serr != nil && !errors.Is(serr, offload.ErrDeviceLost) {
			t.Errorf("Stop after %v: %v", sig, serr)
		}
		if err != nil {
			t.Fatalf("FactorAny with device 1 hurt by %v: %v", sig, err)
		}
		if sig != 0 && !f.hurt() {
			t.Fatalf("device 1 ran fewer than %d constructs: the fault never came", f.n)
		}
		if err := Check(m, want); err != nil {
			t.Errorf("after %v: %v", sig, err)
		}
		return pids
	}
	// goroutines counts the process's goroutines but the forker, which the
	// first local device starts for the life of the process.
	buf := make([]byte, 1<<20)
	goroutines := func() int {
		n := runtime.NumGoroutine()
		if bytes.Contains(buf[:runtime.Stack(buf, true)], []byte("remote.forker(")) {
			n--
		}
		return n
	}
	// settled waits until the goroutines are at most n, and returns how
	// many there are (more than n: after 10 s).
	settled := func(n int) int {
		deadline := time.Now().Add(10 * time.Second)
		for goroutines() > n && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		return goroutines()
	}
	base := goroutines() // the test's own
	for i, sig := range []syscall.Signal{0, syscall.SIGKILL, syscall.SIGSTOP, syscall.SIGKILL, syscall.SIGSTOP} {
		pids := round(sig)
		if n := settled(base); n > base {
			var sb strings.Builder
			pprof.Lookup("goroutine").WriteTo(&sb, 1)
			t.Fatalf("round %d (%v): %d goroutines 10s after Stop, %d before the first Start:\n%s", i, sig, n, base, sb.String())
		}
		for d, pid := range pids {
			deadline := time.Now().Add(10 * time.Second)
			for {
				if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); errors.Is(err, os.ErrNotExist) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("round %d (%v): device %d's process %d still exists 10s after Stop", i, sig, d, pid)
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
}
