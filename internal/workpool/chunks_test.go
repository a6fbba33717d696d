package workpool

import (
	"sync/atomic"
	"testing"
)

// TestBounds: the chunks of [0, n) are contiguous, in order, cover it
// exactly, and their sizes are n/k or n/k+1, the larger ones first (OpenMP's
// schedule(static)).
func TestBounds(t *testing.T) {
	for _, n := range []int{1, 2, 3, 7, 8, 9, 100, 1001} {
		for k := 1; k <= min(n, 17); k++ {
			next := 0
			for c := range k {
				b := Bounds(n, k, c)
				want := n / k
				if c < n%k {
					want++
				}
				if b.Index != c || b.Count != k || b.Lo != next || b.Hi-b.Lo != want {
					t.Fatalf("Bounds(%d, %d, %d) = %+v, want Lo %d and %d elements", n, k, c, b, next, want)
				}
				next = b.Hi
			}
			if next != n {
				t.Fatalf("n=%d k=%d: chunks end at %d", n, k, next)
			}
		}
	}
	// No overflow for loops longer than any slice.
	const big = int(^uint(0) >> 1)
	if b := Bounds(big, 4096, 4095); b.Hi != big || b.Lo != big-big/4096 {
		t.Errorf("Bounds(MaxInt, 4096, 4095) = %+v", b)
	}
}

// TestForChunks: every chunk runs once, with the range Bounds gives it, and
// For passes the same ranges.
func TestForChunks(t *testing.T) {
	p := New(3)
	defer p.Close()
	for _, n := range []int{-1, 0, 1, 2, 3, 4, 7, 1000} {
		k := p.Chunks(n)
		if want := max(0, min(n, 3)); k != want {
			t.Fatalf("Chunks(%d) = %d, want %d", n, k, want)
		}
		ran := make([]atomic.Int32, k)
		p.ForChunks(n, func(c Chunk) {
			if c.Count != k || c.Index < 0 || c.Index >= k || c != Bounds(n, k, c.Index) {
				t.Errorf("n=%d: chunk %+v, want %+v", n, c, Bounds(n, k, c.Index))
				return
			}
			ran[c.Index].Add(1)
		})
		for i := range ran {
			if ran[i].Load() != 1 {
				t.Fatalf("n=%d: chunk %d ran %d times", n, i, ran[i].Load())
			}
		}
		los := make([]atomic.Int64, k)
		p.For(n, func(lo, hi int) {
			for i := range k {
				if b := Bounds(n, k, i); b.Lo == lo && b.Hi == hi {
					los[i].Add(1)
					return
				}
			}
			t.Errorf("n=%d: For ran [%d, %d), not a chunk", n, lo, hi)
		})
		for i := range los {
			if los[i].Load() != 1 {
				t.Fatalf("n=%d: For ran chunk %d %d times", n, i, los[i].Load())
			}
		}
	}
}
