package devstate

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/goffload/offload/plugin"
)

func TestStateLife(t *testing.T) {
	var s State
	if got := s.Label(); got != "device" {
		t.Errorf("Label of a zero State = %q, want %q", got, "device")
	}
	if err := s.Alive(); err != nil {
		t.Errorf("Alive of a new device = %v", err)
	}
	s.SetLabel("kind device 3")
	lost := fmt.Errorf("kind device 3: %w: gone", plugin.ErrDeviceLost)
	if got := s.Lose(lost); got != lost {
		t.Errorf("Lose = %v, want %v", got, lost)
	}
	if got := s.Lose(errors.New("later")); got != lost {
		t.Errorf("a second Lose = %v, want the first cause %v", got, lost)
	}
	if err := s.Alive(); err != lost || s.Lost() != lost {
		t.Errorf("Alive, Lost of a lost device = %v, %v; want %v", err, s.Lost(), lost)
	}
	if !s.Close() {
		t.Error("the first Close reported the device closed before")
	}
	if s.Close() {
		t.Error("a second Close reported the device open")
	}
	err := s.Alive()
	if !errors.Is(err, plugin.ErrBadHandle) || !strings.HasPrefix(err.Error(), "kind device 3: ") || !s.Closed() {
		t.Errorf("Alive of a closed device = %v (Closed %v); want an error wrapping ErrBadHandle that names it", err, s.Closed())
	}
}

type handle struct{ owner *State }

func TestStateHandles(t *testing.T) {
	var s, other State
	s.SetLabel("kind device 0")
	for _, c := range []struct {
		h    any
		want bool
	}{{&handle{&s}, true}, {&handle{&other}, false}, {42, false}} {
		h, ok := c.h.(*handle)
		err := s.Mine("record", c.h, ok && h.owner == &s)
		if (err == nil) != c.want {
			t.Errorf("Mine(%T) = %v, want ok %v", c.h, err, c.want)
		}
		if err != nil && (!errors.Is(err, plugin.ErrBadHandle) || !strings.Contains(err.Error(), "kind device 0: record: ")) {
			t.Errorf("Mine(%T) = %v; want an error wrapping ErrBadHandle that names the device and what was done", c.h, err)
		}
	}
	if err := s.Waitable(nil, true); err != nil {
		t.Errorf("Waitable(ok) = %v", err)
	}
	if err := s.Waitable(nil, false); !errors.Is(err, plugin.ErrUnsupported) || !strings.HasPrefix(err.Error(), "kind device 0: wait on") {
		t.Errorf("Waitable(not ok) = %v; want an error wrapping ErrUnsupported that names the device", err)
	}
}

// TestStateConcurrent: of many goroutines that close a device at once,
// one is told it closed it; of many that lose it, every one gets the
// same cause; Label is read while it is set.
func TestStateConcurrent(t *testing.T) {
	var s State
	var closers atomic.Int32
	causes := make([]error, 16)
	var wg sync.WaitGroup
	for i := range causes {
		wg.Go(func() {
			s.SetLabel(fmt.Sprintf("device %d", i))
			causes[i] = s.Lose(fmt.Errorf("cause %d: %w", i, plugin.ErrDeviceLost))
			if s.Close() {
				closers.Add(1)
			}
			_ = s.Label()
			_ = s.Alive()
		})
	}
	wg.Wait()
	if n := closers.Load(); n != 1 {
		t.Errorf("%d goroutines were told they closed the device, want 1", n)
	}
	for i, c := range causes {
		if c != s.Lost() {
			t.Errorf("goroutine %d's Lose = %v, want the first cause %v", i, c, s.Lost())
		}
	}
}
