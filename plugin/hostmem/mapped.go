package hostmem

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/goffload/offload/plugin"
)

// MapMin is the smallest block that memory from NewMapped maps outside the Go
// heap. Smaller blocks are Go memory.
const MapMin = 1 << 20

// copyChunk is how many bytes Copy copies between two points where the
// goroutine can be preempted. It is about 25 µs of memory bandwidth.
const copyChunk = 256 << 10

// Copy copies min(len(dst), len(src)) bytes from src to dst, as copy does,
// and returns that count. It copies in chunks. Go's copy of a big slice is
// one call that no stop of the world can interrupt. A garbage collection that
// begins meanwhile would hold every goroutine of the program until it ends.
func Copy(dst, src []byte) int {
	n := min(len(dst), len(src))
	if n > 0 && &dst[0] == &src[0] {
		return n // the same memory (a shared buffer): nothing to move
	}
	for off := 0; off < n; off += copyChunk {
		end := min(off+copyChunk, n)
		copyPart(dst[off:end], src[off:end])
	}
	return n
}

// copyPart is one chunk of Copy. It is a call of its own on purpose: its
// prologue is where a stop of the world preempts the copying goroutine.
// Asynchronous preemption, a signal, nearly always lands inside the runtime's
// memmove, where it cannot stop.
//
//go:noinline
func copyPart(dst, src []byte) { copy(dst, src) }

// isMapped reports whether b, a block of m, is a mapping.
func (m *Memory) isMapped(b []byte) bool { return m.mapped && len(b) >= MapMin }

// mapBlock maps n bytes of anonymous memory, zeroed.
func mapBlock(n int64) ([]byte, error) {
	if err := CheckSize(n); err != nil {
		return nil, err
	}
	b, err := syscall.Mmap(-1, 0, int(n), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS)
	if err != nil { // ENOMEM, or a limit (ulimit -v) reached
		return nil, fmt.Errorf("%w: cannot map %d bytes (%s): %w", plugin.ErrOutOfMemory, n, human(n), err)
	}
	return b, nil
}

// Pin holds off the unmapping of blocks freed from now on until the matching
// Unpin. The user of memory from NewMapped pins before it calls Bytes. It
// unpins once it no longer touches the bytes it got: a kernel, a copy. Pins
// nest and may be taken by many goroutines at once. Memory from New needs
// none (its blocks are Go memory), but takes them.
func (m *Memory) Pin() { m.unmaps.pins.Add(1) }

// Unpin ends a Pin. The last one unmaps the blocks freed meanwhile.
func (m *Memory) Unpin() {
	u := &m.unmaps
	if u.pins.Add(-1) == 0 && u.waiting.Load() {
		u.mu.Lock()
		u.sweep()
		u.mu.Unlock()
	}
}

// Pins is how many Pins are not yet ended, for tests.
func (m *Memory) Pins() int64 { return m.unmaps.pins.Load() }

// Mapped reports the bytes of m's blocks that are mappings, live and pooled.
// It reports those of the freed blocks whose unmapping waits for Unpin too.
func (m *Memory) Mapped() (mapped, waiting int64) {
	m.mu.RLock()
	m.live.Ascend(func(a *allocation) bool {
		if m.isMapped(a.buf) {
			mapped += int64(len(a.buf))
		}
		return true
	})
	for _, free := range m.pool {
		for _, b := range free {
			if m.isMapped(b) {
				mapped += int64(len(b))
			}
		}
	}
	m.mu.RUnlock()
	m.unmaps.mu.Lock()
	for _, b := range m.unmaps.dead {
		waiting += int64(len(b))
	}
	m.unmaps.mu.Unlock()
	return mapped, waiting
}

// unmapper unmaps freed blocks once no Pin is left.
type unmapper struct {
	pins    atomic.Int64
	waiting atomic.Bool // dead is not empty
	mu      sync.Mutex
	dead    [][]byte
}

// unmap unmaps b now, or once the last Pin ends.
func (u *unmapper) unmap(b []byte) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.dead = append(u.dead, b)
	u.waiting.Store(true)
	// After waiting is set: an Unpin that ends the last pin now either
	// is seen here or sees waiting itself.
	if u.pins.Load() == 0 {
		u.sweep()
	}
}

// sweep unmaps the dead blocks if no Pin is left; u.mu is held.
func (u *unmapper) sweep() {
	if u.pins.Load() != 0 {
		return
	}
	for i, b := range u.dead {
		_ = syscall.Munmap(b) // b is a mapping of ours, whole: this cannot fail
		u.dead[i] = nil
	}
	u.dead = u.dead[:0]
	u.waiting.Store(false)
}
