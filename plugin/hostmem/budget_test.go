package hostmem

import (
	"errors"
	"strings"
	"testing"

	"github.com/goffload/offload/plugin"
)

// TestBudgetAcrossMemories (issue 47 item 14): two memories charged to one
// budget hold at most its limit together; a refusal wraps ErrOutOfMemory
// and says where the limit comes from; Free, a failed AllocAt's Free and
// Reset give their bytes back.
func TestBudgetAcrossMemories(t *testing.T) {
	b := NewBudget(1<<20, "GOFFLOAD_DEVICE_MEMORY=1048576")
	m1, m2 := New(0), New(0)
	m1.SetBudget(b)
	m2.SetBudget(b)
	p1, err := m1.Alloc(600 << 10)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m2.Alloc(600 << 10); !errors.Is(err, plugin.ErrOutOfMemory) || !strings.Contains(err.Error(), "GOFFLOAD_DEVICE_MEMORY=1048576") || !strings.Contains(err.Error(), "every host of the device") {
		t.Fatalf("a second memory past the budget: %v, want ErrOutOfMemory naming the limit", err)
	}
	// A host-numbered allocation past it keeps its range and reports the
	// error at its first use.
	if err := m2.AllocAt(0x1000, 600<<10); !errors.Is(err, plugin.ErrOutOfMemory) {
		t.Fatalf("AllocAt past the budget: %v", err)
	}
	if _, err := m2.Bytes(0x1000, 8); !errors.Is(err, plugin.ErrOutOfMemory) {
		t.Fatalf("a use of the refused range: %v, want its ErrOutOfMemory", err)
	}
	if err := m2.Free(0x1000); err != nil {
		t.Fatal(err)
	}
	if got := b.Used(); got != 600<<10 {
		t.Fatalf("budget used %d after a refused AllocAt was freed, want %d", got, 600<<10)
	}
	if err := m1.Free(p1); err != nil {
		t.Fatal(err)
	}
	if err := m2.AllocAt(0x1000, 600<<10); err != nil {
		t.Fatalf("AllocAt once the other memory freed its block: %v", err)
	}
	if _, err := m1.Alloc(300 << 10); err != nil {
		t.Fatal(err)
	}
	if got := b.Used(); got != 900<<10 {
		t.Fatalf("budget used %d, want %d", got, 900<<10)
	}
	m2.Reset()
	m1.Reset()
	if got := b.Used(); got != 0 {
		t.Fatalf("budget used %d after both memories were reset, want 0", got)
	}
}
