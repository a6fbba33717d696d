package offload_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/goffload/offload"
)

// TestAssociateHeldByRegion: a Hold map on an association (omp_target_
// associate_ptr, DynRefCount=INF) raises its hold count as on any mapping
// (LLVM: DynRefCount=INF, HoldRefCount=1), so Disassociate inside the region
// is refused and the mapping stays under the region's constructs; after the
// region Disassociate works. Before, the hold count stayed 0 and the
// mapping disappeared under the region.
func TestAssociateHeldByRegion(t *testing.T) {
	start(t, offload.WithDevices("host"), offload.WithOffload("MANDATORY"))
	d := offload.On(0)
	x := filled(64, 1)
	p, err := d.Alloc(64 * 4)
	if err != nil {
		t.Fatal(err)
	}
	defer offload.Free(p)
	if err := offload.Memcpy(p, offload.HostPtr(make([]int32, 64)), 64*4); err != nil {
		t.Fatal(err)
	}
	if err := d.Associate(x, p, "x"); err != nil {
		t.Fatal(err)
	}
	err = d.Data(func() error {
		if dyn, hold, ok := entryOf(0, x); !ok || dyn != -1 || hold != 1 {
			return fmt.Errorf("in the hold region: dyn=%d hold=%d present=%v, want INF (-1), 1, true", dyn, hold, ok)
		}
		// A target region with a hold map of a section nests.
		if err := d.Run(Fill, int32(7), offload.ToFrom(x[8:16]).Hold()); err != nil {
			return err
		}
		if _, hold, _ := entryOf(0, x); hold != 1 {
			return fmt.Errorf("after a nested hold target region: hold=%d, want 1", hold)
		}
		err := d.Disassociate(x)
		if !errors.Is(err, offload.ErrBadMap) {
			return fmt.Errorf("Disassociate inside a hold region: %v, want an error wrapping ErrBadMap", err)
		}
		for _, want := range []string{"device 0 (host)", "omp_target_disassociate_ptr of \"x\"", "HoldRefCount=1", "region holds the association"} {
			if !strings.Contains(err.Error(), want) {
				return fmt.Errorf("Disassociate inside a hold region: %q does not say %q", err, want)
			}
		}
		if !d.IsPresent(x) {
			return errors.New("the association is gone inside the region that holds it")
		}
		return d.Run(AddTo, int32(1), x[:8])
	}, offload.To(x).Hold())
	if err != nil {
		t.Fatal(err)
	}
	if dyn, hold, ok := entryOf(0, x); !ok || dyn != -1 || hold != 0 {
		t.Fatalf("after the region: dyn=%d hold=%d present=%v, want INF (-1), 0, true", dyn, hold, ok)
	}
	// A target region's own hold map ends with it.
	if err := d.Run(AddTo, int32(1), offload.ToFrom(x).Hold()); err != nil {
		t.Fatal(err)
	}
	if _, hold, _ := entryOf(0, x); hold != 0 {
		t.Fatalf("after a hold target region: hold=%d, want 0", hold)
	}
	if !allEqual(x, 1) {
		t.Errorf("host x = %v, want untouched 1s (an association never copies)", x[:4])
	}
	got := deviceCopy(t, d, x)
	for i, v := range got {
		want := int32(1) // the last region's AddTo
		switch {
		case i < 8:
			want = 2 // and the AddTo inside the hold region
		case i < 16:
			want = 8 // and the Fill with 7 inside it
		}
		if v != want {
			t.Fatalf("device x[%d] = %d, want %d; device x = %v", i, v, want, got)
		}
	}
	if err := d.Disassociate(x); err != nil {
		t.Fatalf("Disassociate after the region: %v", err)
	}
	if d.IsPresent(x) {
		t.Error("present after Disassociate")
	}
}
