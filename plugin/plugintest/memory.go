package plugintest

import (
	"errors"
	"math"
	"testing"

	"github.com/goffload/offload/plugin"
)

func (e *env) testAlloc(t *testing.T) {
	sizes := []int64{0, 1, 7, 4096, 1<<20 + 3}
	for di, d := range e.devs[:2] {
		q := newQueue(t, d)
		ptrs := make([]plugin.Ptr, len(sizes))
		for i, n := range sizes {
			p, err := d.Alloc(n)
			if err != nil {
				t.Fatalf("device %d: Alloc(%d): %v", di, n, err)
			}
			ptrs[i] = p
		}
		// Every allocation is distinct, a zero-sized one included, and no two
		// overlap.
		for i := range ptrs {
			for j := i + 1; j < len(ptrs); j++ {
				ai, aj := ptrs[i], ptrs[j]
				ei, ej := ai+plugin.Ptr(max(sizes[i], 1)), aj+plugin.Ptr(max(sizes[j], 1))
				if ai < ej && aj < ei {
					t.Errorf("device %d: Alloc(%d) = %#x and Alloc(%d) = %#x overlap", di, sizes[i], uint64(ai), sizes[j], uint64(aj))
				}
			}
		}
		// Every byte of every allocation holds what was written.
		for i, n := range sizes {
			if n == 0 {
				continue
			}
			want := pattern(int(n), byte(i+1))
			put(t, q, ptrs[i], want)
		}
		mustSync(t, q)
		for i, n := range sizes {
			if n == 0 {
				continue
			}
			if diff := firstDiff(get(t, q, ptrs[i], int(n)), pattern(int(n), byte(i+1))); diff != "" {
				t.Errorf("device %d: allocation of %d bytes: read back %s", di, n, diff)
			}
		}
		for i, p := range ptrs {
			if err := d.Free(p); err != nil {
				t.Errorf("device %d: Free(Alloc(%d)): %v", di, sizes[i], err)
			}
		}
	}

	d := e.devs[0]
	// A zero-sized allocation can be freed, again and again.
	for i := 0; i < 3; i++ {
		p, err := d.Alloc(0)
		if err != nil {
			t.Fatalf("Alloc(0): %v", err)
		}
		if err := d.Free(p); err != nil {
			t.Errorf("Free of a zero-sized allocation: %v", err)
		}
	}
	if p, err := d.Alloc(-1); err == nil {
		t.Errorf("Alloc(-1) = %#x, nil; want an error", uint64(p))
		_ = d.Free(p)
	}
	// More memory than any device has is an error, not a crash.
	for _, n := range []int64{1 << 50, math.MaxInt64} {
		if p, err := d.Alloc(n); !errors.Is(err, plugin.ErrOutOfMemory) {
			t.Errorf("Alloc(%d) = %#x, %v; want an error wrapping ErrOutOfMemory", n, uint64(p), err)
			if err == nil {
				_ = d.Free(p)
			}
		}
	}
}

func (e *env) testFree(t *testing.T) {
	d := e.devs[0]
	p, err := d.Alloc(7)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Free(p + 1); !errors.Is(err, plugin.ErrBadPointer) {
		t.Errorf("Free(base+1) = %v, want an error wrapping ErrBadPointer", err)
	}
	if err := d.Free(p); err != nil {
		t.Fatalf("Free(base) after a refused Free(base+1): %v", err)
	}
	if err := d.Free(p); !errors.Is(err, plugin.ErrBadPointer) {
		t.Errorf("double Free = %v, want an error wrapping ErrBadPointer", err)
	}
	z, err := d.Alloc(0)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Free(z); err != nil {
		t.Errorf("Free of a zero-sized allocation: %v", err)
	}
	if err := d.Free(z); !errors.Is(err, plugin.ErrBadPointer) {
		t.Errorf("double Free of a zero-sized allocation = %v, want an error wrapping ErrBadPointer", err)
	}
}

func (e *env) testSubmitRetrieve(t *testing.T) {
	d := e.devs[0]
	q := newQueue(t, d)
	for _, n := range []int{1, 3, 4095, 65537, 1<<20 + 13} {
		for _, off := range []int{0, 1, 4093} {
			total := off + n + 5
			p, err := d.Alloc(int64(total))
			if err != nil {
				t.Fatalf("Alloc(%d): %v", total, err)
			}
			bg, pat := pattern(total, 1), pattern(n, 2)
			put(t, q, p, bg)
			put(t, q, p+plugin.Ptr(off), pat)
			part := make([]byte, n)
			if err := q.Retrieve(part, p+plugin.Ptr(off)); err != nil {
				t.Fatalf("Retrieve(%d bytes, base+%d): %v", n, off, err)
			}
			whole := make([]byte, total)
			if err := q.Retrieve(whole, p); err != nil {
				t.Fatalf("Retrieve(%d bytes, base): %v", total, err)
			}
			mustSync(t, q)
			if diff := firstDiff(part, pat); diff != "" {
				t.Errorf("%d bytes at offset %d: read back %s", n, off, diff)
			}
			want := append(append(append([]byte(nil), bg[:off]...), pat...), bg[off+n:]...)
			if diff := firstDiff(whole, want); diff != "" {
				t.Errorf("%d bytes at offset %d: whole allocation: %s", n, off, diff)
			}
			// The last byte of the allocation on its own.
			put(t, q, p+plugin.Ptr(total-1), []byte{0x5a})
			if got := get(t, q, p+plugin.Ptr(total-1), 1); got[0] != 0x5a {
				t.Errorf("last byte of a %d-byte allocation reads %#02x, want 0x5a", total, got[0])
			}
			if err := d.Free(p); err != nil {
				t.Errorf("Free: %v", err)
			}
		}
	}
}

func (e *env) testCopyBadRange(t *testing.T) {
	d := e.devs[0]
	q := newQueue(t, d)
	p := alloc(t, d, 16)
	put(t, q, p, pattern(16, 3))
	mustSync(t, q)

	expectErr(t, "Submit running past the end", q, q.Submit(p+8, make([]byte, 9)), plugin.ErrBadPointer)
	expectErr(t, "Submit at the end", q, q.Submit(p+16, make([]byte, 1)), plugin.ErrBadPointer)
	dst := pattern(9, 4)
	expectErr(t, "Retrieve running past the end", q, q.Retrieve(dst, p+8), plugin.ErrBadPointer)
	if diff := firstDiff(dst, pattern(9, 4)); diff != "" {
		t.Errorf("a failed Retrieve wrote the host buffer: %s", diff)
	}

	f, err := d.Alloc(32)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Free(f); err != nil {
		t.Fatal(err)
	}
	expectErr(t, "Submit to a freed allocation", q, q.Submit(f, make([]byte, 4)), plugin.ErrBadPointer)
	dst = pattern(4, 5)
	expectErr(t, "Retrieve from a freed allocation", q, q.Retrieve(dst, f), plugin.ErrBadPointer)
	if diff := firstDiff(dst, pattern(4, 5)); diff != "" {
		t.Errorf("a failed Retrieve wrote the host buffer: %s", diff)
	}

	// The refused copies changed nothing, and the queue works.
	if diff := firstDiff(get(t, q, p, 16), pattern(16, 3)); diff != "" {
		t.Errorf("allocation after refused copies: %s", diff)
	}
}

func (e *env) testExchange(t *testing.T) {
	d0, d1 := e.devs[0], e.devs[1]
	q0, q1 := newQueue(t, d0), newQueue(t, d1)
	x0, ok := q0.(plugin.Exchanger)
	if !ok {
		t.Skip("the kind's queues are not plugin.Exchangers: the core stages copies through host memory")
	}

	t.Run("SameDevice", func(t *testing.T) {
		a, b := alloc(t, d0, 8192), alloc(t, d0, 8192)
		pa, pb := pattern(8192, 6), pattern(8192, 7)
		put(t, q0, a, pa)
		put(t, q0, b, pb)
		if err := x0.Exchange(d0, b+5, a+3, 4000); err != nil {
			t.Fatalf("Exchange within the device: %v", err)
		}
		// Within one allocation, between non-overlapping ranges.
		if err := x0.Exchange(d0, a+6000, a+1, 100); err != nil {
			t.Fatalf("Exchange within an allocation: %v", err)
		}
		mustSync(t, q0)
		want0 := append([]byte(nil), pb...)
		copy(want0[5:], pa[3:4003])
		if diff := firstDiff(get(t, q0, b, 8192), want0); diff != "" {
			t.Errorf("Exchange(b+5, a+3, 4000): destination %s", diff)
		}
		want := append([]byte(nil), pa...)
		copy(want[6000:], pa[1:101])
		if diff := firstDiff(get(t, q0, a, 8192), want); diff != "" {
			t.Errorf("Exchange(a+6000, a+1, 100): %s", diff)
		}

		expectErr(t, "Exchange past the destination's end", q0, x0.Exchange(d0, b+8190, a, 4), plugin.ErrBadPointer)
		expectErr(t, "Exchange past the source's end", q0, x0.Exchange(d0, b, a+8190, 4), plugin.ErrBadPointer)
		expectErr(t, "Exchange of a negative size", q0, x0.Exchange(d0, b, a, -1), plugin.ErrBadPointer)
		expectErr(t, "Exchange of MaxInt64 bytes", q0, x0.Exchange(d0, b+1, a+1, math.MaxInt64), plugin.ErrBadPointer)
		if diff := firstDiff(get(t, q0, b, 8192), want0); diff != "" {
			t.Errorf("refused Exchanges changed the destination: %s", diff)
		}
	})

	t.Run("CrossDevice", func(t *testing.T) {
		const n = 65537
		for _, dir := range []struct {
			name           string
			srcDev, dstDev plugin.Device
			srcQ, dstQ     plugin.Queue
		}{{"0to1", d0, d1, q0, q1}, {"1to0", d1, d0, q1, q0}} {
			src, dst := alloc(t, dir.srcDev, n+3), alloc(t, dir.dstDev, n+20)
			ps, pd := pattern(n+3, 8), pattern(n+20, 9)
			put(t, dir.srcQ, src, ps)
			put(t, dir.dstQ, dst, pd)
			mustSync(t, dir.srcQ)
			mustSync(t, dir.dstQ)
			err := dir.srcQ.(plugin.Exchanger).Exchange(dir.dstDev, dst+7, src+3, n)
			if err == nil {
				err = qsync(t, dir.srcQ)
			}
			if errors.Is(err, plugin.ErrUnsupported) {
				t.Logf("%s: device-to-device Exchange unsupported: %v", dir.name, err)
				mustSync(t, dir.srcQ)
				continue
			}
			if err != nil {
				t.Fatalf("%s: Exchange between devices: %v (an unsupported copy must wrap ErrUnsupported)", dir.name, err)
			}
			want := append([]byte(nil), pd...)
			copy(want[7:], ps[3:])
			if diff := firstDiff(get(t, dir.dstQ, dst, n+20), want); diff != "" {
				t.Errorf("%s: Exchange between devices: destination %s", dir.name, diff)
			}
		}
	})
}

// testHostMemoryOrder checks that host memory is read and written in queue
// order. A Submit enqueued after a Retrieve of the same host bytes sends what
// the Retrieve wrote there. It does not send what was there when the Submit
// was enqueued.
func (e *env) testHostMemoryOrder(t *testing.T) {
	d := e.devs[0]
	q := newQueue(t, d)
	for _, n := range []int{8, 4096, 1<<20 + 3} {
		a, b := alloc(t, d, int64(n)), alloc(t, d, int64(n))
		put(t, q, a, pattern(n, 7))
		mustSync(t, q)
		host := pattern(n, 9) // stale until the retrieve lands
		if err := q.Retrieve(host, a); err != nil {
			t.Fatal(err)
		}
		if err := q.Submit(b, host); err != nil {
			t.Fatal(err)
		}
		back := make([]byte, n)
		if err := q.Retrieve(back, b); err != nil {
			t.Fatal(err)
		}
		mustSync(t, q)
		if diff := firstDiff(back, pattern(n, 7)); diff != "" {
			t.Errorf("%d bytes: a submit after a retrieve of the same host memory sent %s", n, diff)
		}
		d.Free(a)
		d.Free(b)
	}
}
