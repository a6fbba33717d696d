package offload_test

import (
	"errors"
	"testing"

	"github.com/goffload/offload"
)

func TestMemoryRoutines(t *testing.T) {
	forEachKind(t, testMemoryRoutines)
}

func testMemoryRoutines(t *testing.T, k testKind) {
	k.start(t, 2)
	d0, d1 := offload.On(0), offload.On(1)
	const n = 1000
	src := make([]int32, n)
	for i := range src {
		src[i] = int32(i * 7)
	}
	p0, err := d0.Alloc(n * 4)
	if err != nil {
		t.Fatal(err)
	}
	p1, err := d1.Alloc(n * 4)
	if err != nil {
		t.Fatal(err)
	}
	defer offload.Free(p0)
	defer offload.Free(p1)
	// host -> device 0 -> device 1 (directly) -> host, at an offset.
	if err := offload.Memcpy(p0, offload.HostPtr(src), n*4); err != nil {
		t.Fatal(err)
	}
	if err := offload.Memcpy(p1.Offset(40), p0.Offset(40), (n-10)*4); err != nil {
		t.Fatal(err)
	}
	back := make([]int32, n)
	if err := offload.Memcpy(offload.HostPtr(back), p1, n*4); err != nil {
		t.Fatal(err)
	}
	for i := 10; i < n; i++ {
		if back[i] != src[i] {
			t.Fatalf("back[%d] = %d, want %d", i, back[i], src[i])
		}
	}
	// A device pointer as a kernel argument (is_device_ptr).
	if err := d1.Run(AddTo, int32(1), p1); err != nil {
		t.Fatal(err)
	}
	if err := offload.Memcpy(offload.HostPtr(back), p1, n*4); err != nil {
		t.Fatal(err)
	}
	if back[20] != src[20]+1 {
		t.Errorf("kernel on device memory: back[20] = %d, want %d", back[20], src[20]+1)
	}
	if err := d0.Run(AddTo, int32(1), p1); !errors.Is(err, offload.ErrBadArgument) {
		t.Errorf("device 1 pointer on device 0: %v, want ErrBadArgument", err)
	}
	// Bad copies and frees are errors, not panics.
	if err := offload.Memcpy(p0, offload.HostPtr(src), n*4+4); !errors.Is(err, offload.ErrBadArgument) {
		t.Errorf("copy past the end: %v", err)
	}
	if err := offload.Free(p0.Offset(4)); !errors.Is(err, offload.ErrBadPointer) {
		t.Errorf("free of an inner pointer: %v, want ErrBadPointer", err)
	}
	if err := offload.Free(offload.DevicePtr{}); !errors.Is(err, offload.ErrBadArgument) {
		t.Errorf("free of a nil pointer: %v", err)
	}
	if _, err := d0.Alloc(-1); !errors.Is(err, offload.ErrBadArgument) {
		t.Errorf("negative alloc: %v", err)
	}
	// The initial device's memory is host memory.
	hp, err := offload.Initial().Alloc(16)
	if err != nil {
		t.Fatal(err)
	}
	if err := offload.Memcpy(hp, p0, 16); err != nil {
		t.Fatal(err)
	}
	if err := offload.Initial().Run(AddTo, int32(0), hp); err != nil {
		t.Fatal(err)
	}
}

func TestAssociate(t *testing.T) {
	forEachKind(t, testAssociate)
}

func testAssociate(t *testing.T, k testKind) {
	k.start(t, 1)
	d := offload.On(0)
	x := filled(64, 1)
	p, err := d.Alloc(64 * 4)
	if err != nil {
		t.Fatal(err)
	}
	defer offload.Free(p)
	if err := offload.Memcpy(p, offload.HostPtr(filled(64, 5)), 64*4); err != nil {
		t.Fatal(err)
	}
	if err := d.Associate(x, p, "x"); err != nil {
		t.Fatal(err)
	}
	if err := d.Associate(x, p, "x"); err != nil {
		t.Errorf("the same association again: %v", err)
	}
	if !d.IsPresent(x) || !d.IsPresent(x[3:9]) {
		t.Fatal("associated buffer is not present")
	}
	// Maps find it present: no copy in, no copy back, no free.
	if err := d.Run(AddTo, int32(1), offload.ToFrom(x)); err != nil {
		t.Fatal(err)
	}
	if err := d.ExitData(offload.Delete(x)); err != nil {
		t.Fatal(err)
	}
	if !allEqual(x, 1) {
		t.Errorf("host x = %v, want untouched 1s", x[:4])
	}
	if got := deviceCopy(t, d, x); !allEqual(got, 6) {
		t.Errorf("device memory = %v, want 6s", got[:4])
	}
	if mp, err := d.MappedPtr(x[2:]); err != nil || mp.Size() != 62*4 {
		t.Errorf("MappedPtr(x[2:]) = %v, %v", mp, err)
	}
	if err := d.Associate(x[10:], p, "x"); err == nil {
		t.Error("associating a mapped range again succeeded")
	}
	if err := d.Disassociate(x); err != nil {
		t.Fatal(err)
	}
	if d.IsPresent(x) {
		t.Error("still present after Disassociate")
	}
	if err := d.Disassociate(x); !errors.Is(err, offload.ErrNotPresent) {
		t.Errorf("Disassociate twice: %v", err)
	}
	// A buffer mapped by clauses is not an association.
	if err := d.EnterData(offload.To(x)); err != nil {
		t.Fatal(err)
	}
	if err := d.Disassociate(x); !errors.Is(err, offload.ErrBadMap) {
		t.Errorf("Disassociate of a mapped buffer: %v", err)
	}
	if err := d.ExitData(offload.Release(x)); err != nil {
		t.Fatal(err)
	}
	if _, err := d.MappedPtr(x); !errors.Is(err, offload.ErrNotPresent) {
		t.Errorf("MappedPtr of an unmapped buffer: %v", err)
	}
	if err := d.Associate(x, offload.HostPtr(x), "x"); !errors.Is(err, offload.ErrBadArgument) {
		t.Errorf("associating host memory: %v", err)
	}
}
