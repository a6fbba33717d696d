package hostmem

import (
	"fmt"
	"sync/atomic"

	"github.com/goffload/offload/plugin"
)

// Budget bounds the bytes that several Memories hold together. A device
// process that serves several hosts gives each host's session a Memory of its
// own; their addresses overlap. It charges them all to one Budget. So the
// hosts together cannot take more than the device allows.
type Budget struct {
	limit int64
	what  string // what the limit is, for errors
	used  atomic.Int64
}

// NewBudget returns a budget of limit bytes. what says in errors where the
// limit comes from: "GOFFLOAD_DEVICE_MEMORY=1073741824", say.
func NewBudget(limit int64, what string) *Budget {
	return &Budget{limit: limit, what: what}
}

// Used reports the bytes charged to b now.
func (b *Budget) Used() int64 { return b.used.Load() }

// take charges n bytes, or reports why it cannot.
func (b *Budget) take(n int64) error {
	if used := b.used.Add(n); used > b.limit {
		b.used.Add(-n)
		return fmt.Errorf("%w: %d bytes (%s) with %d bytes (%s) in use by every host of the device is more than its limit of %d bytes (%s, %s)",
			plugin.ErrOutOfMemory, n, human(n), used-n, human(used-n), b.limit, human(b.limit), b.what)
	}
	return nil
}

// give returns n bytes to b.
func (b *Budget) give(n int64) {
	if b != nil && n != 0 {
		b.used.Add(-n)
	}
}

// SetBudget charges m's allocations to b from now on. Call it before the
// first allocation.
func (m *Memory) SetBudget(b *Budget) {
	m.mu.Lock()
	m.budget = b
	m.mu.Unlock()
}
