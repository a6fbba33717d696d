package opencl

import (
	"bytes"
	"testing"
	"time"

	"github.com/goffload/offload/internal/cldrv"
	"github.com/goffload/offload/internal/opencltest"
	"github.com/goffload/offload/plugin"
)

// TestHostWritesBeforeSubmit: on a driver that reads a submit's host
// memory when the submit is issued (StageWritesForTests, as NVIDIA's
// OpenCL does), a submit sends what the retrieves before it on its queue,
// and those before a Wait on another queue, wrote into that memory, though
// they complete only after the submit was enqueued: each queue is held by
// a barrier on a user event that the test completes after enqueueing all.
// A submit of other memory does not wait for them.
func TestHostWritesBeforeSubmit(t *testing.T) {
	for _, svm := range []string{"", "0"} {
		t.Run("svm="+svm, func(t *testing.T) {
			t.Setenv(SVMEnv, svm)
			t.Cleanup(StageWritesForTests())
			d := opencltest.Open(t).(*device)
			const n = 4096
			want := bytes.Repeat([]byte{0xc7}, n)
			for _, via := range []string{"retrieve", "wait"} {
				t.Run(via, func(t *testing.T) {
					a, b := mustAlloc(t, d, n), mustAlloc(t, d, n)
					q, q2 := mustQueue(t, d), mustQueue(t, d)
					if err := q.Submit(a, want); err != nil {
						t.Fatal(err)
					}
					mustSync(t, q)
					host := bytes.Repeat([]byte{0xb0}, n) // stale until the retrieve lands
					other, otherDst := bytes.Repeat([]byte{1}, n), mustAlloc(t, d, n)
					u, err := d.lib.CreateUserEvent(d.ctx)
					if err != nil {
						t.Fatal(err)
					}
					defer d.lib.ReleaseEvent(u)
					hold := q
					if via == "wait" {
						hold = q2
					}
					if err := d.lib.Barrier(hold.cq, []cldrv.Event{u}, nil); err != nil {
						t.Fatal(err)
					}
					if err := hold.Retrieve(host, a); err != nil {
						t.Fatal(err)
					}
					if via == "wait" {
						ev, err := d.NewEvent()
						if err != nil {
							t.Fatal(err)
						}
						defer ev.Close()
						if err := q2.Record(ev); err != nil {
							t.Fatal(err)
						}
						if err := q.Wait(ev); err != nil {
							t.Fatal(err)
						}
					}
					if via == "retrieve" {
						// other memory: issued without waiting for the held retrieve
						if err := q.Submit(otherDst, other); err != nil {
							t.Fatal(err)
						}
						issued := make(chan error, 1)
						go func() { issued <- q.L.Synchronize() }() // issued, not done: the barrier holds the queue
						select {
						case err := <-issued:
							if err != nil {
								t.Fatal(err)
							}
						case <-time.After(10 * time.Second):
							d.lib.SetUserEventStatus(u, int32(cldrv.Complete))
							t.Fatal("a submit of other host memory waited for a retrieve before it")
						}
						q.hw.mu.Lock()
						kept := len(q.hw.list)
						q.hw.mu.Unlock()
						if kept != 1 {
							t.Errorf("%d retrieves kept to wait for, want 1", kept)
						}
					}
					waits := make(chan struct{})
					q.hw.waiting = func() { close(waits) }
					if err := q.Submit(b, host); err != nil {
						t.Fatal(err)
					}
					// the held retrieve completes once the submit waits for it, or
					// was issued without waiting (then it sends what it read then)
					issued := make(chan error, 1)
					go func() { issued <- q.L.Synchronize() }()
					select {
					case <-waits:
					case err := <-issued:
						if err != nil {
							t.Fatal(err)
						}
					}
					if err := d.lib.SetUserEventStatus(u, int32(cldrv.Complete)); err != nil {
						t.Fatal(err)
					}
					back := make([]byte, n)
					if err := q.Retrieve(back, b); err != nil {
						t.Fatal(err)
					}
					mustSync(t, q2)
					mustSync(t, q)
					if !bytes.Equal(back, want) {
						t.Errorf("the submit after a %s of its host memory sent %#x..., want %#x...", via, back[:4], want[:4])
					}
					q.hw.mu.Lock()
					kept := len(q.hw.list)
					q.hw.mu.Unlock()
					if kept != 0 {
						t.Errorf("%d commands that write host memory kept after Synchronize, want 0", kept)
					}
				})
			}
		})
	}
}

func mustAlloc(t *testing.T, d *device, n int64) plugin.Ptr {
	t.Helper()
	p, err := d.Alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Free(p) })
	return p
}

func mustQueue(t *testing.T, d *device) *queue {
	t.Helper()
	q, err := d.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q.(*queue)
}

func mustSync(t *testing.T, q *queue) {
	t.Helper()
	if err := q.Synchronize(); err != nil {
		t.Fatal(err)
	}
}
