package offload_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/goffload/offload"
)

var (
	// whereRan writes the device number it ran on.
	whereRan = offload.MustKernel1("clauses.where", func(ctx offload.Ctx, out offload.Out[int32]) {
		out[0] = int32(ctx.Device())
	})
	// bump adds one to every element of a bare (implicitly mapped) slice.
	bump = offload.MustKernel1("clauses.bump", func(ctx offload.Ctx, x []int32) {
		for i := range x {
			x[i]++
		}
	})
	// set writes 9 to every element of a bare slice.
	set = offload.MustKernel1("clauses.set", func(ctx offload.Ctx, x []int32) {
		for i := range x {
			x[i] = 9
		}
	})
	// sectionAddr writes the device addresses of a zero-length section and
	// of the whole buffer it lies in.
	sectionAddr = offload.MustKernel3("clauses.sectionaddr", func(ctx offload.Ctx, whole, empty []int32, out offload.Out[uint64]) {
		out[0] = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(whole))))
		out[1] = uint64(uintptr(unsafe.Pointer(unsafe.SliceData(empty))))
	})
)

// mesh is a struct holding slices: a kernel parameter of this type gets its
// slices mapped (in by the tags' directions) and attached in the device's
// copy of the struct.
type mesh struct {
	N     int
	Scale float64
	In    []float64 `offload:"to"`
	Out   []float64 `offload:"from"`
	Work  []float64 `offload:"alloc"`
	Count []int32   // no tag: an implicit tofrom
}

var meshKernel = offload.MustKernel1("clauses.mesh", func(ctx offload.Ctx, m mesh) {
	for i := 0; i < m.N; i++ {
		m.Work[i] = m.In[i] * m.Scale
		m.Out[i] = m.Work[i]
		m.In[i] = -1 // a to-only buffer: must not come back
	}
	m.Count[0]++
})

func TestIfClause(t *testing.T) {
	forEachKind(t, testIfClause)
}

func testIfClause(t *testing.T, k testKind) {
	k.start(t, 2)
	out := []int32{-1}
	for _, c := range []struct {
		cond bool
		want int32
	}{{true, 1}, {false, int32(offload.NumDevices())}} {
		if err := whereRan.Run(offload.On(1).If(c.cond), out); err != nil {
			t.Fatal(err)
		}
		if out[0] != c.want {
			t.Errorf("If(%v): ran on device %d, want %d", c.cond, out[0], c.want)
		}
		if err := whereRan.Nowait(offload.On(1).If(c.cond).Nowait(), out).Wait(); err != nil || out[0] != c.want {
			t.Errorf("If(%v) nowait: ran on device %d (%v), want %d", c.cond, out[0], err, c.want)
		}
	}
	// A data region under a false if maps nothing.
	x := []int32{1}
	err := offload.On(0).If(false).Data(func() error {
		if offload.On(0).IsPresent(x) {
			return errors.New("x is mapped on device 0 under if(false)")
		}
		return nil
	}, offload.ToFrom(x))
	if err != nil {
		t.Fatal(err)
	}
}

func TestDefaultmap(t *testing.T) {
	forEachKind(t, testDefaultmap)
}

func testDefaultmap(t *testing.T, k testKind) {
	k.start(t, 1)
	dev := offload.On(0)
	run := func(m string, x []int32) error { return bump.Run(dev.Defaultmap(m), x) }

	for _, c := range []struct {
		m        string
		bump     string // x after bump on [1 2]: shows whether it went in and came back
		set      string // x after set on [1 2]: shows whether it came back
		fromOnly bool   // bump read uninitialized device memory
	}{
		{"default", "[2 3]", "[9 9]", false},
		{"tofrom", "[2 3]", "[9 9]", false},
		{"to", "[1 2]", "[1 2]", false},
		{"from", "", "[9 9]", true},
		{"alloc", "[1 2]", "[1 2]", false},
	} {
		x := []int32{1, 2}
		if err := run(c.m, x); err != nil {
			t.Fatalf("defaultmap(%v): %v", c.m, err)
		}
		if !c.fromOnly && fmt.Sprint(x) != c.bump {
			t.Errorf("defaultmap(%v): x = %v after bump, want %s", c.m, x, c.bump)
		}
		x = []int32{1, 2}
		if err := set.Run(dev.Defaultmap(c.m), x); err != nil {
			t.Fatalf("defaultmap(%v): %v", c.m, err)
		}
		if fmt.Sprint(x) != c.set {
			t.Errorf("defaultmap(%v): x = %v after set, want %s", c.m, x, c.set)
		}
	}
	x := []int32{1, 2}
	if err := run("present", x); !errors.Is(err, offload.ErrNotPresent) {
		t.Errorf("defaultmap(present) of an unmapped slice: %v, want ErrNotPresent", err)
	}
	err := dev.Data(func() error { return run("present", x) }, offload.ToFrom(x))
	if err != nil || fmt.Sprint(x) != "[2 3]" {
		t.Errorf("defaultmap(present) of a mapped slice: %v, x = %v, want [2 3]", err, x)
	}
	err = run("none", x)
	if !errors.Is(err, offload.ErrBadMap) || !strings.Contains(err.Error(), "defaultmap(none)") || !strings.Contains(err.Error(), "clauses.bump") {
		t.Errorf("defaultmap(none): %v, want ErrBadMap naming the kernel", err)
	}
	// An explicit clause or a declared direction is not a default.
	if err := bump.With(offload.ToFrom(x)).Run(dev.Defaultmap("none"), x); err != nil || fmt.Sprint(x) != "[3 4]" {
		t.Errorf("defaultmap(none) with a clause: %v, x = %v", err, x)
	}
	out := []int32{-1}
	if err := whereRan.Run(dev.Defaultmap("none"), out); err != nil || out[0] != 0 {
		t.Errorf("defaultmap(none), declared Out: %v, out = %v", err, out)
	}
}

// TestDefaultmapMisspelt: a behaviour that is not OpenMP's fails every
// launch on the device (also one without a bare slice, and a task) with
// ErrBadMap, naming the device, the kernel and the accepted values; the
// device's other clauses and a Defaultmap after it do not hide it.
func TestDefaultmapMisspelt(t *testing.T) {
	start(t, offload.WithDevices("host"))
	bad := offload.On(0).Defaultmap("tofro")
	x, out := []int32{1, 2}, []int32{-1}
	for what, err := range map[string]error{
		"a bare slice":            bump.Run(bad, x),
		"a declared Out":          whereRan.Run(bad, out),
		"a task":                  bump.Nowait(bad.Nowait(), x).Wait(),
		"then Defaultmap(\"to\")": bump.Run(bad.Defaultmap("to"), x),
		"then NumTeams(2)":        bump.Run(bad.NumTeams(2), x),
	} {
		if !errors.Is(err, offload.ErrBadMap) {
			t.Errorf("%s: %v, want ErrBadMap", what, err)
			continue
		}
		for _, want := range []string{"device 0", "clauses.", `defaultmap("tofro")`, "to, from, tofrom, alloc, present, none"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s: %v, want it to say %q", what, err, want)
			}
		}
	}
	if fmt.Sprint(x) != "[1 2]" || out[0] != -1 {
		t.Errorf("x = %v, out = %v after refused launches, want them untouched", x, out)
	}
	// OpenMP's spellings in another case are the same behaviours.
	if err := bump.Run(offload.On(0).Defaultmap("ToFrom"), x); err != nil || fmt.Sprint(x) != "[2 3]" {
		t.Errorf(`Defaultmap("ToFrom"): %v, x = %v, want [2 3]`, err, x)
	}
}

func TestUseDevicePtr(t *testing.T) {
	startSet(t, "host,local,cuda:0")
	for _, dev := range []offload.Device{offload.On(0), offload.On(1), offload.On(2), offload.Initial()} {
		x := []int32{1, 2, 3, 4}
		y := make([]int32, 4)
		var px, py offload.DevicePtr
		err := dev.Data(func() error {
			if px.IsNil() || px.Device() != dev.Num() || px.Size() != 16 {
				return fmt.Errorf("px = %v inside the region", px)
			}
			want, err := dev.MappedPtr(x)
			if err != nil || want.Addr() != px.Addr() {
				return fmt.Errorf("px = %v, mapped at %v (%v)", px, want, err)
			}
			// Hand the device addresses to other code: a device-side copy
			// and a kernel that takes device pointers.
			if err := offload.Memcpy(py.Offset(4), px, 12); err != nil {
				return err
			}
			return dev.Run(bump.Kernel(), py)
		}, offload.To(x), offload.From(y), offload.UseDevicePtr(x, &px), offload.UseDevicePtr(y, &py))
		if err != nil {
			t.Fatalf("device %d: %v", dev.Num(), err)
		}
		if fmt.Sprint(y) != "[1 2 3 4]" && !dev.IsInitial() {
			t.Errorf("device %d: y = %v, want [1 2 3 4]", dev.Num(), y)
		}
		if !px.IsNil() {
			t.Errorf("device %d: px = %v after the region, want nil", dev.Num(), px)
		}
	}
	// Not mapped: the list item keeps its host address (OpenMP 5.1, as
	// LLVM does), a pointer of the initial device; the region runs.
	{
		x := []int32{1, 2}
		var px offload.DevicePtr
		var inside offload.DevicePtr
		err := offload.On(0).Data(func() error { inside = px; return nil }, offload.UseDevicePtr(x, &px))
		if err != nil {
			t.Fatalf("use_device_ptr of an unmapped slice: %v, want the region to run with its host address", err)
		}
		if inside.Addr() != uintptr(unsafe.Pointer(&x[0])) || inside.Device() != offload.Initial().Num() {
			t.Errorf("use_device_ptr of an unmapped slice: %#x on device %d, want its host address %p on the initial device %d",
				inside.Addr(), inside.Device(), &x[0], offload.Initial().Num())
		}
		if !px.IsNil() {
			t.Errorf("px = %v after the region, want nil", px)
		}
	}
}

// A zero-length section that lies inside a mapping reaches the kernel with
// its device address.
func TestZeroLengthSectionAddress(t *testing.T) {
	startSet(t, "host,local,cuda:0")
	for _, dev := range []offload.Device{offload.On(0), offload.On(1), offload.On(2), offload.Initial()} {
		x := make([]int32, 16)
		out := make([]uint64, 2)
		err := dev.Data(func() error { return sectionAddr.Run(dev, x, x[5:5], out) }, offload.ToFrom(x))
		if err != nil {
			t.Fatal(err)
		}
		if out[1] != out[0]+5*4 {
			t.Errorf("device %d: empty section at %#x, buffer at %#x: want the buffer + 20", dev.Num(), out[1], out[0])
		}
	}
}

func TestStructWithSlices(t *testing.T) {
	startSet(t, "host,local,cuda:0")
	for _, dev := range []offload.Device{offload.On(0), offload.On(1), offload.On(2), offload.Initial()} {
		m := mesh{N: 3, Scale: 2, In: []float64{1, 2, 3}, Out: make([]float64, 3), Work: make([]float64, 3), Count: []int32{5}}
		if err := meshKernel.Run(dev, m); err != nil {
			t.Fatalf("device %d: %v", dev.Num(), err)
		}
		if fmt.Sprint(m.Out, m.Count) != "[2 4 6] [6]" {
			t.Errorf("device %d: Out %v Count %v, want [2 4 6] [6]", dev.Num(), m.Out, m.Count)
		}
		if !dev.IsInitial() && fmt.Sprint(m.In, m.Work) != "[1 2 3] [0 0 0]" {
			t.Errorf("device %d: In %v Work %v came back", dev.Num(), m.In, m.Work)
		}
		// With overrides a field's direction.
		if err := meshKernel.With(offload.ToFrom(m.In).Named("mesh.In")).Run(dev, m); err != nil {
			t.Fatalf("device %d: %v", dev.Num(), err)
		}
		if fmt.Sprint(m.In) != "[-1 -1 -1]" {
			t.Errorf("device %d: In = %v after With(tofrom), want -1s", dev.Num(), m.In)
		}
		// The fields' slices are present inside a region like any slice.
		m.In = []float64{1, 2, 3}
		err := dev.Data(func() error {
			if err := meshKernel.Run(dev, m); err != nil {
				return err
			}
			return dev.Update(offload.From(m.In))
		}, offload.To(m.In))
		if err != nil {
			t.Fatalf("device %d: %v", dev.Num(), err)
		}
		if fmt.Sprint(m.In, m.Count) != "[-1 -1 -1] [8]" {
			t.Errorf("device %d: In %v Count %v after a region, want [-1 -1 -1] [8]", dev.Num(), m.In, m.Count)
		}
	}
}

// A struct that cannot be attached is refused at registration, saying why.
func TestStructRefusals(t *testing.T) {
	type withPointer struct {
		X []float64
		P *float64
	}
	type nested struct {
		X []float64
		M struct{ Y []float64 }
	}
	type badTag struct {
		X []float64 `offload:"sideways"`
	}
	type hidden struct {
		X []float64
		//lint:ignore U1000 the unexported field is what the test refuses
		n int
	}
	for _, c := range []struct {
		fn   any
		want string
	}{
		{func(offload.Ctx, withPointer) {}, "field P (*float64)"},
		{func(offload.Ctx, nested) {}, "field M"},
		{func(offload.Ctx, badTag) {}, `offload:"sideways"`},
		{func(offload.Ctx, hidden) {}, "field n is not exported"},
	} {
		_, err := offload.NewKernel("clauses.refused", c.fn)
		if !errors.Is(err, offload.ErrKernelSignature) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%T: %v, want ErrKernelSignature with %q", c.fn, err, c.want)
		}
	}
}

func TestCopySlices(t *testing.T) {
	start(t, offload.WithDevices("host,local"))
	d0, d1 := offload.On(0), offload.On(1)
	x := []float64{1, 2, 3, 4, 5, 6}
	if err := d0.EnterData(offload.To(x)); err != nil {
		t.Fatal(err)
	}
	if err := d1.EnterData(offload.Alloc(x)); err != nil {
		t.Fatal(err)
	}
	// Elements 2..4 of device 0's copy to device 1's, by slice.
	if err := offload.Copy(d1, x[2:5], d0, x[2:5]); err != nil {
		t.Fatal(err)
	}
	// As a task after a host task that writes the host copy, then into the
	// host by the initial device.
	h := offload.Nowait(offload.DependOut(x)).Go("write", func() error { x[0] = 10; return nil })
	up := offload.CopyNowait(offload.Nowait(offload.DependIn(x)), d1, x[:1], offload.Initial(), x[:1])
	if err := up.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := h.Wait(); err != nil {
		t.Fatal(err)
	}
	got := make([]float64, 6)
	if err := offload.Copy(offload.Initial(), got, d1, x); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got[:5]) != "[10 0 3 4 5]" {
		t.Errorf("device 1's copy = %v, want [10 0 3 4 5 …]", got[:5])
	}
	// Lengths must agree; slices must be mapped.
	err := offload.Copy(d1, x[:2], d0, x[:3])
	if !errors.Is(err, offload.ErrBadArgument) || !strings.Contains(err.Error(), "3 elements") {
		t.Errorf("mismatched lengths: %v", err)
	}
	y := []float64{1}
	if err := offload.CopyNowait(offload.Nowait(), d1, y, d0, y).Wait(); !errors.Is(err, offload.ErrNotPresent) {
		t.Errorf("unmapped: %v, want ErrNotPresent", err)
	}
	if err := d0.ExitData(offload.Delete(x)); err != nil {
		t.Fatal(err)
	}
	if err := d1.ExitData(offload.Delete(x)); err != nil {
		t.Fatal(err)
	}
}

// TestDevicePtrAddrIsTheKernels: DevicePtr.Addr of mapped memory is the
// address the device's kernels see, on every CPU kind: for a device
// process, an address in that process (it was the number the host gives
// the memory), so pointer-based code agrees with what kernels get.
func TestDevicePtrAddrIsTheKernels(t *testing.T) {
	// CPU kinds only: a fake GPU's emulated kernel runs its Go body over
	// host copies of device memory, so it sees the copies' addresses (a
	// real GPU's PTX kernel is given the device addresses).
	start(t, offload.WithDevices("host,local"))
	for _, dev := range []offload.Device{offload.On(0), offload.On(1), offload.Initial()} {
		x := make([]int32, 16)
		out := make([]uint64, 2)
		var addr, addr5 uintptr
		err := dev.Data(func() error {
			p, err := dev.MappedPtr(x)
			if err != nil {
				return err
			}
			addr, addr5 = p.Addr(), p.Offset(20).Addr()
			return sectionAddr.Run(dev, x, x[5:5], out)
		}, offload.ToFrom(x))
		if err != nil {
			t.Fatal(err)
		}
		if uint64(addr) != out[0] || uint64(addr5) != out[1] {
			t.Errorf("device %d: Addr %#x and %#x, the kernel saw %#x and %#x", dev.Num(), addr, addr5, out[0], out[1])
		}
	}
}
