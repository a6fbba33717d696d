package opqueue

import (
	"errors"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/goffload/offload/plugin"
)

func TestOrderErrorsAndMarks(t *testing.T) {
	q := New()
	var got []int
	boom := errors.New("boom")
	for i := 0; i < 5; i++ {
		i := i
		q.Do(func() error { got = append(got, i); return nil })
	}
	q.Do(func() error { return boom })
	q.Do(func() error { got = append(got, 99); return nil }) // skipped
	ev := NewEvent()
	if err := q.Record(ev); err != nil {
		t.Fatal(err)
	}
	var marked error
	q.Mark(true, func(failed error) error { marked = failed; return nil })
	q.Do(func() error { got = append(got, 6); return nil }) // runs: the mark cleared the error
	if err := q.Synchronize(); err != nil {
		t.Fatalf("Synchronize after a clearing mark: %v", err)
	}
	if len(got) != 6 || got[5] != 6 {
		t.Errorf("ran %v, want 0..4 then 6", got)
	}
	if !errors.Is(marked, boom) {
		t.Errorf("the mark saw %v", marked)
	}
	if err := ev.Synchronize(); !errors.Is(err, boom) {
		t.Errorf("the event recorded after the failure carries %v", err)
	}
	if err := q.Record(ev); !errors.Is(err, plugin.ErrBadHandle) {
		t.Errorf("recording twice: %v", err)
	}
}

func TestWaitHoldsBack(t *testing.T) {
	a, b := New(), New()
	ev := NewEvent()
	var order []string
	done := make(chan struct{})
	a.Do(func() error { time.Sleep(30 * time.Millisecond); order = append(order, "a"); return nil })
	a.Record(ev)
	if err := b.Wait(ev); err != nil {
		t.Fatal(err)
	}
	b.Do(func() error { order = append(order, "b"); close(done); return nil })
	<-done
	if len(order) != 2 || order[0] != "a" {
		t.Errorf("order %v, want a before b", order)
	}
	if fired, _ := ev.Query(); !fired {
		t.Error("event not fired")
	}
	if err := b.Wait(NewEvent()); !errors.Is(err, plugin.ErrNotRecorded) {
		t.Errorf("wait on an unrecorded event: %v", err)
	}
	b.Close()
	if err := b.Do(func() error { return nil }); !errors.Is(err, plugin.ErrBadHandle) {
		t.Errorf("work on a closed queue: %v", err)
	}
	if err := b.Record(NewEvent()); err == nil {
		t.Error("record on a closed queue accepted")
	}
}

// TestInline: an inline queue runs what is enqueued while it is idle before
// Do returns, keeps the error state as its goroutine does, and still runs
// in order what is enqueued behind work it has not finished.
func TestInline(t *testing.T) {
	q := New()
	defer q.Close()
	q.SetInline(true)
	ran := false
	if err := q.Do(func() error { ran = true; return nil }); err != nil {
		t.Fatal(err)
	}
	if !ran {
		t.Fatal("an inline queue did not run the operation before Do returned")
	}
	boom := errors.New("boom")
	q.Do(func() error { return boom })
	skipped := true
	q.Do(func() error { skipped = false; return nil })
	if !skipped {
		t.Error("an operation after a failure ran")
	}
	if err := q.Synchronize(); !errors.Is(err, boom) {
		t.Errorf("Synchronize = %v, want boom", err)
	}
	// Work enqueued behind a running operation goes to the queue's
	// goroutine, in order.
	q.SetInline(false)
	release := make(chan struct{})
	q.Do(func() error { <-release; return nil })
	q.SetInline(true)
	var order []int
	for i := range 3 {
		q.Do(func() error { order = append(order, i); return nil })
	}
	close(release)
	if err := q.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if len(order) != 3 || order[0] != 0 || order[2] != 2 {
		t.Errorf("order %v, want [0 1 2]", order)
	}
}

// TestInlineHandsOver: what is enqueued while an inline operation runs (by
// that operation, or by another goroutine) is not left behind when the
// inline operation ends: the queue's goroutine runs it, and Synchronize
// waits for it.
func TestInlineHandsOver(t *testing.T) {
	q := New()
	defer q.Close()
	q.SetInline(true)
	ran := make(chan struct{})
	err := q.Do(func() error {
		// The queue is running (this operation): the next one is queued.
		return q.Do(func() error { close(ran); return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Synchronize(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ran:
	default:
		t.Fatal("an operation enqueued while an inline one ran did not run before Synchronize returned")
	}
	if idle, err := q.Query(); !idle || err != nil {
		t.Errorf("Query after Synchronize = %v, %v; want idle", idle, err)
	}
}

// TestArmFire: an event armed without a queue fires when told, once, and
// queues waiting on it go on then.
func TestArmFire(t *testing.T) {
	ev := NewEvent()
	if _, err := ev.Query(); !errors.Is(err, plugin.ErrNotRecorded) {
		t.Errorf("Query of an event never recorded: %v", err)
	}
	if err := ev.Arm(); err != nil {
		t.Fatal(err)
	}
	if err := ev.Arm(); !errors.Is(err, plugin.ErrBadHandle) {
		t.Errorf("arming twice: %v", err)
	}
	q := New()
	defer q.Close()
	if err := q.Wait(ev); err != nil {
		t.Fatal(err)
	}
	after := false
	q.Do(func() error { after = true; return nil })
	if idle, _ := q.Query(); idle {
		t.Fatal("the queue is idle while it waits for an event not fired")
	}
	boom := errors.New("boom")
	fired := make(chan struct{})
	ev.OnFire(func() { close(fired) })
	ev.Fire(boom)
	ev.Fire(nil) // only the first firing counts
	<-fired
	<-ev.Done()
	if err := q.Synchronize(); !errors.Is(err, boom) {
		t.Errorf("a queue that waited for an event fired with an error: Synchronize = %v", err)
	}
	if after {
		t.Error("the operation after a failed wait ran")
	}
	if err := ev.Synchronize(); !errors.Is(err, boom) {
		t.Errorf("event: %v, want the first firing's error", err)
	}
	if err := ev.Close(); err != nil {
		t.Fatal(err)
	}
	if err := ev.Close(); !errors.Is(err, plugin.ErrBadHandle) {
		t.Errorf("closing twice: %v", err)
	}
}

// TestRunHere: RunHere and MarkHere run on the caller while the queue is
// idle, with the queue's error state. On a busy queue RunHere does nothing
// (the caller then enqueues as usual) and MarkHere enqueues the mark
// behind the work that is running.
func TestRunHere(t *testing.T) {
	q := New()
	defer q.Close()
	var order []string
	ran, err := q.RunHere(func() error { order = append(order, "here"); return nil }, nil)
	if !ran || err != nil || len(order) != 1 {
		t.Fatalf("RunHere on an idle queue = %v, %v (ran %v); want it run before it returned", ran, err, order)
	}
	boom := errors.New("boom")
	if ran, _ := q.RunHere(func() error { return boom }, nil); !ran {
		t.Fatal("RunHere on an idle queue did not run")
	}
	if ran, _ := q.RunHere(func() error { order = append(order, "skipped"); return nil }, nil); !ran {
		t.Fatal("RunHere on an idle queue in the error state did not take the operation")
	}
	var marked error
	if err := q.MarkHere(true, func(failed error) error { marked = failed; return nil }); err != nil || marked == nil {
		t.Fatalf("MarkHere on an idle queue = %v, and did not run before it returned", err)
	}
	if !errors.Is(marked, boom) || len(order) != 1 {
		t.Errorf("the mark saw %v after %v; want boom, and the operation after the failure skipped", marked, order)
	}
	// A busy queue: RunHere runs nothing here and enqueues nothing;
	// MarkHere's mark waits its turn.
	release, started := make(chan struct{}), make(chan struct{})
	q.Do(func() error { close(started); <-release; order = append(order, "running"); return nil })
	<-started
	if ran, err := q.RunHere(func() error { order = append(order, "busy"); return nil }, nil); ran || err != nil {
		t.Errorf("RunHere on a busy queue = %v, %v; want false, nil", ran, err)
	}
	if err := q.MarkHere(false, func(error) error { order = append(order, "busy mark"); return nil }); err != nil {
		t.Errorf("MarkHere on a busy queue = %v", err)
	}
	if len(order) != 1 {
		t.Errorf("ran %v before the running operation ended", order)
	}
	close(release)
	if err := q.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if len(order) != 3 || order[1] != "running" || order[2] != "busy mark" {
		t.Errorf("ran %v; want the mark after the running operation, and nothing of RunHere's", order)
	}
	// Timed, and what it enqueues goes to the queue's goroutine after it.
	var timedErr error = errors.New("not told")
	inner := make(chan struct{})
	ran, _ = q.RunHere(func() error {
		return q.Do(func() error { close(inner); return nil })
	}, func(start, end time.Time, err error) { timedErr = err })
	if !ran || timedErr != nil {
		t.Errorf("timed RunHere: ran %v, timed told %v", ran, timedErr)
	}
	if err := q.Synchronize(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-inner:
	default:
		t.Error("an operation enqueued by a RunHere operation did not run before Synchronize returned")
	}
	q.Close()
	if _, err := q.RunHere(func() error { return nil }, nil); !errors.Is(err, plugin.ErrBadHandle) {
		t.Errorf("RunHere on a closed queue: %v", err)
	}
	if err := q.MarkHere(false, func(error) error { return nil }); !errors.Is(err, plugin.ErrBadHandle) {
		t.Errorf("MarkHere on a closed queue: %v", err)
	}
}

// TestRunHereExitSurvivesGoexit: a function run here that ends its
// goroutine with runtime.Goexit fails the queue with the error it gave, and
// the operations enqueued behind it run on the queue's goroutine.
func TestRunHereExitSurvivesGoexit(t *testing.T) {
	q := New()
	why := errors.New("kernel k called runtime.Goexit")
	var exited error
	ran := make(chan bool)
	blocked, release := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(ran)
		q.RunHereExit(func() error {
			close(blocked)
			<-release // an operation is enqueued behind this one meanwhile
			exited = why
			runtime.Goexit()
			return nil
		}, &exited, nil)
		ran <- true // not reached
	}()
	<-blocked
	var after []int
	q.Do(func() error { after = append(after, 1); return nil })
	close(release)
	if <-ran {
		t.Fatal("RunHereExit returned after a Goexit")
	}
	if err := q.Synchronize(); !errors.Is(err, why) {
		t.Fatalf("Synchronize: %v, want the Goexit's error", err)
	}
	if len(after) != 0 {
		t.Errorf("the operation behind the failed one ran: %v", after)
	}
	if _, err := q.RunHereExit(func() error { after = append(after, 2); return nil }, nil, nil); err != nil || len(after) != 1 {
		t.Errorf("the queue after a Goexit: %v %v", err, after)
	}
}

// TestOnFireCall: f(x) runs when the event fires, after OnFire's in the
// order given, or at once on an event that fired; handing it over
// allocates nothing.
func TestOnFireCall(t *testing.T) {
	var got []int
	add := func(x any) { got = append(got, *x.(*int)) }
	one, two := 1, 2
	e := NewEvent()
	e.OnFire(func() { got = append(got, 0) })
	e.OnFireCall(add, &one)
	e.Fire(nil)
	e.OnFireCall(add, &two) // fired: at once
	if want := []int{0, 1, 2}; !slices.Equal(got, want) {
		t.Errorf("ran %v, want %v", got, want)
	}
	nothing := func(any) {}
	evs := make([]Event, 101) // AllocsPerRun's warm-up and its runs
	i := 0
	if n := testing.AllocsPerRun(100, func() {
		evs[i].OnFireCall(nothing, &one)
		evs[i].Fire(nil)
		i++
	}); n > 0 {
		t.Errorf("OnFireCall and Fire allocate %.1f times, want none", n)
	}
}

// TestWaitAllocatesNothing: a queue's wait on another queue's event that
// has not fired yet makes no channel of its own (the queue's wake channel
// serves every wait), so a dependence between two queues costs no
// allocation beyond its event.
func TestWaitAllocatesNothing(t *testing.T) {
	a, b := New(), New()
	defer a.Close()
	defer b.Close()
	evs := make([]Event, 1000)
	i := 0
	gate := make(chan struct{}, 1)
	held := func() error { <-gate; return nil }
	step := func() {
		ev := &evs[i]
		i++
		if err := a.Do(held); err != nil {
			t.Fatal(err)
		}
		if err := a.Record(ev); err != nil {
			t.Fatal(err)
		}
		if err := b.Wait(ev); err != nil {
			t.Fatal(err)
		}
		gate <- struct{}{}
		if err := b.Synchronize(); err != nil {
			t.Fatal(err)
		}
	}
	if n := testing.AllocsPerRun(100, step); n > 0 {
		t.Errorf("a wait on another queue's event allocates %.1f times, want none", n)
	}
}

// TestDoCallExitSurvivesGoexit: an operation of DoCallExit runs on the
// queue's own goroutine, also on an inline queue, so that its
// runtime.Goexit ends that goroutine and not the caller's. The queue fails
// with the error it gave (with ErrKernelFailed where it gave none), skips
// what was enqueued behind it until the error is taken, and runs on after.
func TestDoCallExitSurvivesGoexit(t *testing.T) {
	for _, inline := range []bool{false, true} {
		q := New()
		q.SetInline(inline)
		why := errors.New("kernel k called runtime.Goexit")
		var exited error
		release := make(chan struct{})
		exit := func(c Call) error {
			<-release // an operation is enqueued behind this one meanwhile
			exited, _ = c.X.(error)
			runtime.Goexit()
			return nil
		}
		var after []int
		for _, give := range []error{why, nil} {
			if err := q.DoCallExit(exit, Call{X: give}, &exited, nil); err != nil {
				t.Fatal(err)
			}
			// Still here: the operation did not run on this goroutine.
			q.Do(func() error { after = append(after, 1); return nil })
			release <- struct{}{}
			err := q.Synchronize()
			if want := why; give != nil && !errors.Is(err, want) {
				t.Fatalf("inline %v: Synchronize: %v, want the Goexit's error", inline, err)
			}
			if give == nil && !errors.Is(err, plugin.ErrKernelFailed) {
				t.Fatalf("inline %v: Synchronize after a Goexit that gave no error: %v, want ErrKernelFailed", inline, err)
			}
			if len(after) != 0 {
				t.Fatalf("inline %v: the operation behind the failed one ran: %v", inline, after)
			}
		}
		q.Do(func() error { after = append(after, 2); return nil })
		if err := q.Synchronize(); err != nil || !slices.Equal(after, []int{2}) {
			t.Errorf("inline %v: the queue after a Goexit: %v %v", inline, err, after)
		}
	}
}
