package engine

import (
	"errors"
	"strings"
	"testing"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/remote/proto"
	"github.com/goffload/offload/plugins/remote/state"

	_ "github.com/goffload/offload/plugins/host" // the kind the sessions here serve
)

// servedSession serves a host device of this process (the host kind,
// through its plugin contract) to a Device over a socket pair, as a
// device process serving local:1[host] would: no processes.
func servedSession(t *testing.T) (*Device, *Session, chan error) {
	t.Helper()
	host, dev := socketPair(t)
	img := entries.Current()
	s := newSession(newLink(dev), img, 1)
	s.Serves = func(index int) (plugin.Device, string, int, error) {
		k, _ := plugin.LookupKind("host")
		ds, err := k.Open("")
		if err != nil {
			return nil, "", 0, err
		}
		return ds[0], "host", 1, nil
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	d := newDevice(newLink(host), "local", "served device")
	t.Cleanup(func() { d.Close() })
	return d, s, done
}

// TestServedTables: what a proxied session keeps per allocation, event and
// copy shrinks with the work: the address ranges go with the frees, the
// served events with the host's forgetting, and the staging buffers it
// keeps for reuse are a few, reused (a fresh 64 MiB buffer costs its page
// faults every copy).
func TestServedTables(t *testing.T) {
	d, s, _ := servedSession(t)
	if n, _, err := d.Serve(0); err != nil || n != 1 {
		t.Fatalf("Serve(0) = %d, %v", n, err)
	}
	if err := d.Load(entries.Current(), 0); err != nil {
		t.Fatal(err)
	}
	if d.Info().Serves != "host" {
		t.Fatalf("info %+v, want a device serving host", d.Info())
	}
	q, _ := d.NewQueue()
	q2, _ := d.NewQueue()
	const size = 4 << 20
	buf := make([]byte, size)
	for round := range 3 {
		var ptrs []plugin.Ptr
		for range 2 {
			p, err := d.Alloc(size)
			if err != nil {
				t.Fatal(err)
			}
			ptrs = append(ptrs, p)
			buf[0] = byte(round)
			if err := q.Submit(p, buf); err != nil {
				t.Fatal(err)
			}
			back := make([]byte, size)
			if err := q.Retrieve(back, p); err != nil {
				t.Fatal(err)
			}
			if err := q.Synchronize(); err != nil {
				t.Fatal(err)
			}
			if back[0] != byte(round) {
				t.Fatalf("round %d: retrieved %d", round, back[0])
			}
		}
		for _, p := range ptrs {
			if err := d.Free(p); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Events, recorded on one queue and waited on by another: more than
	// the host forgets in one batch.
	const events = state.ForgetBatch + 88
	p, _ := d.Alloc(8)
	for i := range events {
		ev, _ := d.NewEvent()
		if err := q.Submit(p, []byte{byte(i), 0, 0, 0, 0, 0, 0, 0}); err != nil {
			t.Fatal(err)
		}
		if err := q.Record(ev); err != nil {
			t.Fatal(err)
		}
		if err := q2.Wait(ev); err != nil {
			t.Fatal(err)
		}
		back := make([]byte, 1)
		if err := q2.Retrieve(back, p); err != nil {
			t.Fatal(err)
		}
		if err := q2.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if back[0] != byte(i) {
			t.Fatalf("event %d: the waiting queue read %d", i, back[0])
		}
		ev.Close()
	}
	d.Free(p)
	// A round trip: the frees and forgets before it are read.
	if _, err := d.call(infoReq); err != nil {
		t.Fatal(err)
	}
	sv := s.srv
	sv.mu.Lock()
	ranges, evs := sv.mem.Len(), len(sv.evs)
	sv.mu.Unlock()
	s.emu.Lock()
	own := s.evs.Len()
	s.emu.Unlock()
	sv.stage.mu.Lock()
	kept := len(sv.stage.free)
	sv.stage.mu.Unlock()
	if ranges != 0 || evs >= events || evs > own || kept == 0 || kept > stageKeep {
		t.Errorf("after the work: %d ranges, %d served events of %d (the session keeps %d), %d staging buffers kept; want 0 ranges, the events forgotten with the session's, 1 to %d buffers",
			ranges, evs, events, own, kept, stageKeep)
	}
}

// TestServedBadPointer: an address in no allocation of a proxied device
// fails the operation naming the device and the served one, and the
// session goes on.
func TestServedBadPointer(t *testing.T) {
	d, _, _ := servedSession(t)
	if err := d.Load(entries.Current(), 0); err != nil { // no Serve: device 0
		t.Fatal(err)
	}
	q, _ := d.NewQueue()
	if err := q.Submit(1<<40, make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	err := q.Synchronize()
	if !errors.Is(err, plugin.ErrBadPointer) || !contains(err.Error(), "remote device 0", `host device "Go host device`) {
		t.Errorf("submit to no allocation: %v; want ErrBadPointer naming the device and the served one", err)
	}
	p, _ := d.Alloc(8)
	if err := q.Submit(p, make([]byte, 8)); err != nil {
		t.Fatal(err)
	}
	if err := q.Synchronize(); err != nil {
		t.Errorf("after the failure: %v", err)
	}
}

// TestServeOnce: a host may pick the device once, before hello; a second
// Serve frame ends the session.
func TestServeOnce(t *testing.T) {
	d, _, done := servedSession(t)
	if _, _, err := d.Serve(0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Serve(0); err == nil {
		t.Error("a second Serve was answered")
	}
	if err := <-done; !errors.Is(err, proto.ErrFrame) {
		t.Errorf("session ended with %v, want ErrFrame", err)
	}
}

func contains(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
