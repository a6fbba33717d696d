package workpool

import (
	"strings"
	"sync/atomic"
	"testing"
)

func TestForCoversOnce(t *testing.T) {
	p := New(3)
	defer p.Close()
	for _, n := range []int{0, 1, 2, 3, 7, 1000} {
		hits := make([]atomic.Int32, n)
		p.For(n, func(lo, hi int) {
			p.For(hi-lo, func(a, b int) { // nested loops do not deadlock
				for i := lo + a; i < lo+b; i++ {
					hits[i].Add(1)
				}
			})
		})
		for i := range hits {
			if hits[i].Load() != 1 {
				t.Fatalf("n=%d: index %d ran %d times", n, i, hits[i].Load())
			}
		}
	}
}

func TestForPanics(t *testing.T) {
	p := New(2)
	defer p.Close()
	defer func() {
		r := recover()
		pe, ok := r.(*PanicError)
		if !ok || pe.Value != "chunk" || !strings.Contains(pe.Error(), "goroutine") {
			t.Errorf("recovered %v, want a *PanicError with the value and stack", r)
		}
	}()
	p.For(10, func(lo, hi int) {
		if lo > 0 {
			panic("chunk")
		}
	})
}

func TestForAfterClose(t *testing.T) {
	p := New(4)
	p.Close()
	var sum atomic.Int64
	p.For(100, func(lo, hi int) { sum.Add(int64(hi - lo)) })
	if sum.Load() != 100 {
		t.Errorf("sum %d", sum.Load())
	}
}
