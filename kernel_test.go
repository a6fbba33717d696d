package offload_test

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/goffload/offload"
)

func TestKernelSignatures(t *testing.T) {
	type withPtr struct{ P *int }
	type withSlice struct{ P []int32 }
	type plain struct {
		A int16
		B [2]float64
		C bool
	}
	for _, c := range []struct {
		name, want string
		fn         any
	}{
		{"sig.string", "parameter 1 (string)", func(a int, s string) {}},
		{"sig.map", "parameter 0 (map[int]int)", func(m map[int]int) {}},
		{"sig.pointer", "parameter 0 (*float32)", func(p *float32) {}},
		{"sig.chan", "parameter 0 (chan int)", func(c chan int) {}},
		{"sig.func", "parameter 0 (func())", func(f func()) {}},
		{"sig.iface", "parameter 0 (interface {})", func(x any) {}},
		{"sig.structptr", "field P", func(s []withPtr) {}},
		{"sig.strings", "parameter 0 ([]string)", func(s []string) {}},
		{"sig.nested", "slice of slices", func(s [][]float32) {}},
		// A buffer of structs that hold slices: the message names the field
		// and says what to do (it said "[]int32 is a slice of slices").
		{"sig.structslices", "field P is a slice ([]int32)", func(s []withSlice) {}},
		{"sig.result", "returns 1 results", func() int { return 0 }},
		{"sig.variadic", "variadic", func(x ...int) {}},
		{"sig.notfunc", "body is int", 42},
		{"sig.nil", "body is <nil>", nil},
		{"sig.ctxlate", "parameter 1 (offload.Ctx)", func(a int, c ctxAlias) {}},
		{"", "name is empty", func() {}},
		{"test.fill", `"test.fill" is registered twice`, func() {}},
	} {
		k, err := offload.NewKernel(c.name, c.fn)
		if k != nil || !errors.Is(err, offload.ErrKernelSignature) {
			t.Errorf("%s: got %v, %v; want ErrKernelSignature", c.name, k, err)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || (c.name != "" && !strings.Contains(err.Error(), c.name)) {
			t.Errorf("%s: error %q should name the kernel and contain %q", c.name, err, c.want)
		}
	}
	// The registry is global: a name of its own for each run (go test -count=N).
	name := fmt.Sprintf("sig.ok.%d", sigRuns.Add(1))
	k, err := offload.NewKernel(name, func(ctx offload.Ctx, a plain, b [3]complex64, c []plain, d uint8) {})
	if err != nil {
		t.Fatalf("valid kernel refused: %v", err)
	}
	if got := k.String(); got != name+"(ctx, offload_test.plain, [3]complex64, []offload_test.plain, uint8)" {
		t.Errorf("String() = %q", got)
	}
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(r.(error).Error(), "sig.must") {
				t.Errorf("MustKernel of a bad signature: recovered %v, want a panic naming the kernel", r)
			}
		}()
		offload.MustKernel("sig.must", func(s string) {})
	}()
}

type ctxAlias = offload.Ctx

var sigRuns atomic.Int64

type Particle struct {
	Pos  [3]float64
	Mass float32
	Tag  uint16
	On   bool
}

var AllScalars = offload.MustKernel("test.allscalars", func(b bool, i8 int8, i16 int16, i32 int32, i64 int64, i int,
	u8 uint8, u16 uint16, u32 uint32, u64 uint64, u uint, f32 float32, f64 float64,
	c64 complex64, c128 complex128, arr [4]int16, p Particle, out []float64, pout []Particle) {
	bv := 0.0
	if b {
		bv = 1
	}
	copy(out, []float64{bv, float64(i8), float64(i16), float64(i32), float64(i64), float64(i),
		float64(u8), float64(u16), float64(u32), float64(u64), float64(u), float64(f32), f64,
		real(complex128(c64)), imag(complex128(c64)), real(c128), imag(c128),
		float64(arr[0]), float64(arr[3])})
	pout[0] = p
})

// TestScalarsByValue passes every kind of scalar through the host device and
// checks each arrives exactly.
func TestScalarsByValue(t *testing.T) {
	start(t, offload.WithDevices("host"), offload.WithOffload("MANDATORY"))
	p := Particle{Pos: [3]float64{1.5, -2, 3e10}, Mass: 0.25, Tag: 65535, On: true}
	for _, dev := range []offload.Device{offload.On(0), offload.Initial()} {
		out := make([]float64, 19)
		pout := make([]Particle, 1)
		err := dev.Run(AllScalars, true, int8(-128), int16(-3), int32(-70000), int64(-1)<<40, -5,
			uint8(255), uint16(65000), uint32(4e9), uint64(1)<<50, uint(7), float32(1.25), 2.5,
			complex64(complex(1, -1)), complex(3, 4), [4]int16{-1, 0, 0, 9}, p, out, offload.From(pout))
		if err != nil {
			t.Fatal(err)
		}
		want := []float64{1, -128, -3, -70000, -(1 << 40), -5, 255, 65000, 4e9, 1 << 50, 7, 1.25, 2.5, 1, -1, 3, 4, -1, 9}
		for i := range want {
			if out[i] != want[i] {
				t.Errorf("%v: scalar %d = %v, want %v", dev, i, out[i], want[i])
			}
		}
		if pout[0] != p {
			t.Errorf("%v: struct = %+v, want %+v", dev, pout[0], p)
		}
	}
}

func TestKernelArguments(t *testing.T) {
	start(t, offload.WithDevices("host"))
	x := make([]float32, 4)
	// Untyped constants convert when they fit.
	if err := offload.Run(Scale, 2.0, x); err != nil {
		t.Errorf("float64 constant for a float32: %v", err)
	}
	if err := offload.Run(Fill, 7, make([]int32, 2)); err != nil {
		t.Errorf("int constant for an int32: %v", err)
	}
	for _, c := range []struct {
		name string
		k    *offload.Kernel
		args []any
		want string
	}{
		{"too few", Scale, []any{float32(1)}, "got 1 arguments, want 2"},
		{"too many", Scale, []any{float32(1), x, x}, "got 3 arguments, want 2"},
		{"overflow", Fill, []any{int64(1) << 40, make([]int32, 1)}, "does not fit in int32"},
		{"fraction", Fill, []any{1.5, make([]int32, 1)}, "1.5 does not fit in int32"},
		{"string scalar", Fill, []any{"7", make([]int32, 1)}, "got string, want int32"},
		{"map for scalar", Scale, []any{offload.To(x), x}, "map clause for a scalar"},
		{"wrong element", Scale, []any{float32(1), make([]float64, 2)}, "got []float64, want []float32"},
		{"wrong map element", Scale, []any{float32(1), offload.To(make([]int32, 2))}, "map clause of a []int32, want []float32"},
		{"nil slice arg", Scale, []any{float32(1), nil}, "got <nil>, want []float32"},
		{"nil kernel", nil, nil, "nil kernel"},
	} {
		err := offload.Run(c.k, c.args...)
		if !errors.Is(err, offload.ErrBadArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want ErrBadArgument with %q", c.name, err, c.want)
		}
		if c.k != nil && !strings.Contains(err.Error(), c.k.Name()) {
			t.Errorf("%s: error %q does not name the kernel", c.name, err)
		}
	}
	for _, v := range []any{-1, 256, 3.5} {
		if err := offload.Run(Bytes, v, make([]uint8, 1)); !errors.Is(err, offload.ErrBadArgument) {
			t.Errorf("%v for a uint8: %v, want ErrBadArgument", v, err)
		}
	}
}

var Bytes = offload.MustKernel("test.bytes", func(v uint8, x []uint8) { x[0] = v })

var Boom = offload.MustKernel("test.boom", func(ctx offload.Ctx, where int32, x []int32) {
	if where == 0 {
		panic("boom in the body")
	}
	ctx.For(len(x), func(lo, hi int) {
		if lo == 0 {
			panic("boom in a chunk")
		}
	})
})

// TestKernelPanic checks that a panicking kernel is an error with the panic
// value and stack, on every device, and that the device keeps serving.
func TestKernelPanic(t *testing.T) {
	start(t, offload.WithDevices("host"))
	for _, dev := range []offload.Device{offload.On(0), offload.Initial()} {
		for where, msg := range map[int32]string{0: "boom in the body", 1: "boom in a chunk"} {
			x := filled(64, 3)
			err := dev.Run(Boom, where, x)
			var kp *offload.KernelPanic
			if !errors.Is(err, offload.ErrKernelFailed) || !strings.Contains(err.Error(), msg) ||
				!strings.Contains(err.Error(), "test.boom") || !errors.As(err, &kp) || !strings.Contains(kp.Stack, "kernel_test.go") {
				t.Errorf("%v: got %v, want ErrKernelFailed with %q and a KernelPanic with the stack", dev, err, msg)
			}
			if !allEqual(x, 3) {
				t.Errorf("%v: host buffer changed by a failed region: %v", dev, x[:4])
			}
			if dev.Num() == 0 && len(offload.Entries(0)) != 0 {
				t.Errorf("entries left after a failed region: %+v", offload.Entries(0))
			}
			if err := dev.Run(Fill, int32(5), x); err != nil || !allEqual(x, 5) {
				t.Errorf("%v: next launch after a panic: %v %v", dev, err, x[:4])
			}
		}
	}
}
