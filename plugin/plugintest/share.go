package plugintest

import (
	"errors"
	"testing"
	"unsafe"

	"github.com/goffload/offload/plugin"
)

// testHostSharer checks what a plugin.HostSharer promises. The device address
// of a lent buffer is its host address. Kernels and copies work on the buffer
// in place. A copy of the buffer onto itself leaves it as it is. Ranges past
// it are refused. Free ends the lending and leaves the buffer alone. Memory
// from Alloc stays the device's own (the rest of the suite checks its copies
// on the same devices).
func (e *env) testHostSharer(t *testing.T) {
	if _, ok := e.devs[0].(plugin.HostSharer); !ok {
		t.Skip("the kind does not share the host's memory (plugin.HostSharer is optional)")
	}
	devs := e.openLoaded(t)
	for di, d := range devs[:2] {
		sh := d.(plugin.HostSharer)
		if p, err := sh.ShareHost(nil); err == nil {
			t.Errorf("device %d: ShareHost of an empty buffer = %#x, nil; want an error", di, uint64(p))
			_ = d.Free(p)
		}
		x := make([]int64, 512)
		for i := range x {
			x[i] = int64(i)
		}
		xb := asBytes(x)
		p, err := sh.ShareHost(xb)
		if err != nil {
			t.Fatalf("device %d: ShareHost: %v", di, err)
		}
		if want := plugin.Ptr(uintptr(unsafe.Pointer(&x[0]))); p != want {
			t.Errorf("device %d: ShareHost = %#x, want the host address %#x", di, uint64(p), uint64(want))
		}
		q := newQueue(t, d)
		// A kernel writes the host's buffer; no copy brings it back.
		launch(t, q, kFillInt64, slice(p+8*256, 256), scalar(int64(-1)))
		mustSync(t, q)
		for i, v := range x {
			want := int64(i)
			if i >= 256 {
				want = -1
			}
			if v != want {
				t.Fatalf("device %d: after a kernel on the lent buffer x[%d] = %d, want %d", di, i, v, want)
			}
		}
		// The host's writes are the device's: a retrieve reads them.
		x[3] = 33
		if got := fromBytes[int64](get(t, q, p, len(xb))); got[3] != 33 || got[300] != -1 {
			t.Errorf("device %d: retrieve of the lent buffer read x[3] = %d, x[300] = %d; want 33, -1", di, got[3], got[300])
		}
		// A submit of the buffer onto itself leaves it; one of other
		// bytes writes it.
		put(t, q, p, xb)
		put(t, q, p+8, asBytes([]int64{44}))
		mustSync(t, q)
		if x[0] != 0 || x[1] != 44 || x[3] != 33 {
			t.Errorf("device %d: after submits x[:4] = %v, want [0 44 2 33]", di, x[:4])
		}
		out := make([]byte, 16)
		err = q.Retrieve(out, p+plugin.Ptr(len(xb))-8)
		expectErr(t, "retrieve past the end of a lent buffer", q, err, plugin.ErrBadPointer)
		// Free ends the lending; the buffer stays as it is.
		if err := d.Free(p); err != nil {
			t.Fatalf("device %d: Free of a lent buffer: %v", di, err)
		}
		if x[1] != 44 || x[300] != -1 {
			t.Errorf("device %d: Free changed the host's buffer", di)
		}
		err = q.Submit(p, xb[:8])
		expectErr(t, "submit to a buffer whose lending ended", q, err, plugin.ErrBadPointer)
		if err := d.Free(p); !errors.Is(err, plugin.ErrBadPointer) {
			t.Errorf("device %d: second Free of a lent buffer: %v, want ErrBadPointer", di, err)
		}
	}
}
