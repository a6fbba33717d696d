package gentest

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"github.com/goffload/offload"
	"github.com/goffload/offload/internal/opencltest"
)

// gpu, where set ("cuda:0"), is the device the tests run the generated
// code on instead of opencl:0: its PTX (cuda_test.go).
var gpu string

// start starts a host device (0) and an OpenCL device (1), mandatory: the
// OpenCL device runs no Go, so a kernel that ran there ran its generated C.
// Where gpu is set, device 1 is that GPU.
func start(t testing.TB) (host, cl offload.Device) {
	t.Helper()
	spec := gpu
	if spec == "" {
		spec = "opencl:0"
		opencltest.Need(t)
	}
	if err := offload.Start(offload.WithDevices("host,"+spec), offload.WithOffload("MANDATORY")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := offload.Stop(); err != nil {
			t.Error(err)
		}
	})
	return offload.On(0), offload.On(1)
}

func bytesOf[T any](s []T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(*new(T))))
}

// same fails the test unless host's and cl's results are the same bits.
func same[T any](t *testing.T, what string, host, cl []T) {
	t.Helper()
	hb, cb := bytesOf(host), bytesOf(cl)
	if bytes.Equal(hb, cb) {
		return
	}
	for i := range host {
		if !bytes.Equal(bytesOf(host[i:i+1]), bytesOf(cl[i:i+1])) {
			t.Fatalf("%s: element %d: host %v, OpenCL %v", what, i, host[i], cl[i])
		}
	}
}

// edges are integers near the ends of every width, and small ones.
var edges = []int64{0, 1, -1, 2, -2, 3, 7, -7, 8, 31, 32, 33, 63, 64, 65, 127, -128, 128, 255, 256, 32767, -32768,
	65535, math.MaxInt32, math.MinInt32, math.MaxUint32, math.MaxInt64, math.MinInt64, math.MinInt64 + 1, 1 << 40}

func ints(n int, r *rand.Rand) []int64 {
	x := make([]int64, n)
	for i := range x {
		if i < len(edges)*len(edges) {
			x[i] = edges[i%len(edges)]
			continue
		}
		x[i] = int64(r.Uint64()) >> r.IntN(64)
	}
	return x
}

func convert[T int32 | int64 | int8 | uint16 | uint8](x []int64) []T {
	y := make([]T, len(x))
	for i, v := range x {
		y[i] = T(v)
	}
	return y
}

// TestIntegers: Go's integer semantics on PoCL, bit for bit: wrapping,
// truncating division, MinInt / -1, shifts past the width, the narrow
// types that C promotes.
func TestIntegers(t *testing.T) {
	host, cl := start(t)
	r := rand.New(rand.NewPCG(1, 2))
	n := len(edges)*len(edges) + 1000
	a, b := ints(n, r), ints(n, r)
	// b pairs every edge with every edge
	for i := range len(edges) * len(edges) {
		b[i] = edges[i/len(edges)]
	}
	for _, dev := range []struct {
		name string
		run  func(d offload.Device) ([]byte, error)
	}{
		{"int32", func(d offload.Device) ([]byte, error) {
			out := make([]int32, 8*n)
			return bytesOf(out), Int32Ops.Run(d, convert[int32](a), convert[int32](b), out)
		}},
		{"int64", func(d offload.Device) ([]byte, error) {
			out := make([]int64, 8*n)
			return bytesOf(out), Int64Ops.Run(d, a, b, out)
		}},
		{"small", func(d offload.Device) ([]byte, error) {
			out := make([]int64, 4*n)
			return bytesOf(out), SmallOps.Run(d, convert[int8](a), convert[uint16](b), out)
		}},
		{"overflow", func(d offload.Device) ([]byte, error) {
			out := make([]int32, n)
			return bytesOf(out), Overflow.Run(d, convert[int32](a), a, out)
		}},
		{"collatz", func(d offload.Device) ([]byte, error) {
			out := make([]int32, n)
			x := make([]int64, n)
			for i := range x {
				x[i] = a[i] % 100000
			}
			return bytesOf(out), Collatz.Run(d, 500, x, out)
		}},
		{"histogram", func(d offload.Device) ([]byte, error) {
			out := make([]int32, 32)
			return bytesOf(out), Histogram.Run(d, convert[uint8](a), out)
		}},
	} {
		hb, err := dev.run(host)
		if err != nil {
			t.Fatalf("%s on the host: %v", dev.name, err)
		}
		cb, err := dev.run(cl)
		if err != nil {
			t.Fatalf("%s on OpenCL: %v", dev.name, err)
		}
		same(t, dev.name, hb, cb)
	}
}

// floats are float64s near the ends and special values, and random ones.
func floats(n int, r *rand.Rand) []float64 {
	special := []float64{0, math.Copysign(0, -1), 1, -1, 0.5, 3, 1e-310, -1e-310, math.MaxFloat64, math.SmallestNonzeroFloat64,
		math.Inf(1), math.Inf(-1), math.NaN(), 1e30, 1e-30, 2.5, -7.25, 16777217, 1 << 53}
	x := make([]float64, n)
	for i := range x {
		if i < len(special)*len(special) {
			x[i] = special[i%len(special)]
			if i/len(special)%2 == 1 {
				x[i] = special[i/len(special)]
			}
			continue
		}
		x[i] = (r.Float64() - 0.5) * math.Pow(10, float64(r.IntN(20)-10))
	}
	return x
}

// TestFloats: float32 and float64 + - * /, square roots, min and max,
// no contraction, conversions: bit for bit (NaNs compared as NaNs).
func TestFloats(t *testing.T) {
	host, cl := start(t)
	r := rand.New(rand.NewPCG(3, 4))
	n := 2000
	a, b := floats(n, r), floats(n, r)
	for i := range b {
		b[i] = a[(i*7+3)%n]
	}
	a32, b32 := make([]float32, n), make([]float32, n)
	for i := range a {
		a32[i], b32[i] = float32(a[i]), float32(b[i])
	}
	h32, c32 := make([]float32, 8*n), make([]float32, 8*n)
	if err := FloatOps.Run(host, a32, b32, h32); err != nil {
		t.Fatal(err)
	}
	if err := FloatOps.Run(cl, a32, b32, c32); err != nil {
		t.Fatal(err)
	}
	for i := range h32 {
		if h32[i] != c32[i] && !(h32[i] != h32[i] && c32[i] != c32[i]) || math.Signbit(float64(h32[i])) != math.Signbit(float64(c32[i])) && h32[i] == h32[i] {
			t.Fatalf("float32 op %d of (%v, %v): host %v, OpenCL %v", i%8, a32[i/8], b32[i/8], h32[i], c32[i])
		}
	}
	h64, c64 := make([]float64, 8*n), make([]float64, 8*n)
	if err := DoubleOps.Run(host, a, b, h64); err != nil {
		t.Fatal(err)
	}
	if err := DoubleOps.Run(cl, a, b, c64); err != nil {
		t.Fatal(err)
	}
	for i := range h64 {
		if math.Float64bits(h64[i]) != math.Float64bits(c64[i]) && !(math.IsNaN(h64[i]) && math.IsNaN(c64[i])) {
			t.Fatalf("float64 op %d of (%v, %v): host %v, OpenCL %v", i%8, a[i/8], b[i/8], h64[i], c64[i])
		}
	}
	// conversions, in range
	for i := range a {
		a[i] = math.Mod(a[i], 1e12)
		if math.IsNaN(a[i]) || math.IsInf(a[i], 0) {
			a[i] = 3.75
		}
	}
	for _, neg := range []bool{false, true} {
		hf, cf := make([]bool, n), make([]bool, n)
		hi, ci := make([]int64, 4*n), make([]int64, 4*n)
		if err := Convert.Run(host, neg, a, hf, hi); err != nil {
			t.Fatal(err)
		}
		if err := Convert.Run(cl, neg, a, cf, ci); err != nil {
			t.Fatal(err)
		}
		same(t, "conversions", hi, ci)
		same(t, "bools", hf, cf)
	}
}

// TestMandelbrot: loops, a function with an early return, float64 and
// integer division on PoCL as on the host.
func TestMandelbrot(t *testing.T) {
	host, cl := start(t)
	w, h := 97, 61
	ho, co := make([]int32, w*h), make([]int32, w*h)
	if err := Mandelbrot.Run(host, w, h, 200, ho); err != nil {
		t.Fatal(err)
	}
	if err := Mandelbrot.Run(cl, w, h, 200, co); err != nil {
		t.Fatal(err)
	}
	same(t, "mandelbrot", ho, co)
}

// TestFaults: an index out of range and a division by zero fail the
// launch on PoCL with ErrKernelFailed and the same KernelPanic as on the
// host: the kernel, the Go file and line, the index and the length.
func TestFaults(t *testing.T) {
	host, cl := start(t)
	idx := []int{0, 1, 2, 7, 3}
	x := []float32{1, 2, 3, 4, 5}
	zero := []int{4, 2, 0, 1}
	for _, c := range []struct {
		name, want string
		run        func(d offload.Device) error
	}{
		{"gather", "kernels.go:219: runtime error: index out of range [7] with length 5", func(d offload.Device) error {
			return Gather.Run(d, idx, x, make([]float32, len(idx)))
		}},
		{"gathercall", "kernels.go:234: runtime error: index out of range [7] with length 5", func(d offload.Device) error {
			return GatherCall.Run(d, idx, x, make([]float32, len(idx)))
		}},
		{"divide", "kernels.go:228: runtime error: integer divide by zero", func(d offload.Device) error {
			return Divide.Run(d, []int{8, 8, 8, 8}, zero, make([]int, 4))
		}},
	} {
		var msgs []string
		for _, d := range []offload.Device{host, cl} {
			err := c.run(d)
			var kp *offload.KernelPanic
			if !errors.Is(err, offload.ErrKernelFailed) || !errors.As(err, &kp) {
				t.Fatalf("%s on device %d: %v, want a KernelPanic", c.name, d.Num(), err)
			}
			at, value, _ := strings.Cut(c.want, ": ")
			if kp.Kernel != c.name || kp.Value != value || !kp.Chunk {
				t.Errorf("%s on device %d: %v, want %q in a chunk", c.name, d.Num(), err, value)
			}
			// The host trims this package's frames (it is goffload's own,
			// under internal/); PoCL's record names the line.
			if d == cl && (kp.At != at || !strings.Contains(err.Error(), c.want)) {
				t.Errorf("%s on PoCL: %v, want %q", c.name, err, c.want)
			}
			msgs = append(msgs, kp.Value)
		}
		if msgs[0] != msgs[1] {
			t.Errorf("%s: the host says\n\t%s\nPoCL says\n\t%s", c.name, msgs[0], msgs[1])
		}
		// the device works on after a fault
		if err := c.run(cl); err == nil {
			t.Errorf("%s: a second launch did not fail", c.name)
		}
	}
	out := make([]float32, 3)
	if err := Gather.Run(cl, []int{4, 0, 2}, x, out); err != nil || out[0] != 5 || out[2] != 3 {
		t.Fatalf("gather after faults: %v, %v", out, err)
	}
}

// TestStructs: structs of scalars in buffers, by value, as parameters
// (their fields the entry's) and local variables, a struct parameter with
// slices, and ctx.ForChunks, on PoCL as on the host, bit for bit.
func TestStructs(t *testing.T) {
	host, cl := start(t)
	r := rand.New(rand.NewPCG(5, 6))
	n := 1000
	ps := make([]Particle, n)
	for i := range ps {
		ps[i] = Particle{X: r.NormFloat64(), Y: r.NormFloat64() * 1e3, M: float32(r.Float64()), Alive: i%3 != 0, ID: int32(r.IntN(2000) - 1000)}
	}
	prm := Params{DT: 0.01, Scale: 1.5, Steps: 3}
	hp, cp := append([]Particle(nil), ps...), append([]Particle(nil), ps...)
	ho, co := make([]float64, n), make([]float64, n)
	if err := Structs.Run(host, prm, hp, ho); err != nil {
		t.Fatal(err)
	}
	if err := Structs.Run(cl, prm, cp, co); err != nil {
		t.Fatal(err)
	}
	same(t, "particles", hp, cp)
	same(t, "structs' out", ho, co)
	if hp[1] == ps[1] {
		t.Fatal("the kernel changed no particle")
	}

	in := make([]float64, n)
	for i := range in {
		in[i] = r.Float64()
	}
	hg, cg := Grid{N: n, In: in, Out: make([]float64, n)}, Grid{N: n, In: in, Out: make([]float64, n)}
	if err := Fields.Run(host, hg); err != nil {
		t.Fatal(err)
	}
	if err := Fields.Run(cl, cg); err != nil {
		t.Fatal(err)
	}
	same(t, "fields", hg.Out, cg.Out)

	x := convert[int32](ints(n, r))
	hc, cc := make([]int64, n), make([]int64, n)
	if err := Chunks.Run(host, x, hc); err != nil {
		t.Fatal(err)
	}
	if err := Chunks.Run(cl, x, cc); err != nil {
		t.Fatal(err)
	}
	same(t, "chunks", hc, cc)
	if hc[5] != int64(x[5])*3+1 {
		t.Fatalf("chunks: out[5] = %d, want %d", hc[5], int64(x[5])*3+1)
	}
}

// TestDim: math.Dim of infinities, NaNs and ±0 on PoCL as on the host.
func TestDim(t *testing.T) {
	host, cl := start(t)
	v := []float64{math.Inf(1), math.Inf(-1), math.NaN(), 0, math.Copysign(0, -1), 1, -2.5}
	var a, b []float64
	for _, x := range v {
		for _, y := range v {
			a, b = append(a, x), append(b, y)
		}
	}
	ho, co := make([]float64, len(a)), make([]float64, len(a))
	if err := Dim.Run(host, a, b, ho); err != nil {
		t.Fatal(err)
	}
	if err := Dim.Run(cl, a, b, co); err != nil {
		t.Fatal(err)
	}
	for i := range ho {
		if math.Float64bits(ho[i]) != math.Float64bits(co[i]) && !(math.IsNaN(ho[i]) && math.IsNaN(co[i])) {
			t.Fatalf("math.Dim(%v, %v): host %v, PoCL %v", a[i], b[i], ho[i], co[i])
		}
	}
}
