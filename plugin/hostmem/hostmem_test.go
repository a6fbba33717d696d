package hostmem

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/goffload/offload/plugin"
)

// TestImpossibleSizes: sizes the machine cannot hold are refused with
// ErrOutOfMemory before Go tries them (which would end the process), counting
// what is in use already; the memory still allocates afterwards.
func TestImpossibleSizes(t *testing.T) {
	m := New(1 << 20)
	limit := Limit()
	for _, n := range []int64{limit + 1, 1 << 50, math.MaxInt64} {
		if p, err := m.Alloc(n); !errors.Is(err, plugin.ErrOutOfMemory) || !strings.Contains(err.Error(), "bytes") {
			t.Errorf("Alloc(%d) = %#x, %v; want ErrOutOfMemory with the size", n, uint64(p), err)
		}
	}
	p, err := m.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	// With 1 MiB in use, the machine's whole memory more is too much.
	if _, err := m.Alloc(limit - 1<<19); !errors.Is(err, plugin.ErrOutOfMemory) || !strings.Contains(err.Error(), "in use") {
		t.Errorf("Alloc of the machine's memory with 1 MiB in use: %v, want ErrOutOfMemory", err)
	}
	if err := m.Free(p); err != nil {
		t.Fatal(err)
	}
}

func TestParseThreshold(t *testing.T) {
	for s, want := range map[string]int64{"0": 0, "1048576": 1 << 20, " 42 ": 42} {
		if v, err := ParseThreshold("X", s); err != nil || v != want {
			t.Errorf("%q: %d, %v; want %d", s, v, err, want)
		}
	}
	for _, s := range []string{"-1", "1MiB", "", "99999999999999999999", "1152921504606846976"} {
		if _, err := ParseThreshold("X", s); err == nil || !strings.Contains(err.Error(), `X="`+s+`"`) {
			t.Errorf("%q: %v, want an error naming the variable and the value", s, err)
		}
	}
}

// AllocAt takes the range the caller chose; one whose memory cannot be had
// is still taken, and every use of it reports why, until it is freed.
func TestAllocAt(t *testing.T) {
	m := New(1 << 20)
	const base = plugin.Ptr(1 << 52)
	if err := m.AllocAt(base, 100); err != nil {
		t.Fatal(err)
	}
	b, err := m.Bytes(base+10, 90)
	if err != nil || len(b) != 90 {
		t.Fatalf("Bytes: %d bytes, %v", len(b), err)
	}
	if err := m.AllocAt(base+50, 10); !errors.Is(err, plugin.ErrBadPointer) {
		t.Errorf("overlapping AllocAt: %v, want ErrBadPointer", err)
	}
	huge := base + 1<<30
	if err := m.AllocAt(huge, Limit()+1); !errors.Is(err, plugin.ErrOutOfMemory) {
		t.Fatalf("AllocAt past the machine's memory: %v, want ErrOutOfMemory", err)
	}
	if _, err := m.Bytes(huge+8, 8); !errors.Is(err, plugin.ErrOutOfMemory) || !strings.Contains(err.Error(), "failed") {
		t.Errorf("Bytes of a failed allocation: %v, want its ErrOutOfMemory", err)
	}
	if err := m.Free(huge); err != nil {
		t.Errorf("Free of a failed allocation: %v", err)
	}
	if err := m.Free(base); err != nil {
		t.Fatal(err)
	}
	if _, _, inUse := m.Stats(); inUse != 0 {
		t.Errorf("%d bytes in use after every allocation was freed", inUse)
	}
}
