package core

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"weak"

	"github.com/goffload/offload/plugin"
)

// The live allocations that the memory routines (omp_target_alloc) made on
// each device, so that a pointer to memory that was freed — whose block a
// later allocation may reuse — is refused instead of writing into someone
// else's data. Each allocation gets a generation number that no other
// allocation in the process ever gets; a DevicePtr carries its allocation's
// start and generation, and is live while the table maps that start to that
// generation. Free removes the entry, so the table holds only live
// allocations. The table of a device lives as long as the device does (it is
// dropped when the runtime that opened the device is collected).

// allocTable is one device's live allocations.
type allocTable struct {
	mu   sync.RWMutex
	live map[plugin.Ptr]allocRec
}

type allocRec struct {
	size int64
	gen  uint64
}

var (
	allocGen    atomic.Uint64
	allocTables sync.Map // weak.Pointer[Device] -> *allocTable
)

// allocs returns d's table, creating it if create is set (nil otherwise).
func (d *Device) allocs(create bool) *allocTable {
	key := weak.Make(d)
	if t, ok := allocTables.Load(key); ok {
		return t.(*allocTable)
	}
	if !create {
		return nil
	}
	t, loaded := allocTables.LoadOrStore(key, &allocTable{live: map[plugin.Ptr]allocRec{}})
	if !loaded {
		runtime.AddCleanup(d, func(k weak.Pointer[Device]) { allocTables.Delete(k) }, key)
	}
	return t.(*allocTable)
}

// TrackAlloc records an allocation of size bytes at p made by Alloc and
// returns its generation, which CheckAlloc and UntrackAlloc take.
func (d *Device) TrackAlloc(p plugin.Ptr, size int64) uint64 {
	gen := allocGen.Add(1)
	t := d.allocs(true)
	t.mu.Lock()
	t.live[p] = allocRec{size: size, gen: gen}
	t.mu.Unlock()
	return gen
}

// CheckAlloc reports an error wrapping plugin.ErrBadPointer if the
// allocation that starts at base with generation gen is no longer live.
// It was freed, and its memory may belong to another allocation now.
// Or it belongs to a runtime that was stopped.
func (d *Device) CheckAlloc(base plugin.Ptr, gen uint64) error {
	if t := d.allocs(false); t != nil {
		t.mu.RLock()
		rec, ok := t.live[base]
		t.mu.RUnlock()
		if ok && rec.gen == gen {
			return nil
		}
	}
	return fmt.Errorf("%w: the allocation at %#x on %s was freed (its memory may belong to another allocation now), or comes from before the runtime was last started",
		plugin.ErrBadPointer, uint64(base), d.Label())
}

// UntrackAlloc removes the allocation at base with generation gen, checking
// first that it is live (see CheckAlloc): a second Free of a pointer, whose
// block another allocation may have reused since, is refused.
func (d *Device) UntrackAlloc(base plugin.Ptr, gen uint64) error {
	if t := d.allocs(false); t != nil {
		t.mu.Lock()
		rec, ok := t.live[base]
		if ok && rec.gen == gen {
			delete(t.live, base)
			t.mu.Unlock()
			return nil
		}
		t.mu.Unlock()
	}
	return fmt.Errorf("%w: the allocation at %#x on %s was freed already, or comes from before the runtime was last started",
		plugin.ErrBadPointer, uint64(base), d.Label())
}

// LiveAllocs is the number of allocations of d that the memory routines
// made and did not free.
func (d *Device) LiveAllocs() int {
	t := d.allocs(false)
	if t == nil {
		return 0
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.live)
}
