package offload_test

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"unsafe"

	"github.com/goffload/offload"
)

// The texts of issue 10: each error says what happened, in the words of the
// construct or routine that failed, and keeps what is good (device, buffer,
// host address, size, name); errors.Is still matches the sentinels.

// wantText checks that err wraps sentinel and that its text holds every
// string of want and none of notWant.
func wantText(t *testing.T, what string, err, sentinel error, want, notWant []string) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Errorf("%s: %v, want an error wrapping %v", what, err, sentinel)
		return
	}
	for _, s := range want {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%s: %q does not say %q", what, err, s)
		}
	}
	for _, s := range notWant {
		if strings.Contains(err.Error(), s) {
			t.Errorf("%s: %q says %q", what, err, s)
		}
	}
}

// TestUpdateMotionClauseText: target update's clauses are motion clauses,
// to(present: y), not map clauses (they were printed as
// "target update map(present, to) of "y"").
func TestUpdateMotionClauseText(t *testing.T) {
	forEachKind(t, testUpdateMotionClauseText)
}

func testUpdateMotionClauseText(t *testing.T, k testKind) {
	k.start(t, 1)
	d := offload.On(0)
	y := filled(16, 1)
	err := d.Update(offload.To(y).Present().Named("y"))
	wantText(t, "update to present of an unmapped buffer", err, offload.ErrNotPresent,
		[]string{k.dev(0) + ": target update to(present: y) (HstPtr=0x", "Size=64"}, []string{"map("})
	err = d.Update(offload.From(y).Present())
	wantText(t, "update from present of an unnamed unmapped buffer", err, offload.ErrNotPresent,
		[]string{"target update from(present: unnamed buffer) (HstPtr=0x"}, []string{"map("})
	err = offload.Initial().Update(offload.From(y).Always().Named("y"))
	wantText(t, "update always from", err, offload.ErrBadMap,
		[]string{"target update from(always: y)", "always has no meaning on target update"}, []string{"map("})
	// What is not a motion clause is shown as the map clause it is.
	err = d.Update(offload.ToFrom(y).Named("y"))
	wantText(t, "update tofrom", err, offload.ErrBadMap,
		[]string{`target update map(tofrom) of "y"`, "to and from"}, nil)
	// Asynchronous updates say the same.
	err = d.Nowait().Update(offload.To(y).Present().Named("y")).Wait()
	wantText(t, "nowait update to present", err, offload.ErrNotPresent,
		[]string{"target update to(present: y) (HstPtr=0x"}, []string{"map("})
}

// TestPartialOverlapTexts: a range that partly overlaps a mapping is
// refused with ErrExtension on every construct, but only an explicit map
// clause extends a mapping ("explicit extension not allowed", as
// libomptarget says): an implicit map, an update and an exit data say what
// they did.
func TestPartialOverlapTexts(t *testing.T) {
	forEachKind(t, testPartialOverlapTexts)
}

func testPartialOverlapTexts(t *testing.T, k testKind) {
	k.start(t, 1)
	d := offload.On(0)
	x := filled(64, 1)
	if err := d.EnterData(offload.To(x[8:24]).Named("x")); err != nil {
		t.Fatal(err)
	}
	mapping := fmt.Sprintf("maps host [%#x, %#x) (Size=64, Name=x)",
		uintptr(unsafe.Pointer(&x[8])), uintptr(unsafe.Pointer(&x[24])))
	for _, c := range []struct {
		what          string
		err           error
		want, notWant []string
	}{
		{"implicit map", d.Run(Fill, int32(9), x),
			[]string{`target test.fill map(tofrom) (implicit) of "test.fill.arg1"`, mapping, "implicit map of a range that partly overlaps a mapping"}, []string{"extension"}},
		{"update to", d.Update(offload.To(x[4:12]).Named("s")),
			[]string{"target update to(s)", mapping, "update of a range that is only partly mapped"}, []string{"extension"}},
		{"update from", d.Update(offload.From(x[20:30]).Present().Named("s")),
			[]string{"target update from(present: s)", mapping, "update of a range that is only partly mapped"}, []string{"extension"}},
		{"exit data", d.ExitData(offload.From(x[4:12]).Named("s")),
			[]string{`target exit data map(from) of "s"`, mapping, "exit data of a range that is only partly mapped"}, []string{"extension"}},
		{"nowait exit data", d.Nowait().ExitData(offload.Release(x[20:30]).Named("s")).Wait(),
			[]string{`target exit data map(release) of "s"`, "exit data of a range that is only partly mapped"}, []string{"extension"}},
		// An explicit map does extend: libomptarget's words stay.
		{"enter data", d.EnterData(offload.To(x[4:12]).Named("s")),
			[]string{`target enter data map(to) of "s"`, mapping, "explicit extension not allowed"}, nil},
		{"explicit region map", d.Run(Fill, int32(9), offload.ToFrom(x).Named("s")),
			[]string{`target test.fill map(tofrom) of "s"`, mapping, "explicit extension not allowed"}, nil},
	} {
		wantText(t, c.what, c.err, offload.ErrExtension, c.want, c.notWant)
		var me *offload.MapError
		if !errors.As(c.err, &me) || me.Device != k.dev(0) {
			t.Errorf("%s: %v is not a MapError naming device 0", c.what, c.err)
		}
	}
	if dyn, _, ok := entryOf(0, x[8:24]); !ok || dyn != 1 {
		t.Errorf("the mapping after the refusals: dyn=%d present=%v, want 1 true", dyn, ok)
	}
}

// TestAssociateTexts: misuse of omp_target_associate_ptr and
// omp_target_disassociate_ptr is told in their terms: no made-up map(alloc)
// clause, no "invalid map clause".
func TestAssociateTexts(t *testing.T) {
	forEachKind(t, testAssociateTexts)
}

func testAssociateTexts(t *testing.T, k testKind) {
	k.start(t, 1)
	d := offload.On(0)
	x := filled(64, 1)
	p, err := d.Alloc(64 * 4)
	if err != nil {
		t.Fatal(err)
	}
	defer offload.Free(p)
	no := []string{"map(", "invalid map clause"}

	if err := d.EnterData(offload.To(x).Named("x")); err != nil {
		t.Fatal(err)
	}
	wantText(t, "Disassociate of a buffer mapped by clauses", d.Disassociate(x), offload.ErrBadMap,
		[]string{k.dev(0) + `: omp_target_disassociate_ptr of "x" (HstPtr=0x`, "Size=256", "mapped by map clauses (DynRefCount=1, HoldRefCount=0), not by omp_target_associate_ptr", "not an association"}, no)
	wantText(t, "Associate of a mapped buffer", d.Associate(x[8:], p, "x8"), offload.ErrBadMap,
		[]string{k.dev(0) + `: omp_target_associate_ptr of "x8" (HstPtr=0x`, "Size=224", "made by map clauses", "the range is mapped already"}, no)
	if err := d.ExitData(offload.Release(x)); err != nil {
		t.Fatal(err)
	}
	if err := d.Associate(x[8:24], p, "x8"); err != nil {
		t.Fatal(err)
	}
	wantText(t, "Associate overlapping an association", d.Associate(x[:16], p, "y"), offload.ErrExtension,
		[]string{`omp_target_associate_ptr of "y" (HstPtr=0x`, "Name=x8", "association of a range that is partly mapped"}, append(no, "extension"))
	wantText(t, "Associate of a section of an association", d.Associate(x[10:12], p.Offset(8), "z"), offload.ErrBadMap,
		[]string{`omp_target_associate_ptr of "z"`, "an earlier omp_target_associate_ptr", "the range is mapped already"}, no)
	wantText(t, "Disassociate inside an association", d.Disassociate(x[10:]), offload.ErrNotPresent,
		[]string{`omp_target_disassociate_ptr of "x8"`, "no association starts at this address: it lies 8 bytes into the mapping"}, no)
	wantText(t, "Disassociate of nothing", d.Disassociate(x[40:]), offload.ErrNotPresent,
		[]string{"omp_target_disassociate_ptr of unnamed buffer", "no association starts at this address"}, no)
	_, err = d.MappedPtr(x[40:])
	wantText(t, "MappedPtr of nothing", err, offload.ErrNotPresent, []string{"omp_get_mapped_ptr of unnamed buffer (HstPtr=0x"}, no)
	if err := d.Disassociate(x[8:]); err != nil {
		t.Fatal(err)
	}
}

// TestBufferNameTexts: a buffer without a name is an "unnamed buffer"
// everywhere in an error (it was "unnamed buffer" in one place and
// "Name=unknown" in another), and a section of a named mapping is shown by
// the mapping's name (an update of a section said Name=unknown).
func TestBufferNameTexts(t *testing.T) {
	var info syncBuffer
	start(t, offload.WithDevices("host"), offload.WithInfo("copies", &info))
	d := offload.On(0)
	x := filled(64, 1)
	if err := d.EnterData(offload.To(x[8:24])); err != nil {
		t.Fatal(err)
	}
	err := d.EnterData(offload.To(x[4:12]))
	wantText(t, "unnamed sections", err, offload.ErrExtension, []string{"map(to) of unnamed buffer (HstPtr=", "(Size=64, unnamed buffer)"}, []string{"unknown"})
	if err := d.ExitData(offload.Release(x[8:24])); err != nil {
		t.Fatal(err)
	}

	z := filled(64, 1)
	if err := d.EnterData(offload.To(z).Named("z")); err != nil {
		t.Fatal(err)
	}
	before := len(info.String())
	if err := d.Update(offload.To(z[2:4])); err != nil {
		t.Fatal(err)
	}
	if err := d.Update(offload.From(z[2:4])); err != nil {
		t.Fatal(err)
	}
	if err := d.ExitData(offload.From(z[4:8]).Always()); err != nil {
		t.Fatal(err)
	}
	out := info.String()[before:]
	for _, re := range []string{
		`Copying data from host to device, HstPtr=0x[0-9a-f]+, TgtPtr=0x[0-9a-f]+, Size=8, Name=z\n`,
		`Copying data from device to host, TgtPtr=0x[0-9a-f]+, HstPtr=0x[0-9a-f]+, Size=8, Name=z\n`,
		`Copying data from device to host, TgtPtr=0x[0-9a-f]+, HstPtr=0x[0-9a-f]+, Size=16, Name=z\n`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("info output lacks %s:\n%s", re, out)
		}
	}
	if strings.Contains(out, "Name=unknown") {
		t.Errorf("a section of the mapping named z is shown as unknown:\n%s", out)
	}
	if err := d.ExitData(offload.Release(z)); err != nil {
		t.Fatal(err)
	}
}

// TestUnmappableElementText: a slice whose elements hold a pointer cannot
// be mapped; the construct's error names the device, the host address and
// size, and the field (it named neither device nor address: the clause was
// refused before the device was known).
func TestUnmappableElementText(t *testing.T) {
	forEachKind(t, testUnmappableElementText)
}

func testUnmappableElementText(t *testing.T, k testKind) {
	k.start(t, 1)
	d := offload.On(0)
	type withPtr struct {
		N int32
		P *int
	}
	v := make([]withPtr, 2)
	addr := fmt.Sprintf("HstPtr=%#x, Size=32", uintptr(unsafe.Pointer(&v[0])))
	for _, c := range []struct {
		what string
		dev  string
		err  error
	}{
		{"enter data", k.dev(0) + ": target enter data map(to) of unnamed buffer", d.EnterData(offload.To(v))},
		{"data region", k.dev(0) + ": target data map(tofrom) of \"v\"", d.Data(func() error { return nil }, offload.ToFrom(v).Named("v"))},
		{"exit data", k.dev(0) + ": target exit data map(release)", d.ExitData(offload.Release(v))},
		{"update", k.dev(0) + ": target update from(v)", d.Update(offload.From(v).Named("v"))},
		{"nowait enter data", k.dev(0) + ": target enter data map(alloc)", d.Nowait().EnterData(offload.Alloc(v)).Wait()},
		{"target region", k.dev(0) + ": target map(to) of \"test.fill.arg1\"", d.Run(Fill, int32(1), offload.To(v))},
		{"nowait target region", k.dev(0) + ": target map(to) of \"test.fill.arg1\"", d.Nowait().Run(Fill, int32(1), offload.To(v)).Wait()},
		{"initial device", "initial device 1: target enter data map(to)", offload.Initial().EnterData(offload.To(v))},
	} {
		wantText(t, c.what, c.err, offload.ErrBadMap, []string{c.dev, addr, "field P", "*int"}, nil)
		var me *offload.MapError
		if !errors.As(c.err, &me) || me.Addr != uintptr(unsafe.Pointer(&v[0])) || me.Size != 32 {
			t.Errorf("%s: %v is not a MapError with the buffer's address and size", c.what, c.err)
		}
	}
}

// TestDeviceProcessKind: a device process the program started itself is a
// "local" device, in Info and in messages (it was "remote", a word that
// GOFFLOAD_DEVICES does not know).
func TestDeviceProcessKind(t *testing.T) {
	start(t, offload.WithDevices("local"))
	info, err := offload.On(0).Info()
	if err != nil || info.Kind != "local" || info.Spec != "local" {
		t.Fatalf("Info = %+v, %v; want kind local", info, err)
	}
	y := filled(4, 1)
	err = offload.On(0).Update(offload.To(y).Present().Named("y"))
	wantText(t, "update on a device process", err, offload.ErrNotPresent,
		[]string{"goffload: device 0 (local): target update to(present: y)"}, []string{"remote"})
	err = offload.On(0).Run(Boom, int32(0), y)
	wantText(t, "kernel panic on a device process", err, offload.ErrKernelFailed,
		[]string{"goffload: device 0 (local): target test.boom: local device 0 (pid "}, []string{"remote"})
}
