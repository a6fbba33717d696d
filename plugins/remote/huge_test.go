//go:build !race

// The race detector multiplies the memory of these buffers several times in
// both processes, more than CI machines have: .ci/run runs this file's test
// in a pass of its own without -race.

package remote_test

import (
	"testing"

	"github.com/goffload/offload/plugin"
)

// TestHugeTransfer moves a buffer over 2 GiB to a device process and back.
func TestHugeTransfer(t *testing.T) {
	const size = 2<<30 + 4099
	d := openLocal(t, 1)[0]
	p, err := d.Alloc(size)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, size)
	for _, i := range []int{0, 1 << 31, size - 1, size / 3} {
		buf[i] = byte(i%251 + 1)
	}
	q, _ := d.NewQueue()
	if err := q.Submit(p, buf); err != nil {
		t.Fatal(err)
	}
	if err := q.Synchronize(); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, size)
	if err := q.Retrieve(back, p+plugin.Ptr(0)); err != nil {
		t.Fatal(err)
	}
	if err := q.Synchronize(); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 1 << 31, size - 1, size / 3, 12345} {
		if back[i] != buf[i] {
			t.Fatalf("byte %d = %d, want %d", i, back[i], buf[i])
		}
	}
	if err := d.Free(p); err != nil {
		t.Fatal(err)
	}
}
