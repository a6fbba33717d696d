package opqueue

import "testing"

func nop() error { return nil }

// BenchmarkDo enqueues one operation on an idle queue and waits for it: a
// hand-off to the queue's goroutine per operation.
func BenchmarkDo(b *testing.B) {
	q := New()
	defer q.Close()
	b.ReportAllocs()
	for b.Loop() {
		if err := q.Do(nop); err != nil {
			b.Fatal(err)
		}
		if err := q.Synchronize(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDoBatch enqueues operations 64 at a time, then waits for them.
func BenchmarkDoBatch(b *testing.B) {
	q := New()
	defer q.Close()
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		if err := q.Do(nop); err != nil {
			b.Fatal(err)
		}
		if n++; n%64 == 0 {
			if err := q.Synchronize(); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := q.Synchronize(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkDoInline enqueues one operation on an idle inline queue (it
// runs on the caller) and synchronizes.
func BenchmarkDoInline(b *testing.B) {
	q := New()
	defer q.Close()
	q.SetInline(true)
	b.ReportAllocs()
	for b.Loop() {
		if err := q.Do(nop); err != nil {
			b.Fatal(err)
		}
		if err := q.Synchronize(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRunHere runs one operation on the caller of an idle queue.
func BenchmarkRunHere(b *testing.B) {
	q := New()
	defer q.Close()
	b.ReportAllocs()
	for b.Loop() {
		if ran, err := q.RunHere(nop, nil); !ran || err != nil {
			b.Fatal(ran, err)
		}
	}
}
