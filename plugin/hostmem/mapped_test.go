package hostmem

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/goffload/offload/plugin"
)

// mappedAt reports whether the process has a mapping that holds address p
// (/proc/self/maps).
func mappedAt(t *testing.T, p plugin.Ptr) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		var lo, hi uint64
		if _, err := fmt.Sscanf(line, "%x-%x", &lo, &hi); err == nil && lo <= uint64(p) && uint64(p) < hi {
			return true
		}
	}
	return false
}

// TestMappedOutsideHeap: NewMapped's big blocks do not grow the Go heap
// (New's do), hold what is written, and are unmapped when freed.
func TestMappedOutsideHeap(t *testing.T) {
	const size = 32 << 20
	grows := func(m *Memory) (int64, plugin.Ptr) {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		p, err := m.Alloc(size)
		if err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		return int64(after.HeapAlloc) - int64(before.HeapAlloc), p
	}
	heap := New(0)
	if grew, p := grows(heap); grew < size/2 {
		t.Errorf("New: Alloc of %d bytes grew the heap by %d: the measure does not see it", size, grew)
	} else {
		heap.Free(p)
	}
	m := NewMapped(0)
	grew, p := grows(m)
	if grew >= size/2 {
		t.Errorf("NewMapped: Alloc of %d bytes grew the Go heap by %d", size, grew)
	}
	if mapped, _ := m.Mapped(); mapped != size {
		t.Errorf("Mapped() = %d, want %d", mapped, size)
	}
	m.Pin()
	b, err := m.Bytes(p+size-10, 10)
	if err != nil {
		t.Fatal(err)
	}
	copy(b, "0123456789")
	b2, _ := m.Bytes(p+size-10, 10)
	if string(b2) != "0123456789" {
		t.Errorf("read back %q", b2)
	}
	m.Unpin()
	if !mappedAt(t, p) {
		t.Fatalf("%#x: no mapping while allocated", uint64(p))
	}
	if err := m.Free(p); err != nil {
		t.Fatal(err)
	}
	if mappedAt(t, p) {
		t.Errorf("%#x still mapped after Free", uint64(p))
	}
	// Small blocks stay Go memory.
	if q, err := m.Alloc(MapMin / 2); err != nil {
		t.Fatal(err)
	} else if mapped, _ := m.Mapped(); mapped != 0 {
		t.Errorf("a block of %d bytes was mapped", MapMin/2)
	} else {
		m.Free(q)
	}
}

// TestPinDefersUnmap: a block freed while a use holds a Pin stays mapped
// (its bytes still readable) until the last Unpin; the pool keeps mapped
// blocks, and Reset unmaps them.
func TestPinDefersUnmap(t *testing.T) {
	m := NewMapped(0)
	p, err := m.Alloc(2 * MapMin)
	if err != nil {
		t.Fatal(err)
	}
	m.Pin()
	m.Pin()
	b, _ := m.Bytes(p, 16)
	if err := m.Free(p); err != nil {
		t.Fatal(err)
	}
	if _, waiting := m.Mapped(); waiting != 2*MapMin {
		t.Errorf("freed while pinned: %d bytes wait, want %d", waiting, 2*MapMin)
	}
	b[0] = 1 // still mapped: no fault
	m.Unpin()
	if !mappedAt(t, p) {
		t.Errorf("unmapped with a Pin left")
	}
	m.Unpin()
	if _, waiting := m.Mapped(); waiting != 0 || mappedAt(t, p) {
		t.Errorf("after the last Unpin: %d bytes wait, mapped %v; want 0, false", waiting, mappedAt(t, p))
	}
	if m.Pins() != 0 {
		t.Errorf("Pins() = %d", m.Pins())
	}

	pool := NewMapped(4 * MapMin)
	q, _ := pool.Alloc(MapMin)
	pool.Free(q)
	if mapped, _ := pool.Mapped(); mapped != MapMin || !mappedAt(t, q) {
		t.Errorf("pooled block: %d bytes mapped, want %d", mapped, MapMin)
	}
	if q2, _ := pool.Alloc(MapMin); q2 != q {
		t.Errorf("Alloc after Free = %#x, want the pooled %#x", uint64(q2), uint64(q))
	}
	pool.Reset()
	if mapped, _ := pool.Mapped(); mapped != 0 || mappedAt(t, q) {
		t.Errorf("after Reset: %d bytes mapped", mapped)
	}
}

// TestCopy: Copy is copy, chunk boundaries and all.
func TestCopy(t *testing.T) {
	for _, n := range []int{0, 1, copyChunk - 1, copyChunk, 3*copyChunk + 17} {
		src := make([]byte, n)
		for i := range src {
			src[i] = byte(i * 31)
		}
		dst := make([]byte, n+5)
		if got := Copy(dst, src); got != n || !bytes.Equal(dst[:n], src) {
			t.Errorf("Copy of %d bytes: %d, equal %v", n, got, bytes.Equal(dst[:n], src))
		}
		if got := Copy(src, src); got != n {
			t.Errorf("Copy onto itself: %d", got)
		}
	}
}

// TestShare: a shared buffer resolves to its own memory, inside and whole;
// overlapping lendings cover their union until each is ended; Free of an
// address lent twice ends the shorter lending first.
func TestShare(t *testing.T) {
	m := New(0)
	buf := make([]byte, 300)
	base := plugin.Ptr(uintptr(unsafe.Pointer(&buf[0])))
	if _, err := m.Share(nil); !errors.Is(err, plugin.ErrBadPointer) {
		t.Errorf("Share(nil): %v", err)
	}
	p, err := m.Share(buf[:100])
	if err != nil || p != base {
		t.Fatalf("Share = %#x, %v; want the host address %#x", uint64(p), err, uint64(base))
	}
	b, err := m.Bytes(p+10, 20)
	if err != nil || &b[0] != &buf[10] || len(b) != 20 {
		t.Fatalf("Bytes inside a shared buffer: %v, %v", len(b), err)
	}
	if b, err := m.Bytes(p+99, 0); err != nil || len(b) != 0 || unsafe.SliceData(b) != &buf[99] {
		t.Errorf("Bytes of 0 at the last byte: %v", err)
	}
	if _, err := m.Bytes(p+50, 51); !errors.Is(err, plugin.ErrBadPointer) {
		t.Errorf("Bytes past the shared buffer: %v", err)
	}
	// A lending that overlaps: the union resolves.
	if _, err := m.Share(buf[50:200]); err != nil {
		t.Fatal(err)
	}
	if b, err := m.Bytes(p+40, 100); err != nil || &b[0] != &buf[40] {
		t.Errorf("Bytes across two overlapping lendings: %v", err)
	}
	if m.SharedBytes() != 200 {
		t.Errorf("SharedBytes = %d, want 200", m.SharedBytes())
	}
	if err := m.Free(p + 50); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Bytes(p+150, 1); !errors.Is(err, plugin.ErrBadPointer) {
		t.Errorf("after the second lending ended, its bytes resolve: %v", err)
	}
	if _, err := m.Bytes(p, 100); err != nil {
		t.Errorf("after the second lending ended, the first's: %v", err)
	}
	// The same address lent twice, short and long: the short one ends first.
	if _, err := m.Share(buf[:10]); err != nil {
		t.Fatal(err)
	}
	if err := m.Free(p); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Bytes(p, 100); err != nil {
		t.Errorf("the long lending ended first: %v", err)
	}
	if err := m.Free(p); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Bytes(p, 1); !errors.Is(err, plugin.ErrBadPointer) {
		t.Errorf("after every lending ended: %v", err)
	}
	if err := m.Free(p); !errors.Is(err, plugin.ErrBadPointer) {
		t.Errorf("Free with no lending left: %v", err)
	}
	if m.SharedBytes() != 0 {
		t.Errorf("SharedBytes = %d, want 0", m.SharedBytes())
	}
	// Lendings that touch but do not overlap stay apart.
	m.Share(buf[:100])
	m.Share(buf[100:200])
	if _, err := m.Bytes(p+90, 20); !errors.Is(err, plugin.ErrBadPointer) {
		t.Errorf("Bytes across two touching lendings: %v, want ErrBadPointer", err)
	}
	m.Reset()
	if m.SharedBytes() != 0 {
		t.Errorf("after Reset: SharedBytes %d", m.SharedBytes())
	}
}

func TestParseSharing(t *testing.T) {
	for s, want := range map[string]bool{"": false, "separate": false, "shared": true, " shared ": true} {
		if v, err := ParseSharing("X", s); err != nil || v != want {
			t.Errorf("%q: %v, %v; want %v", s, v, err, want)
		}
	}
	for _, s := range []string{"Shared", "unified", "1"} {
		if _, err := ParseSharing("X", s); err == nil || !strings.Contains(err.Error(), `X="`+s+`"`) {
			t.Errorf("%q: %v, want an error naming the variable and the value", s, err)
		}
	}
}

// TestShareConcurrent: goroutines lend overlapping sections of one buffer,
// resolve them and end them at once; each sees its own bytes throughout,
// and nothing is left lent at the end (run under -race).
func TestShareConcurrent(t *testing.T) {
	m := NewMapped(0)
	buf := make([]byte, 1<<16)
	own, err := m.Alloc(2 * MapMin) // a mapped block beside the lent ones
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				lo := (g*977 + i*131) % (len(buf) - 512)
				s := buf[lo : lo+256+i%256]
				p, err := m.Share(s)
				if err != nil {
					t.Error(err)
					return
				}
				b, err := m.Bytes(p+1, int64(len(s)-1))
				if err != nil || &b[0] != &s[1] {
					t.Errorf("goroutine %d: Bytes inside its lent section: %v", g, err)
					return
				}
				m.Pin()
				if _, err := m.Bytes(own, 2*MapMin); err != nil {
					t.Error(err)
				}
				m.Unpin()
				if err := m.Free(p); err != nil {
					t.Errorf("goroutine %d: Free: %v", g, err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := m.SharedBytes(); n != 0 {
		t.Errorf("%d bytes still lent", n)
	}
	if err := m.Free(own); err != nil {
		t.Fatal(err)
	}
}
