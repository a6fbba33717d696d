package offload_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/goffload/offload"
)

// state is what a step leaves: the value of every element of the checked
// section on the host and (if mapped) on the device, and the section's
// reference counts.
type state struct {
	host      int32
	dev       int32
	dyn, hold int64
	absent    bool
}

func mapped(host, dev int32, dyn, hold int64) state {
	return state{host: host, dev: dev, dyn: dyn, hold: hold}
}

func unmapped(host int32) state { return state{host: host, absent: true} }

type step struct {
	what string
	do   func(d offload.Device, x []int32) error
	err  error // the error the step must wrap, nil for success
	want state
	lo   int // the checked section is x[lo:hi]; hi == 0 means all of x
	hi   int
}

func hostSet(v int32, want state) step {
	return step{what: fmt.Sprintf("host writes %d", v), do: func(_ offload.Device, x []int32) error { setAll(x, v); return nil }, want: want}
}

// TestMapSemantics walks the present-table rules of OpenMP and libomptarget
// step by step and checks host and device values and the reference counts
// after every step. Each scenario starts with an unmapped x of 1s.
func TestMapSemantics(t *testing.T) {
	fill := func(v int32, arg func(x []int32) any) func(d offload.Device, x []int32) error {
		return func(d offload.Device, x []int32) error { return d.Run(Fill, v, arg(x)) }
	}
	bare := func(x []int32) any { return x }
	scenarios := []scenario{
		{"refcounts and always", []step{
			{what: "enter to", do: func(d offload.Device, x []int32) error { return d.EnterData(offload.To(x)) }, want: mapped(1, 1, 1, 0)},
			hostSet(2, mapped(2, 1, 1, 0)),
			{what: "enter to again: present, no copy", do: func(d offload.Device, x []int32) error { return d.EnterData(offload.To(x)) }, want: mapped(2, 1, 2, 0)},
			{what: "enter always to: copies", do: func(d offload.Device, x []int32) error { return d.EnterData(offload.To(x).Always()) }, want: mapped(2, 2, 3, 0)},
			{what: "kernel writes 9 to the present buffer", do: fill(9, bare), want: mapped(2, 9, 3, 0)},
			{what: "exit from, not last: no copy", do: func(d offload.Device, x []int32) error { return d.ExitData(offload.From(x)) }, want: mapped(2, 9, 2, 0)},
			{what: "exit always from: copies, stays", do: func(d offload.Device, x []int32) error { return d.ExitData(offload.From(x).Always()) }, want: mapped(9, 9, 1, 0)},
			{what: "kernel writes 4", do: fill(4, bare), want: mapped(9, 4, 1, 0)},
			{what: "exit release, last: removed without copy", do: func(d offload.Device, x []int32) error { return d.ExitData(offload.Release(x)) }, want: unmapped(9)},
		}},
		{"last from copies back", []step{
			{what: "enter alloc", do: func(d offload.Device, x []int32) error { return d.EnterData(offload.Alloc(x)) }, want: state{host: 1, dyn: 1, dev: -999}},
			{what: "kernel writes 5", do: fill(5, bare), want: mapped(1, 5, 1, 0)},
			{what: "exit from, last: copies", do: func(d offload.Device, x []int32) error { return d.ExitData(offload.From(x)) }, want: unmapped(5)},
		}},
		{"region clauses", []step{
			{what: "map(to) region: a missing from is visible", do: fill(3, func(x []int32) any { return offload.To(x) }), want: unmapped(1)},
			{what: "map(from) region", do: fill(4, func(x []int32) any { return offload.From(x) }), want: unmapped(4)},
			{what: "map(alloc) region", do: fill(6, func(x []int32) any { return offload.Alloc(x) }), want: unmapped(4)},
			{what: "bare slice: implicit tofrom", do: fill(7, bare), want: unmapped(7)},
			{what: "map(tofrom) region", do: func(d offload.Device, x []int32) error { return d.Run(AddTo, int32(1), offload.ToFrom(x)) }, want: unmapped(8)},
		}},
		{"present modifier", []step{
			{what: "enter present to of an unmapped buffer", do: func(d offload.Device, x []int32) error { return d.EnterData(offload.To(x).Present()) }, err: offload.ErrNotPresent, want: unmapped(1)},
			{what: "region present tofrom of an unmapped buffer", do: fill(2, func(x []int32) any { return offload.ToFrom(x).Present() }), err: offload.ErrNotPresent, want: unmapped(1)},
			{what: "exit present from of an unmapped buffer", do: func(d offload.Device, x []int32) error { return d.ExitData(offload.From(x).Present()) }, err: offload.ErrNotPresent, want: unmapped(1)},
			{what: "update present from of an unmapped buffer", do: func(d offload.Device, x []int32) error { return d.Update(offload.From(x).Present()) }, err: offload.ErrNotPresent, want: unmapped(1)},
			{what: "enter to", do: func(d offload.Device, x []int32) error { return d.EnterData(offload.To(x)) }, want: mapped(1, 1, 1, 0)},
			{what: "region present: uses the mapping", do: fill(3, func(x []int32) any { return offload.ToFrom(x).Present() }), want: mapped(1, 3, 1, 0)},
			{what: "exit present delete", do: func(d offload.Device, x []int32) error { return d.ExitData(offload.Delete(x).Present()) }, want: unmapped(1)},
		}},
		{"exit and update of unmapped buffers are no-ops", []step{
			{what: "exit release", do: func(d offload.Device, x []int32) error { return d.ExitData(offload.Release(x)) }, want: unmapped(1)},
			{what: "exit from", do: func(d offload.Device, x []int32) error { return d.ExitData(offload.From(x)) }, want: unmapped(1)},
			{what: "exit delete", do: func(d offload.Device, x []int32) error { return d.ExitData(offload.Delete(x)) }, want: unmapped(1)},
			{what: "update from", do: func(d offload.Device, x []int32) error { return d.Update(offload.From(x)) }, want: unmapped(1)},
		}},
		{"delete drops every reference without copying", []step{
			{what: "enter to", do: func(d offload.Device, x []int32) error { return d.EnterData(offload.To(x)) }, want: mapped(1, 1, 1, 0)},
			{what: "enter to", do: func(d offload.Device, x []int32) error { return d.EnterData(offload.To(x)) }, want: mapped(1, 1, 2, 0)},
			{what: "kernel writes 8", do: fill(8, bare), want: mapped(1, 8, 2, 0)},
			{what: "exit delete", do: func(d offload.Device, x []int32) error { return d.ExitData(offload.Delete(x)) }, want: unmapped(1)},
		}},
		{"hold survives release and delete until its region ends", []step{
			{what: "hold region with release and delete inside", do: func(d offload.Device, x []int32) error {
				return d.Data(func() error {
					if dyn, hold, ok := entryOf(0, x); !ok || dyn != 0 || hold != 1 {
						return fmt.Errorf("in region: dyn=%d hold=%d present=%v, want 0 1 true", dyn, hold, ok)
					}
					if err := d.Run(Fill, int32(6), x); err != nil {
						return err
					}
					if err := d.ExitData(offload.Delete(x)); err != nil {
						return err
					}
					if err := d.ExitData(offload.Release(x)); err != nil {
						return err
					}
					if !d.IsPresent(x) {
						return errors.New("delete removed a held mapping")
					}
					return nil
				}, offload.ToFrom(x).Hold())
			}, want: unmapped(6)},
			{what: "hold region around a dynamic reference", do: func(d offload.Device, x []int32) error {
				return d.Data(func() error {
					if err := d.EnterData(offload.To(x)); err != nil {
						return err
					}
					if dyn, hold, _ := entryOf(0, x); dyn != 1 || hold != 1 {
						return fmt.Errorf("dyn=%d hold=%d, want 1 1", dyn, hold)
					}
					return d.Run(Fill, int32(2), x)
				}, offload.ToFrom(x).Hold())
			}, want: mapped(6, 2, 1, 0)},
			{what: "exit from, last: copies", do: func(d offload.Device, x []int32) error { return d.ExitData(offload.From(x)) }, want: unmapped(2)},
		}},
		{"sections inside a mapped range", []step{
			{what: "enter to x[8:24]", lo: 8, hi: 24, do: func(d offload.Device, x []int32) error { return d.EnterData(offload.To(x[8:24])) }, want: mapped(1, 1, 1, 0)},
			{what: "kernel on x[10:12] writes 5 (present, offset)", lo: 10, hi: 12, do: fill(5, func(x []int32) any { return x[10:12] }), want: mapped(1, 5, 1, 0)},
			{what: "rest of the section untouched", lo: 12, hi: 24, do: func(offload.Device, []int32) error { return nil }, want: mapped(1, 1, 1, 0)},
			{what: "update from x[10:11] copies only that element", lo: 10, hi: 11, do: func(d offload.Device, x []int32) error { return d.Update(offload.From(x[10:11])) }, want: mapped(5, 5, 1, 0)},
			{what: "x[11] stays on the host", lo: 11, hi: 12, do: func(offload.Device, []int32) error { return nil }, want: mapped(1, 5, 1, 0)},
			{what: "enter to x[4:12] extends below", lo: 12, hi: 24, do: func(d offload.Device, x []int32) error { return d.EnterData(offload.To(x[4:12])) }, err: offload.ErrExtension, want: mapped(1, 1, 1, 0)},
			{what: "enter to x[20:30] extends above", lo: 12, hi: 24, do: func(d offload.Device, x []int32) error { return d.EnterData(offload.To(x[20:30])) }, err: offload.ErrExtension, want: mapped(1, 1, 1, 0)},
			{what: "region over all of x overlaps", lo: 12, hi: 24, do: fill(9, bare), err: offload.ErrExtension, want: mapped(1, 1, 1, 0)},
			{what: "exit from x[12:16]: section of the entry, last", lo: 12, hi: 16, do: func(d offload.Device, x []int32) error { return d.ExitData(offload.From(x[12:16])) }, want: unmapped(1)},
			{what: "host x[10] was updated earlier, rest unchanged", lo: 10, hi: 11, do: func(offload.Device, []int32) error { return nil }, want: unmapped(5)},
		}},
		{"zero-length sections are legal", []step{
			{what: "region with x[:0]", do: fill(5, func(x []int32) any { return x[:0] }), want: unmapped(1)},
			{what: "enter to x[3:3] makes no entry", do: func(d offload.Device, x []int32) error { return d.EnterData(offload.To(x[3:3])) }, want: unmapped(1)},
			{what: "enter present to x[3:3]", do: func(d offload.Device, x []int32) error { return d.EnterData(offload.To(x[3:3]).Present()) }, want: unmapped(1)},
			{what: "enter to x", do: func(d offload.Device, x []int32) error { return d.EnterData(offload.To(x)) }, want: mapped(1, 1, 1, 0)},
			{what: "exit delete x[5:5] moves nothing", do: func(d offload.Device, x []int32) error { return d.ExitData(offload.Delete(x[5:5])) }, want: mapped(1, 1, 1, 0)},
			{what: "exit release x", do: func(d offload.Device, x []int32) error { return d.ExitData(offload.Release(x)) }, want: unmapped(1)},
		}},
		{"nested regions", []step{
			{what: "to region around a tofrom region", do: func(d offload.Device, x []int32) error {
				return d.Data(func() error {
					return d.Data(func() error {
						if dyn, _, _ := entryOf(0, x); dyn != 2 {
							return fmt.Errorf("inner dyn=%d, want 2", dyn)
						}
						return d.Run(Fill, int32(7), x)
					}, offload.ToFrom(x))
				}, offload.To(x))
			}, want: unmapped(1)},
			{what: "tofrom region around a to region", do: func(d offload.Device, x []int32) error {
				return d.Data(func() error {
					return d.Data(func() error { return d.Run(Fill, int32(7), offload.To(x)) }, offload.To(x))
				}, offload.ToFrom(x))
			}, want: unmapped(7)},
			{what: "region body error still unmaps", do: func(d offload.Device, x []int32) error {
				return d.Data(func() error { return offload.ErrBadArgument }, offload.ToFrom(x))
			}, err: offload.ErrBadArgument, want: unmapped(7)},
		}},
		{"update", []step{
			{what: "enter to", do: func(d offload.Device, x []int32) error { return d.EnterData(offload.To(x)) }, want: mapped(1, 1, 1, 0)},
			{what: "kernel writes 6", do: fill(6, bare), want: mapped(1, 6, 1, 0)},
			{what: "update from", do: func(d offload.Device, x []int32) error { return d.Update(offload.From(x)) }, want: mapped(6, 6, 1, 0)},
			hostSet(8, mapped(8, 6, 1, 0)),
			{what: "update to", do: func(d offload.Device, x []int32) error { return d.Update(offload.To(x)) }, want: mapped(8, 8, 1, 0)},
			{what: "exit delete", do: func(d offload.Device, x []int32) error { return d.ExitData(offload.Delete(x)) }, want: unmapped(8)},
		}},
		{"clauses a construct does not allow", []step{
			{what: "enter data from", do: func(d offload.Device, x []int32) error { return d.EnterData(offload.From(x)) }, err: offload.ErrBadMap, want: unmapped(1)},
			{what: "enter data tofrom", do: func(d offload.Device, x []int32) error { return d.EnterData(offload.ToFrom(x)) }, err: offload.ErrBadMap, want: unmapped(1)},
			{what: "exit data to", do: func(d offload.Device, x []int32) error { return d.ExitData(offload.To(x)) }, err: offload.ErrBadMap, want: unmapped(1)},
			{what: "enter data hold", do: func(d offload.Device, x []int32) error { return d.EnterData(offload.To(x).Hold()) }, err: offload.ErrBadMap, want: unmapped(1)},
			{what: "update alloc", do: func(d offload.Device, x []int32) error { return d.Update(offload.Alloc(x)) }, err: offload.ErrBadMap, want: unmapped(1)},
			{what: "region release", do: fill(2, func(x []int32) any { return offload.Release(x) }), err: offload.ErrBadMap, want: unmapped(1)},
			{what: "map of a string", do: func(d offload.Device, x []int32) error { return d.EnterData(offload.To("abc")) }, err: offload.ErrBadMap, want: unmapped(1)},
		}},
	}
	forEachKind(t, func(t *testing.T, k testKind) {
		k.start(t, 1)
		runScenarios(t, scenarios)
	})
}

type scenario = struct {
	name  string
	steps []step
}

func runScenarios(t *testing.T, scenarios []scenario) {
	const n = 64
	d := offload.On(0)
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			x := filled(n, 1)
			t.Cleanup(func() { _ = d.ExitData(offload.Delete(x)) })
			for i, st := range sc.steps {
				err := st.do(d, x)
				if st.err == nil && err != nil {
					t.Fatalf("step %d (%s): %v", i, st.what, err)
				}
				if st.err != nil && !errors.Is(err, st.err) {
					t.Fatalf("step %d (%s): got error %v, want one wrapping %v", i, st.what, err, st.err)
				}
				sec := x
				if st.hi > 0 {
					sec = x[st.lo:st.hi]
				}
				checkState(t, d, fmt.Sprintf("step %d (%s)", i, st.what), sec, st.want)
			}
			if len(offload.Entries(0)) != 0 {
				t.Errorf("entries left at the end: %+v", offload.Entries(0))
			}
		})
	}
}

func checkState(t *testing.T, d offload.Device, what string, sec []int32, want state) {
	t.Helper()
	if !allEqual(sec, want.host) {
		t.Fatalf("%s: host = %v, want all %d", what, sec, want.host)
	}
	dyn, hold, ok := entryOf(d.Num(), sec)
	if want.absent {
		if ok || d.IsPresent(sec) {
			t.Fatalf("%s: buffer is mapped (dyn=%d hold=%d), want it unmapped", what, dyn, hold)
		}
		return
	}
	if !ok || !d.IsPresent(sec) {
		t.Fatalf("%s: buffer is not mapped", what)
	}
	if dyn != want.dyn || hold != want.hold {
		t.Fatalf("%s: DynRefCount=%d HoldRefCount=%d, want %d %d", what, dyn, hold, want.dyn, want.hold)
	}
	if want.dev == -999 { // uninitialized device memory (alloc)
		return
	}
	if got := deviceCopy(t, d, sec); !allEqual(got, want.dev) {
		t.Fatalf("%s: device = %v, want all %d", what, got, want.dev)
	}
}

// TestMapErrorNamesBuffer checks that a mapping error names the device, the
// buffer's name, host address and size, and what was expected.
func TestMapErrorNamesBuffer(t *testing.T) {
	forEachKind(t, testMapErrorNamesBuffer)
}

func testMapErrorNamesBuffer(t *testing.T, k testKind) {
	k.start(t, 1)
	x := make([]float64, 100)
	if err := offload.EnterData(offload.To(x[10:20]).Named("x")); err != nil {
		t.Fatal(err)
	}
	defer offload.ExitData(offload.Delete(x[10:20]))
	err := offload.EnterData(offload.To(x[0:50]).Named("x"))
	var me *offload.MapError
	if !errors.As(err, &me) || !errors.Is(err, offload.ErrExtension) {
		t.Fatalf("got %v, want a *MapError wrapping ErrExtension", err)
	}
	msg := err.Error()
	for _, want := range []string{k.dev(0), `"x"`, fmt.Sprintf("HstPtr=%p", &x[0]), "Size=400", "partly mapped", fmt.Sprintf("%p", &x[10]), "Size=80"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q lacks %q", msg, want)
		}
	}
	err = offload.Update(offload.From(make([]float64, 3)).Present().Named("tmp"))
	if !errors.As(err, &me) || me.Name != "tmp" || me.Size != 24 || !strings.Contains(err.Error(), "present") {
		t.Errorf("present error = %v", err)
	}
}
