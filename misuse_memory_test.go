package offload_test

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/goffload/offload"
	"github.com/goffload/offload/plugin/hostmem"
)

// TestImpossibleAlloc: sizes no machine (or not this one) can hold are an
// error wrapping ErrOutOfMemory naming the device and the size, on the
// initial device, a host device and a device process, instead of a panic
// (1<<50 on the initial device) or the end of the process (64 GiB there on a
// smaller machine); each device still allocates afterwards.
func TestImpossibleAlloc(t *testing.T) {
	start(t, offload.WithDevices("host,local:1"))
	sizes := []int64{1 << 50, math.MaxInt64, hostmem.Limit() + 1}
	if hostmem.MachineMemory() > 0 && hostmem.MachineMemory() < 64<<30 {
		sizes = append(sizes, 64<<30)
	}
	for _, dev := range []offload.Device{offload.Initial(), offload.On(0), offload.On(1)} {
		for _, size := range sizes {
			p, err := dev.Alloc(size)
			if !errors.Is(err, offload.ErrOutOfMemory) {
				t.Fatalf("%s: Alloc(%d) = %v, %v; want an error wrapping ErrOutOfMemory", dev, size, p, err)
			}
			label := fmt.Sprintf("device %d", dev.Num())
			if msg := err.Error(); !strings.Contains(msg, label) || !strings.Contains(msg, fmt.Sprint(size)) {
				t.Errorf("%s: Alloc(%d): %q does not name the device and the size", dev, size, msg)
			}
		}
		if _, err := dev.Alloc(-1); !errors.Is(err, offload.ErrBadArgument) {
			t.Errorf("%s: Alloc(-1): %v, want ErrBadArgument", dev, err)
		}
		p, err := dev.Alloc(64)
		if err != nil {
			t.Fatalf("%s: Alloc(64) after refused ones: %v", dev, err)
		}
		if err := offload.Free(p); err != nil {
			t.Errorf("%s: Free: %v", dev, err)
		}
	}
}

// TestOffsetPastEnd: a pointer at the end of its memory (Offset(Size())) is
// a valid empty range that holds no Go pointer past the allocation — the
// garbage collector used to stop the program with "found bad pointer in Go
// heap" — and offsets outside [0, Size()] give a pointer that every routine
// refuses, saying which offset was out of range.
func TestOffsetPastEnd(t *testing.T) {
	forEachKind(t, testOffsetPastEnd)
}

func testOffsetPastEnd(t *testing.T, k testKind) {
	k.start(t, 1)
	// 48-byte objects: their spans end in a gap (8192 is not a multiple of
	// 48), so a pointer one past the last object of a span points past the
	// span's end, which the collector checks.
	var kept []offload.DevicePtr // in the heap, where the collector scans it
	for range 1000 {
		hp, err := offload.Initial().Alloc(48)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []offload.DevicePtr{hp, offload.HostPtr(make([]byte, 48))} {
			kept = append(kept, p.Offset(p.Size()), p.Offset(p.Size()-1).Offset(1))
		}
	}
	dp, err := offload.On(0).Alloc(48)
	if err != nil {
		t.Fatal(err)
	}
	defer offload.Free(dp)
	kept = append(kept, dp.Offset(48), dp.Offset(40).Offset(8))
	for range 2 {
		runtime.GC()
	}
	src := make([]byte, 8)
	for _, p := range kept {
		if p.IsNil() || p.Size() != 0 {
			t.Fatalf("%v: want an empty, non-nil pointer at the end", p)
		}
		if err := offload.Memcpy(p, offload.HostPtr(src), 0); err != nil {
			t.Fatalf("copy of 0 bytes to %v: %v", p, err)
		}
		if err := offload.Memcpy(p, offload.HostPtr(src), 1); !errors.Is(err, offload.ErrBadArgument) {
			t.Fatalf("copy of 1 byte to %v: %v, want ErrBadArgument", p, err)
		}
	}
	if err := offload.Initial().Run(AddTo, int32(1), kept[0]); err != nil {
		t.Errorf("kernel on an empty pointer: %v", err)
	}

	p, err := offload.On(0).Alloc(16)
	if err != nil {
		t.Fatal(err)
	}
	defer offload.Free(p)
	x := make([]int32, 4)
	for _, bad := range []offload.DevicePtr{p.Offset(17), p.Offset(-1), p.Offset(8).Offset(9), offload.HostPtr(x).Offset(17)} {
		if !bad.IsNil() {
			t.Errorf("%v: want a nil pointer", bad)
		}
		uses := map[string]error{
			"Memcpy to":   offload.Memcpy(bad, offload.HostPtr(x), 4),
			"Memcpy from": offload.Memcpy(offload.HostPtr(x), bad, 4),
			"Run":         offload.On(0).Run(AddTo, int32(1), bad),
			"Associate":   offload.On(0).Associate(x, bad, "x"),
			"Free":        offload.Free(bad),
		}
		for use, err := range uses {
			if !errors.Is(err, offload.ErrBadArgument) || !strings.Contains(err.Error(), "outside [0,") {
				t.Errorf("%s %v: %v, want ErrBadArgument naming the offset out of range", use, bad, err)
			}
		}
	}
}

// TestStalePointer: a pointer whose allocation was freed is refused by every
// routine, with an error wrapping ErrBadPointer and ErrBadArgument that says
// it was freed, even when a new allocation reuses its memory (it used to
// write silently into the new one); and freed allocations leave no trace in
// the runtime.
func TestStalePointer(t *testing.T) {
	startSet(t, "host,local:1,cuda:0")
	for _, dev := range []offload.Device{offload.On(0), offload.On(1), offload.On(2)} {
		before := offload.LiveAllocs(dev.Num())
		old, err := dev.Alloc(256)
		if err != nil {
			t.Fatal(err)
		}
		if err := offload.Free(old); err != nil {
			t.Fatal(err)
		}
		cur, err := dev.Alloc(256) // reuses the freed block on every kind
		if err != nil {
			t.Fatal(err)
		}
		if err := offload.Memcpy(cur, offload.HostPtr(filled(64, 5)), 256); err != nil {
			t.Fatal(err)
		}
		x := filled(64, 9)
		uses := map[string]error{
			"Memcpy to":          offload.Memcpy(old, offload.HostPtr(x), 256),
			"Memcpy to offset":   offload.Memcpy(old.Offset(16), offload.HostPtr(x), 16),
			"Memcpy from":        offload.Memcpy(offload.HostPtr(x), old, 256),
			"Memcpy dev to dev":  offload.Memcpy(cur, old, 256),
			"Run":                dev.Run(AddTo, int32(1), old),
			"Associate":          dev.Associate(x, old, "x"),
			"Free twice":         offload.Free(old),
			"Nowait Run":         dev.Nowait().Run(AddTo, int32(1), old.Offset(4)).Wait(),
			"Free of an offset":  offload.Free(cur.Offset(4)),
			"Free of MappedPtr":  freeMapped(dev),
			"Memcpy when reused": nil,
		}
		delete(uses, "Memcpy when reused")
		for use, err := range uses {
			// A kernel argument's error wraps ErrBadArgument only: Run's
			// argument checks show the cause with %v.
			kernelArg := strings.Contains(use, "Run")
			if !errors.Is(err, offload.ErrBadArgument) || !kernelArg && !errors.Is(err, offload.ErrBadPointer) {
				t.Errorf("%s: %s of a freed pointer: %v, want an error wrapping ErrBadPointer and ErrBadArgument", dev, use, err)
				continue
			}
			if msg := err.Error(); !strings.Contains(msg, fmt.Sprintf("device %d", dev.Num())) {
				t.Errorf("%s: %s: %q does not name the device", dev, use, msg)
			}
		}
		for _, use := range []string{"Memcpy to", "Run", "Nowait Run", "Associate", "Free twice"} {
			if msg := uses[use].Error(); !strings.Contains(msg, "freed") {
				t.Errorf("%s: %s: %q does not say the memory was freed", dev, use, msg)
			}
		}
		if dev.IsPresent(x) {
			t.Errorf("%s: Associate of a freed pointer mapped the buffer", dev)
		}
		got := make([]int32, 64)
		if err := offload.Memcpy(offload.HostPtr(got), cur, 256); err != nil {
			t.Fatal(err)
		}
		if !allEqual(got, 5) {
			t.Errorf("%s: the allocation that reused the block was written through the freed pointer: %v", dev, got[:4])
		}
		if err := offload.Free(cur); err != nil {
			t.Errorf("%s: Free: %v", dev, err)
		}
		if n := offload.LiveAllocs(dev.Num()); n != before {
			t.Errorf("%s: %d live allocations recorded after freeing them all, want %d", dev, n, before)
		}
	}
	// A pointer from before a restart is refused too.
	p, err := offload.On(0).Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	if err := offload.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := offload.Start(offload.WithDevices("host")); err != nil {
		t.Fatal(err)
	}
	if err := offload.Memcpy(p, offload.HostPtr(make([]byte, 64)), 64); !errors.Is(err, offload.ErrBadPointer) {
		t.Errorf("a pointer from before Stop: %v, want ErrBadPointer", err)
	}
}

// freeMapped frees the device memory of a mapped buffer, which is the
// runtime's, not the program's.
func freeMapped(dev offload.Device) error {
	x := make([]int32, 16)
	if err := dev.EnterData(offload.To(x)); err != nil {
		return err
	}
	defer dev.ExitData(offload.Delete(x))
	mp, err := dev.MappedPtr(x)
	if err != nil {
		return err
	}
	return offload.Free(mp)
}
