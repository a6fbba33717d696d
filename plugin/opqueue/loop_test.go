package opqueue

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/goffload/offload/plugin"
)

// step is an operation of the test Loop: it logs its id, then does what
// its fields say.
type step struct {
	id     int
	fail   error         // returned, unless skipped
	block  chan struct{} // waited for before it returns
	start  chan struct{} // closed when it starts
	goexit bool          // ends its goroutine
	seen   *error        // gets the error state it ran with
}

// logRunner runs steps, logging the ids of those not skipped, and keeps
// the goroutines bound (Binder): a step must run on a bound goroutine. (A
// goroutine of the Loop that has just handed it on may still be bound
// while the next runs elsewhere: binding is per goroutine.)
type logRunner struct {
	mu      sync.Mutex
	ran     []int
	bound   map[uint64]int // goroutine → Binds not Unbound
	unbound bool           // a step ran on a goroutine not bound once
}

func (r *logRunner) Run(s step, failed error) error {
	r.mu.Lock()
	if r.bound[goid()] != 1 {
		r.unbound = true
	}
	r.mu.Unlock()
	if s.seen != nil {
		*s.seen = failed
	}
	if s.start != nil {
		close(s.start)
	}
	if s.block != nil {
		<-s.block
	}
	if failed != nil {
		return nil // skipped
	}
	r.mu.Lock()
	r.ran = append(r.ran, s.id)
	r.mu.Unlock()
	if s.goexit {
		runtime.Goexit()
	}
	return s.fail
}

func (r *logRunner) Bind() {
	r.mu.Lock()
	if r.bound == nil {
		r.bound = map[uint64]int{}
	}
	r.bound[goid()]++
	r.mu.Unlock()
}

func (r *logRunner) Unbind() {
	r.mu.Lock()
	g := goid()
	if r.bound[g]--; r.bound[g] == 0 {
		delete(r.bound, g)
	}
	r.mu.Unlock()
}

// goid is the calling goroutine's number, read from its stack's header
// ("goroutine 7 [running]:"): for this test's bookkeeping only.
func goid() uint64 {
	var buf [32]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	n, _ := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return n
}

func (r *logRunner) log() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.ran...)
}

func newLoop(t *testing.T) (*Loop[step], *logRunner) {
	t.Helper()
	r := &logRunner{}
	l := &Loop[step]{}
	l.Init(r)
	t.Cleanup(func() {
		if r.unbound {
			t.Error("a step ran on a goroutine that was not bound once (Bind, Unbind)")
		}
	})
	return l, r
}

func put(t *testing.T, l *Loop[step], s step, w Where, clear bool) bool {
	t.Helper()
	ran, err := l.Put(s, w, clear)
	if err != nil {
		t.Fatalf("Put(%d): %v", s.id, err)
	}
	return ran
}

// TestLoopErrorState: a failure skips what follows until a clearing
// operation takes the state; Query, Idle, TakeErr and Synchronize see it
// as the contract says.
func TestLoopErrorState(t *testing.T) {
	l, r := newLoop(t)
	boom := errors.New("boom")
	var seen1, seen2 error
	put(t, l, step{id: 1}, Queued, false)
	put(t, l, step{id: 2, fail: boom}, Queued, false)
	put(t, l, step{id: 3}, Queued, false) // skipped
	put(t, l, step{id: 4, seen: &seen1}, Queued, true)
	put(t, l, step{id: 5, seen: &seen2}, Queued, false)
	if err := l.Synchronize(); err != nil {
		t.Fatalf("Synchronize after a clearing step: %v", err)
	}
	if got := r.log(); fmt.Sprint(got) != "[1 2 5]" {
		t.Errorf("ran %v, want [1 2 5] (3 and the clearing 4 skipped)", got)
	}
	if !errors.Is(seen1, boom) || seen2 != nil {
		t.Errorf("the clearing step saw %v, the one after it %v; want boom, nil", seen1, seen2)
	}

	put(t, l, step{id: 6, fail: boom}, Queued, false)
	if err := l.Synchronize(); !errors.Is(err, boom) {
		t.Errorf("Synchronize after a failure = %v, want boom", err)
	}
	if err := l.Synchronize(); err != nil {
		t.Errorf("a second Synchronize = %v, want nil: the first took the state", err)
	}
	l.Fail(boom)
	if !l.Idle() {
		t.Error("Idle = false on an idle Loop")
	}
	if err := l.TakeErr(); !errors.Is(err, boom) {
		t.Errorf("TakeErr after Fail = %v, want boom", err)
	}
	if done, err := l.Query(); !done || err != nil {
		t.Errorf("Query = %v, %v; want true, nil", done, err)
	}

	if !l.Close() || l.Close() {
		t.Error("Close reported the Loop open twice, or not once")
	}
	if !l.Closed() {
		t.Error("Closed = false after Close")
	}
	if _, err := l.Put(step{id: 7}, Queued, false); !errors.Is(err, plugin.ErrBadHandle) {
		t.Errorf("Put on a closed Loop = %v, want ErrBadHandle", err)
	}
}

// TestLoopManyGoroutines: steps that many goroutines put at once all run,
// each goroutine's in its order, whether they run queued, here or inline.
func TestLoopManyGoroutines(t *testing.T) {
	const goroutines, each = 8, 200
	for _, inline := range []bool{false, true} {
		t.Run(fmt.Sprintf("inline=%v", inline), func(t *testing.T) {
			l, r := newLoop(t)
			l.SetInline(inline)
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					for i := range each {
						w := Where(i % 3) // Queued, Here, HereOnly
						s := step{id: g*each + i}
						if ran, err := l.Put(s, w, false); err != nil {
							t.Errorf("Put: %v", err)
						} else if w == HereOnly && !ran {
							put(t, l, s, Queued, false)
						}
					}
				})
			}
			wg.Wait()
			if err := l.Synchronize(); err != nil {
				t.Fatal(err)
			}
			got := r.log()
			if len(got) != goroutines*each {
				t.Fatalf("%d steps ran, want %d", len(got), goroutines*each)
			}
			last := make([]int, goroutines)
			for i := range last {
				last[i] = -1
			}
			for _, id := range got {
				g := id / each
				if id <= last[g] {
					t.Fatalf("goroutine %d's step %d ran after its step %d", g, id%each, last[g]%each)
				}
				last[g] = id
			}
		})
	}
}

// TestLoopInlineHandOver: a step put while an inline step runs on its
// caller is not left behind when that step ends (the Loop's goroutine
// takes over), and a later inline put does not overtake it. A copy of this
// loop once marked itself idle when the inline step ended, leaving the
// other behind (plugins/cuda, before it ran on Loop).
func TestLoopInlineHandOver(t *testing.T) {
	l, r := newLoop(t)
	l.SetInline(true)
	for range 20 {
		a := step{id: 1, start: make(chan struct{}), block: make(chan struct{})}
		ranA := make(chan bool, 1)
		go func() {
			ran, err := l.Put(a, Queued, false)
			if err != nil {
				t.Error(err)
			}
			ranA <- ran
		}()
		<-a.start
		// a runs on its caller: the Loop is busy, so b is queued.
		if put(t, l, step{id: 2}, Queued, false) {
			t.Fatal("a step put while another runs ran on its caller")
		}
		close(a.block)
		if !<-ranA {
			t.Fatal("a step put on an idle inline Loop did not run on its caller")
		}
		put(t, l, step{id: 3}, Queued, false) // inline if the Loop is idle by now
		if err := l.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if got := r.log(); fmt.Sprint(got) != "[1 2 3]" {
			t.Fatalf("ran %v, want [1 2 3]: the step put while an inline one ran was left behind or overtaken", got)
		}
		r.mu.Lock()
		r.ran = nil
		r.mu.Unlock()
	}
}

// TestLoopGoexit: a step run on its caller that ends the caller's
// goroutine fails the Loop, and what was queued behind it still runs, on
// the Loop's goroutine, with the failure.
func TestLoopGoexit(t *testing.T) {
	l, r := newLoop(t)
	s := step{id: 1, goexit: true, start: make(chan struct{}), block: make(chan struct{})}
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		l.Put(s, HereOnly, false)
		t.Error("Put returned from a step that ended its goroutine")
	}()
	<-s.start
	var seen error
	put(t, l, step{id: 2, seen: &seen}, Queued, false)
	close(s.block)
	<-exited
	if err := l.Synchronize(); !errors.Is(err, plugin.ErrKernelFailed) {
		t.Errorf("Synchronize after a step ended its goroutine = %v, want ErrKernelFailed", err)
	}
	if !errors.Is(seen, plugin.ErrKernelFailed) {
		t.Errorf("the step queued behind it ran with %v, want ErrKernelFailed", seen)
	}
	if got := r.log(); fmt.Sprint(got) != "[1]" {
		t.Errorf("ran %v, want [1]", got)
	}
}

// TestLoopBacklogReusesRoom: a queue that holds a backlog of operations
// again and again keeps its room, allocating nothing per batch (a slice
// taken from the front grew again after each drain, copying the backlog).
func TestLoopBacklogReusesRoom(t *testing.T) {
	q := New()
	defer q.Close()
	gate := make(chan struct{}, 1)
	held := func() error { <-gate; return nil }
	batch := func() {
		if err := q.Do(held); err != nil {
			t.Fatal(err)
		}
		for range 1000 {
			if err := q.Do(nop); err != nil {
				t.Fatal(err)
			}
		}
		gate <- struct{}{}
		if err := q.Synchronize(); err != nil {
			t.Fatal(err)
		}
	}
	if n := testing.AllocsPerRun(10, batch); n > 0 {
		t.Errorf("a batch of 1000 operations behind a held one allocates %.1f times, want none", n)
	}
}

// TestLoopRepeatedBacklogKeepsRoom: a queue that takes a large backlog
// again and again (a replayed task graph's operations, more than keptRing)
// keeps its room between them, so a backlog allocates nothing once the
// first has grown it; when the work shrinks, its next idle drops the room.
func TestLoopRepeatedBacklogKeepsRoom(t *testing.T) {
	q := New()
	defer q.Close()
	gate := make(chan struct{}, 1)
	held := func() error { <-gate; return nil }
	batch := func(n int) func() {
		return func() {
			if err := q.Do(held); err != nil {
				t.Fatal(err)
			}
			for range n {
				if err := q.Do(nop); err != nil {
					t.Fatal(err)
				}
			}
			gate <- struct{}{}
			if err := q.Synchronize(); err != nil {
				t.Fatal(err)
			}
		}
	}
	big := 4 * keptRing
	if n := testing.AllocsPerRun(10, batch(big)); n > 0 {
		t.Errorf("a backlog of %d operations, again, allocates %.1f times, want none", big, n)
	}
	batch(10)()
	q.l.mu.Lock()
	room := len(q.l.ops.buf)
	q.l.mu.Unlock()
	if room > keptRing {
		t.Errorf("after a backlog of 10 the idle ring keeps room for %d entries, want at most %d", room, keptRing)
	}
}
