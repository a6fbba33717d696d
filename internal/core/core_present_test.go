package core

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/goffload/offload/internal/mapping"
)

// entryOf returns the table row of s, failing the test if it is not there.
func entryOf(t *testing.T, d *Device, s []int32) mapping.EntryInfo {
	t.Helper()
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(s)))
	for _, e := range d.Table().Snapshot() {
		if e.HstBegin == addr {
			return e
		}
	}
	t.Fatalf("%s: no table entry begins at %#x; table: %+v", d.Label(), addr, d.Table().Snapshot())
	return mapping.EntryInfo{}
}

func wantCount(t *testing.T, f *fakeDevice, op fakeOp, n int) []fakeCall {
	t.Helper()
	cs := f.CallsOf(op)
	if len(cs) != n {
		t.Fatalf("fake device %d got %d %s calls, want %d; calls: %+v", f.Idx, len(cs), op, n, cs)
	}
	return cs
}

// The first map allocates and copies in once; maps nested inside it (a data
// region, targets, a section of the buffer) copy nothing and translate to the
// same device memory; the last unmap copies out once and frees.
func TestPresentNestedMapsCopyOnce(t *testing.T) {
	r, fs := newFakeRuntime(t, 1, nil)
	d, f := r.Devices[0], fs[0]
	a := filled(64, 1)

	if err := d.EnterData(context.Background(), []MapItem{mapOf(a, "a", mapping.MapTo)}); err != nil {
		t.Fatalf("enter data: %v", err)
	}
	alloc := wantCount(t, f, fAlloc, 1)[0]
	if alloc.Size != 256 {
		t.Fatalf("Alloc of %d bytes, want 256", alloc.Size)
	}
	if sub := wantCount(t, f, fSubmit, 1)[0]; sub.Ptr != alloc.Ptr || sub.Size != 256 {
		t.Fatalf("Submit %+v, want 256 bytes at %#x", sub, uint64(alloc.Ptr))
	}
	if e := entryOf(t, d, a); e.Dyn != 1 || e.Hold != 0 || e.Tgt != alloc.Ptr || e.Size != 256 || e.Name != "a" {
		t.Fatalf("entry %+v, want Dyn=1 Hold=0 Tgt=%#x Size=256 Name=a", e, uint64(alloc.Ptr))
	}

	err := d.Data(context.Background(), []MapItem{mapOf(a, "a", mapping.MapTo|mapping.MapFrom|mapping.MapHold)}, func() error {
		if e := entryOf(t, d, a); e.Dyn != 1 || e.Hold != 1 {
			return fmt.Errorf("inside the data region: entry %+v, want Dyn=1 Hold=1", e)
		}
		if err := d.Target(context.Background(), kAdd1, []KernelArg{sliceArg(a, "a", mapping.MapTo|mapping.MapFrom)}, false); err != nil {
			return err
		}
		return d.Target(context.Background(), kAdd1, []KernelArg{sliceArg(a[8:16], "a[8:16]", mapping.MapTo|mapping.MapFrom)}, false)
	})
	if err != nil {
		t.Fatalf("data region: %v", err)
	}
	wantCount(t, f, fAlloc, 1)
	wantCount(t, f, fSubmit, 1)
	wantCount(t, f, fRetrieve, 0)
	launches := wantCount(t, f, fLaunch, 2)
	if launches[0].Ptr != alloc.Ptr || launches[1].Ptr != alloc.Ptr+32 {
		t.Fatalf("launches got device addresses %#x and %#x, want %#x and %#x (the section 32 bytes in)",
			uint64(launches[0].Ptr), uint64(launches[1].Ptr), uint64(alloc.Ptr), uint64(alloc.Ptr+32))
	}
	if e := entryOf(t, d, a); e.Dyn != 1 || e.Hold != 0 {
		t.Fatalf("after the data region: entry %+v, want Dyn=1 Hold=0", e)
	}
	if !allEqual(a, 1) {
		t.Fatalf("host buffer changed while still mapped: %v", a)
	}

	if err := d.ExitData(context.Background(), []MapItem{mapOf(a, "a", mapping.MapFrom)}); err != nil {
		t.Fatalf("exit data: %v", err)
	}
	if ret := wantCount(t, f, fRetrieve, 1)[0]; ret.Ptr != alloc.Ptr || ret.Size != 256 {
		t.Fatalf("Retrieve %+v, want 256 bytes from %#x", ret, uint64(alloc.Ptr))
	}
	if fr := wantCount(t, f, fFree, 1)[0]; fr.Ptr != alloc.Ptr {
		t.Fatalf("Free of %#x, want %#x", uint64(fr.Ptr), uint64(alloc.Ptr))
	}
	if n := d.Table().Len(); n != 0 || f.LiveAllocs() != 0 {
		t.Fatalf("after the last unmap: %d table entries, %d live allocations; want none", n, f.LiveAllocs())
	}
	for i, v := range a {
		want := int32(2)
		if i >= 8 && i < 16 {
			want = 3
		}
		if v != want {
			t.Fatalf("a[%d] = %d after exit data, want %d", i, v, want)
		}
	}
}

// Reference counts move per clause: release and from count down, delete
// drops the count, always copies again, and only the last unmap frees.
func TestPresentRefCounts(t *testing.T) {
	r, fs := newFakeRuntime(t, 1, nil)
	d, f := r.Devices[0], fs[0]
	a := filled(16, 5)
	for range 3 {
		if err := d.EnterData(context.Background(), []MapItem{mapOf(a, "a", mapping.MapTo)}); err != nil {
			t.Fatal(err)
		}
	}
	if e := entryOf(t, d, a); e.Dyn != 3 {
		t.Fatalf("after three enter data: Dyn=%d, want 3", e.Dyn)
	}
	wantCount(t, f, fSubmit, 1)
	if err := d.EnterData(context.Background(), []MapItem{mapOf(a, "a", mapping.MapTo|mapping.MapAlways)}); err != nil {
		t.Fatal(err)
	}
	wantCount(t, f, fSubmit, 2) // always copies into the existing mapping
	if err := d.ExitData(context.Background(), []MapItem{{Buf: bufOf(a, "a"), Exit: true}, {Buf: bufOf(a, "a"), Exit: true}}); err != nil {
		t.Fatal(err)
	}
	if e := entryOf(t, d, a); e.Dyn != 2 {
		t.Fatalf("after two releases from 4: Dyn=%d, want 2", e.Dyn)
	}
	if err := d.ExitData(context.Background(), []MapItem{mapOf(a, "a", mapping.MapFrom|mapping.MapAlways)}); err != nil {
		t.Fatal(err)
	}
	if e := entryOf(t, d, a); e.Dyn != 1 {
		t.Fatalf("after from: Dyn=%d, want 1", e.Dyn)
	}
	wantCount(t, f, fRetrieve, 1) // always copies out before the last unmap
	wantCount(t, f, fFree, 0)
	if err := d.ExitData(context.Background(), []MapItem{{Buf: bufOf(a, "a"), Type: mapping.MapDelete, Exit: true}}); err != nil {
		t.Fatal(err)
	}
	wantCount(t, f, fRetrieve, 1) // delete copies nothing
	wantCount(t, f, fFree, 1)
	if d.Table().Len() != 0 || d.IsPresent(bufOf(a, "a")) || f.LiveAllocs() != 0 {
		t.Fatalf("after delete: table %+v, %d live allocations; want none", d.Table().Snapshot(), f.LiveAllocs())
	}
}

// A section that partly overlaps a mapping is an error naming the device,
// the buffer (address, size, name) and the mapping it overlaps; the
// construct enqueues nothing and leaves the counts as they were.
func TestPresentPartialOverlap(t *testing.T) {
	a := filled(32, 7)
	for _, tc := range []struct {
		name       string
		mapped     []int32
		mappedName string
		section    []int32
	}{
		{"runs past the end", a[0:8], "head", a[4:12]},
		{"covers a mapping", a[4:12], "middle", a[0:16]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, fs := newFakeRuntime(t, 1, nil)
			d, f := r.Devices[0], fs[0]
			if err := d.EnterData(context.Background(), []MapItem{mapOf(tc.mapped, tc.mappedName, mapping.MapTo)}); err != nil {
				t.Fatal(err)
			}
			err := d.Target(context.Background(), kAdd1, []KernelArg{sliceArg(tc.section, "sec", mapping.MapTo|mapping.MapFrom)}, false)
			if !errors.Is(err, ErrExtension) {
				t.Fatalf("Target over a partly mapped section: %v, want an error wrapping ErrExtension", err)
			}
			var me *MapError
			if !errors.As(err, &me) {
				t.Fatalf("error %T is not a *MapError: %v", err, err)
			}
			addr := uintptr(unsafe.Pointer(&tc.section[0]))
			if me.Device != "device 0 (fake)" || me.Addr != addr || me.Size != int64(4*len(tc.section)) || me.Name != "sec" || me.Op != "target coretest.add1" {
				t.Fatalf("MapError %+v: want device 0 (fake), HstPtr %#x, Size %d, Name sec, Op target coretest.add1", me, addr, 4*len(tc.section))
			}
			msg := err.Error()
			for _, want := range []string{"device 0 (fake)", fmt.Sprintf("HstPtr=%#x", addr), fmt.Sprintf("Size=%d", 4*len(tc.section)), `"sec"`, "Name=" + tc.mappedName} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not name %q", msg, want)
				}
			}
			wantCount(t, f, fAlloc, 1)
			wantCount(t, f, fLaunch, 0)
			if e := entryOf(t, d, tc.mapped); e.Dyn != 1 {
				t.Fatalf("the mapping's count moved: %+v", e)
			}
			if d.Table().Len() != 1 {
				t.Fatalf("table %+v, want the one mapping", d.Table().Snapshot())
			}
		})
	}
}
