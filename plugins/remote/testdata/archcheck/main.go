// Command archcheck checks that values cross between a host and device
// processes built for other architectures (plugins/remote's arch tests):
// every kind of scalar argument, a struct of them with padding, a struct
// parameter holding slices, slices of structs, and declare target
// variables (to and link). It runs its kernels on every device that
// GOFFLOAD_DEVICES names and compares what comes back with what the host
// computes. It prints "verified" and how many of its multiply-adds the
// device fused (an explicit float64 conversion stops that, and those
// results must match the host's bit for bit).
//
// Started with GOFFLOAD_ROLE=device, it serves as a device process.
package main

import (
	"fmt"
	"math"
	"os"
	"reflect"

	"github.com/goffload/offload"
)

// Pad has padding between and after its fields.
type Pad struct {
	X int8
	Y float64
	Z int16
}

// Mixed is every plain-data kind Go has, and a nested struct and array.
type Mixed struct {
	B    bool
	I8   int8
	I16  int16
	I32  int32
	I64  int64
	I    int
	U8   uint8
	U16  uint16
	U32  uint32
	U64  uint64
	U    uint
	F32  float32
	F64  float64
	C64  complex64
	C128 complex128
	A    [3]int16
	P    Pad
}

// Attach is a struct parameter holding slices: its fields are parameters.
type Attach struct {
	N     int32
	Scale float64
	Xs    offload.In[float64]
	Out   offload.Out[int64]
}

var (
	// Table is `declare target to(table)`; Weights is `declare target link(weights)`.
	Table   = offload.DeclareTarget("archcheck.table", []Pad{{1, 2.5, 3}, {-4, -5.25, -6}, {127, math.Pi, -32768}})
	Weights = offload.DeclareTargetLink("archcheck.weights", []float64{0.5, -0.25, 1e300, math.SmallestNonzeroFloat64})

	Scalars = offload.MustKernel("archcheck.scalars", func(ctx offload.Ctx, m Mixed, b bool, i int, u uint, c complex128, a [3]int16, p Pad, out []Mixed) {
		out[0] = m
		out[1] = Mixed{B: b, I: i, U: u, C128: c, A: a, P: p}
	})
	Attached = offload.MustKernel("archcheck.attach", func(ctx offload.Ctx, a Attach) {
		for i := range a.Xs {
			a.Out[i] = int64(float64(a.N) * a.Scale * a.Xs[i])
		}
	})
	Globals = offload.MustKernel("archcheck.globals", func(ctx offload.Ctx, table []Pad, weights []float64) {
		t := Table.On(ctx)
		copy(table, t)
		for i := range t {
			t[i].Y *= 2
			t[i].Z--
		}
		copy(weights, Weights.On(ctx))
	})
	FMA = offload.MustKernel("archcheck.fma", func(ctx offload.Ctx, x, y, z []float64, fused, plain []float64) {
		for i := range x {
			fused[i] = x[i]*y[i] + z[i]
			plain[i] = float64(x[i]*y[i]) + z[i]
		}
	})
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "archcheck:", err)
		os.Exit(1)
	}
}

func run() error {
	if err := offload.Start(offload.WithOffload("MANDATORY")); err != nil { // a device process serves here
		return err
	}
	defer offload.Stop()
	n := offload.NumDevices()
	if n == 0 {
		return fmt.Errorf("no devices")
	}
	fused := 0
	for d := 0; d < n; d++ {
		f, err := check(offload.On(d))
		if err != nil {
			return fmt.Errorf("device %d: %w", d, err)
		}
		fused += f
	}
	fmt.Printf("archcheck on %d device(s): verified; %d of %d multiply-adds fused\n", n, fused, n*fmaN)
	return nil
}

const fmaN = 1000

func check(dev offload.Device) (fused int, err error) {
	m := Mixed{B: true, I8: -128, I16: -32768, I32: math.MinInt32, I64: math.MinInt64, I: math.MaxInt,
		U8: 255, U16: 65535, U32: math.MaxUint32, U64: math.MaxUint64, U: math.MaxUint - 1,
		F32: -math.MaxFloat32, F64: math.Nextafter(1, 2), C64: complex(1.5, -math.SmallestNonzeroFloat32), C128: complex(math.Inf(-1), math.MaxFloat64),
		A: [3]int16{-1, 2, -3}, P: Pad{X: -7, Y: math.Copysign(0, -1), Z: 1234}}
	b, i, u, c, a, p := true, math.MinInt+1, uint(math.MaxUint/2+5), complex(-2.5, 1e-310), [3]int16{7, -8, 9}, Pad{X: 5, Y: math.NaN(), Z: -2}
	out := make([]Mixed, 2)
	if err := dev.Run(Scalars, m, b, i, u, c, a, p, offload.From(out)); err != nil {
		return 0, err
	}
	want1 := Mixed{B: b, I: i, U: u, C128: c, A: a, P: p}
	if !reflect.DeepEqual(out[0], m) || !math.Signbit(out[0].P.Y) {
		return 0, fmt.Errorf("a struct of every kind crossed as %+v, want %+v", out[0], m)
	}
	if got := out[1]; !math.IsNaN(got.P.Y) || got.P.X != p.X || got.P.Z != p.Z {
		return 0, fmt.Errorf("a padded struct crossed as %+v, want %+v", got.P, p)
	}
	out[1].P.Y, want1.P.Y = 0, 0
	if !reflect.DeepEqual(out[1], want1) {
		return 0, fmt.Errorf("scalars crossed as %+v, want %+v", out[1], want1)
	}

	xs := []float64{1, -2.5, 1e10, 3.25}
	got := make([]int64, len(xs))
	if err := dev.Run(Attached, Attach{N: -3, Scale: 0.5, Xs: xs, Out: got}); err != nil {
		return 0, err
	}
	for k := range xs {
		if w := int64(float64(int32(-3)) * 0.5 * xs[k]); got[k] != w {
			return 0, fmt.Errorf("a struct parameter holding slices: out[%d] = %d, want %d", k, got[k], w)
		}
	}

	table := make([]Pad, len(Table.Host()))
	weights := make([]float64, len(Weights.Host()))
	wantTable := append([]Pad(nil), Table.Host()...)
	err = dev.Data(func() error {
		return dev.Run(Globals, offload.From(table), offload.From(weights))
	}, offload.To(Weights.Host()))
	if err != nil {
		return 0, err
	}
	if !reflect.DeepEqual(table, wantTable) || !reflect.DeepEqual(weights, Weights.Host()) {
		return 0, fmt.Errorf("declare target variables read %v and %v on the device, want %v and %v", table, weights, wantTable, Weights.Host())
	}
	if err := dev.Update(offload.From(Table.Host())); err != nil {
		return 0, err
	}
	for k, t := range Table.Host() {
		w := wantTable[k]
		if t.X != w.X || t.Y != 2*w.Y || t.Z != w.Z-1 {
			return 0, fmt.Errorf("declare target to variable: the device's copy came back as %+v, want %+v", Table.Host(), wantTable)
		}
	}
	copy(Table.Host(), wantTable) // and back to the device, for the next one
	if err := dev.Update(offload.To(Table.Host())); err != nil {
		return 0, err
	}

	x, y, z := make([]float64, fmaN), make([]float64, fmaN), make([]float64, fmaN)
	for k := range x {
		x[k] = 1 + float64(k)/3
		y[k] = 1 - float64(k)/7
		z[k] = -float64(k) / 11
	}
	fusedOut, plain := make([]float64, fmaN), make([]float64, fmaN)
	if err := dev.Run(FMA, x, y, z, offload.From(fusedOut), offload.From(plain)); err != nil {
		return 0, err
	}
	for k := range x {
		w := float64(x[k]*y[k]) + z[k]
		if math.Float64bits(plain[k]) != math.Float64bits(w) {
			return 0, fmt.Errorf("float64(x*y)+z at %d is %v, want %v bit for bit", k, plain[k], w)
		}
		if fusedOut[k] != w {
			fused++
		}
	}
	return fused, nil
}
