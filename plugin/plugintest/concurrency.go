package plugintest

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/goffload/offload/plugin"
)

func (e *env) testConcurrency(t *testing.T) {
	const goroutines, iterations = 8, 50
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		d := e.devs[g%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := worker(d, g, iterations); err != nil {
				errs <- fmt.Errorf("goroutine %d on device %d: %w", g, g%2, err)
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	_ = within(t, "the concurrent workers", func() error { <-done; return nil })
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// worker runs alloc, submit, launch, retrieve, free loops on a queue of its
// own and checks every result.
func worker(d plugin.Device, g, iterations int) (err error) {
	q, err := d.NewQueue()
	if err != nil {
		return err
	}
	defer func() {
		if cerr := q.Close(); err == nil {
			err = cerr
		}
	}()
	for i := range iterations {
		n := 1 + (g*131+i*17)%2000
		p, err := d.Alloc(int64(8 * n))
		if err != nil {
			return fmt.Errorf("iteration %d: Alloc: %w", i, err)
		}
		src := make([]int32, n)
		for j := range src {
			src[j] = int32(g*1_000_000 + i*1000 + j)
		}
		k := int32(g*100 + i)
		out := make([]int32, n)
		if err := q.Submit(p, asBytes(src)); err != nil {
			return fmt.Errorf("iteration %d: Submit: %w", i, err)
		}
		if err := q.Launch(kAddInt32, []plugin.Arg{slice(p+plugin.Ptr(4*n), n), slice(p, n), scalar(k)}); err != nil {
			return fmt.Errorf("iteration %d: Launch: %w", i, err)
		}
		var info []int64
		var ip plugin.Ptr
		if i%5 == 0 {
			// The parallel loop of a kernel, on a pool other goroutines use
			// too: add 1 to src through the context kernel.
			info = make([]int64, 2)
			if ip, err = d.Alloc(16); err != nil {
				return fmt.Errorf("iteration %d: Alloc: %w", i, err)
			}
			if err := q.Launch(kCtxFill, []plugin.Arg{slice(p, n), slice(ip, 2)}); err != nil {
				return fmt.Errorf("iteration %d: Launch: %w", i, err)
			}
			if err := q.Retrieve(asBytes(info), ip); err != nil {
				return fmt.Errorf("iteration %d: Retrieve: %w", i, err)
			}
		}
		back := make([]int32, n)
		if err := q.Retrieve(asBytes(out), p+plugin.Ptr(4*n)); err != nil {
			return fmt.Errorf("iteration %d: Retrieve: %w", i, err)
		}
		if err := q.Retrieve(asBytes(back), p); err != nil {
			return fmt.Errorf("iteration %d: Retrieve: %w", i, err)
		}
		if err := q.Synchronize(); err != nil {
			return fmt.Errorf("iteration %d: Synchronize: %w", i, err)
		}
		if err := d.Free(p); err != nil {
			return fmt.Errorf("iteration %d: Free: %w", i, err)
		}
		if info != nil {
			if err := d.Free(ip); err != nil {
				return fmt.Errorf("iteration %d: Free: %w", i, err)
			}
		}
		bump := int32(0)
		if info != nil {
			bump = 1
			if info[1] != int64(d.Info().Cores) {
				return fmt.Errorf("iteration %d: Cores() = %d, want %d", i, info[1], d.Info().Cores)
			}
		}
		for j := range out {
			if out[j] != src[j]+k {
				return fmt.Errorf("iteration %d: element %d = %d, want %d", i, j, out[j], src[j]+k)
			}
			if back[j] != src[j]+bump {
				return fmt.Errorf("iteration %d: source element %d = %d, want %d", i, j, back[j], src[j]+bump)
			}
		}
	}
	return nil
}

func (e *env) testClosedHandles(t *testing.T) {
	d0 := e.devs[0]
	open := newQueue(t, d0)
	x := alloc(t, d0, 16)
	q, err := d0.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	launch(t, q, kFillInt64, slice(x, 2), scalar(int64(8)))
	if err := within(t, "Queue.Close", q.Close); err != nil {
		t.Fatalf("Queue.Close: %v", err)
	}
	// Close synchronized first: the launch before it is done.
	if got := fromBytes[int64](get(t, open, x, 16)); got[0] != 8 || got[1] != 8 {
		t.Errorf("work enqueued before Close: buffer %v, want [8 8]", got)
	}

	recorded := newEvent(t, d0)
	if err := open.Record(recorded); err != nil {
		t.Fatal(err)
	}
	mustSync(t, open)
	ev := newEvent(t, d0)
	for _, c := range []struct {
		what string
		err  error
	}{
		{"Submit", q.Submit(x, make([]byte, 8))},
		{"Retrieve", q.Retrieve(make([]byte, 8), x)},
		{"Launch", q.Launch(kFillInt64, []plugin.Arg{slice(x, 2), scalar(int64(1))})},
		{"Record", q.Record(ev)},
		{"Wait", q.Wait(recorded)},
	} {
		if !errors.Is(c.err, plugin.ErrBadHandle) {
			t.Errorf("%s on a closed queue = %v, want an error wrapping ErrBadHandle", c.what, c.err)
		}
	}
	if x0, ok := q.(plugin.Exchanger); ok {
		if err := x0.Exchange(d0, x+8, x, 8); !errors.Is(err, plugin.ErrBadHandle) {
			t.Errorf("Exchange on a closed queue = %v, want an error wrapping ErrBadHandle", err)
		}
	}
	// The refused Record left the event unrecorded: it can be recorded on
	// an open queue and fires.
	if fired, err := ev.Query(); fired || !errors.Is(err, plugin.ErrNotRecorded) {
		t.Errorf("after Record on a closed queue was refused, Query = %v, %v; want false, ErrNotRecorded", fired, err)
	}
	if err := open.Record(ev); err != nil {
		t.Errorf("Record after a refused Record: %v", err)
	} else if err := esync(t, ev); err != nil {
		t.Errorf("Event.Synchronize: %v", err)
	}

	// A closed event cannot be recorded.
	closed := newEvent(t, d0)
	if err := closed.Close(); err != nil {
		t.Fatalf("Event.Close: %v", err)
	}
	if err := open.Record(closed); !errors.Is(err, plugin.ErrBadHandle) {
		t.Errorf("Record of a closed event = %v, want an error wrapping ErrBadHandle", err)
	}
	mustSync(t, open)
	if got := fromBytes[int64](get(t, open, x, 16)); got[0] != 8 || got[1] != 8 {
		t.Errorf("refused operations changed the buffer: %v, want [8 8]", got)
	}
}

func (e *env) testClosedDevice(t *testing.T) {
	devs := e.openLoaded(t)
	d, other := devs[0], devs[1]
	q := newQueue(t, d)
	x := alloc(t, d, 64)
	launch(t, q, kFillInt64, slice(x, 8), scalar(int64(3)))
	mustSync(t, q)
	e.closed.Store(d, true)
	if err := within(t, "Device.Close", d.Close); err != nil {
		t.Fatalf("Device.Close: %v", err)
	}
	if p, err := d.Alloc(8); err == nil {
		t.Errorf("Alloc on a closed device = %#x, nil; want an error", uint64(p))
	}
	if _, err := d.NewQueue(); err == nil {
		t.Errorf("NewQueue on a closed device returned no error")
	}
	if _, err := d.NewEvent(); err == nil {
		t.Errorf("NewEvent on a closed device returned no error")
	}
	err := q.Submit(x, make([]byte, 8))
	if err == nil {
		err = qsync(t, q)
	}
	if err == nil {
		t.Errorf("Submit through a queue of a closed device: no error at enqueue or Synchronize")
	}
	// The other device is unaffected.
	oq := newQueue(t, other)
	y := alloc(t, other, 8)
	launch(t, oq, kFillInt64, slice(y, 1), scalar(int64(11)))
	if got := fromBytes[int64](get(t, oq, y, 8)); got[0] != 11 {
		t.Errorf("the other device after Close: got %d, want 11", got[0])
	}
}
