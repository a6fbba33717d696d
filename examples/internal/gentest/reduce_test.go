package gentest

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/goffload/offload"
)

// chunked is offload.Reduce's result with k chunks, as a host device with
// k cores gives it: [0, n) split as workpool.Bounds splits it, each chunk
// summed from 0 and the chunks' sums added in order.
func chunked[T float32 | float64](n, k int, elem func(i int) T) T {
	k = min(n, k)
	var r T
	for c := range k {
		q, rem := n/k, n%k
		lo := c*q + min(c, rem)
		hi := lo + q
		if c < rem {
			hi++
		}
		var acc T
		for i := lo; i < hi; i++ {
			acc += elem(i)
		}
		if c == 0 {
			r = acc
		} else {
			r += acc
		}
	}
	return r
}

// TestReduce: offload.Reduce with each built-in op on PoCL, from the Go
// bodies: integers, Min, Max (any NaN for a NaN) and the logical ops as
// on the host device, bit for bit; float sums bit for bit as Reduce with
// 256 chunks (a host device with 256 cores) sums them, the device's
// promise, and within rounding of the host's.
func TestReduce(t *testing.T) {
	host, cl := start(t)
	r := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{0, 1, 5, 255, 256, 257, 1000, 100003} {
		x := make([]float64, n)
		x32 := make([]float32, n)
		i32 := make([]int32, n)
		i8 := make([]int8, n)
		u16 := make([]uint16, n)
		u64 := make([]uint64, n)
		b, nb := make([]bool, n), make([]bool, n)
		for i := range n {
			x[i] = r.NormFloat64() * math.Exp2(float64(r.IntN(40)-20))
			x32[i] = float32(x[i])
			i32[i] = int32(r.Uint32())
			i8[i] = int8(r.Uint32())
			u16[i] = uint16(r.Uint32()) | 1000
			u64[i] = r.Uint64()
			b[i] = i != n/2
			nb[i] = i == n-1
		}
		// Sum of float64, combined with out[0] (ToFrom)
		for _, start := range []float64{0, 1.5} {
			out := []float64{start}
			if err := SumF64.Run(cl, x, out); err != nil {
				t.Fatalf("n %d: sumf64: %v", n, err)
			}
			want := start + chunked(n, 256, func(i int) float64 { return x[i] })
			if n == 0 {
				want = start
			}
			if math.Float64bits(out[0]) != math.Float64bits(want) {
				t.Errorf("n %d: sumf64 from %v: PoCL %v, want %v (256 chunks)", n, start, out[0], want)
			}
			ho := []float64{start}
			if err := SumF64.Run(host, x, ho); err != nil {
				t.Fatal(err)
			}
			if d := math.Abs(ho[0] - out[0]); d > 1e-9*(1+math.Abs(ho[0])) {
				t.Errorf("n %d: sumf64: host %v, PoCL %v", n, ho[0], out[0])
			}
		}
		if n > 0 {
			const scale = 1.25
			out := make([]float32, 2)
			if err := SumF32.Run(cl, scale, x32, out); err != nil {
				t.Fatalf("n %d: sumf32: %v", n, err)
			}
			want := chunked(n-1, 256, func(i int) float32 { return x32[i+1]*scale - x32[i] })
			if math.Float32bits(out[0]) != math.Float32bits(want) || out[1] != float32(n-1) {
				t.Errorf("n %d: sumf32: PoCL %v, want %v, %d", n, out, want, n-1)
			}
		}
		exact := func(name string, run func(d offload.Device) ([]byte, error)) {
			t.Helper()
			hb, err := run(host)
			if err != nil {
				t.Fatalf("n %d: %s on the host: %v", n, name, err)
			}
			cb, err := run(cl)
			if err != nil {
				t.Fatalf("n %d: %s on PoCL: %v", n, name, err)
			}
			if string(hb) != string(cb) {
				t.Errorf("n %d: %s: host %x, PoCL %x", n, name, hb, cb)
			}
		}
		exact("sumi32", func(d offload.Device) ([]byte, error) {
			out := make([]int64, 1)
			return bytesOf(out), SumI32.Run(d, i32, out)
		})
		exact("prodi8", func(d offload.Device) ([]byte, error) {
			out := make([]int64, 1)
			return bytesOf(out), ProdI8.Run(d, i8, out)
		})
		for _, v := range [][]float64{x, withNaN(x), {0, math.Copysign(0, -1)}, {math.Copysign(0, -1), 0}} {
			exact("minf64", func(d offload.Device) ([]byte, error) {
				out := make([]float64, 2)
				err := MinF64.Run(d, v, out)
				return bytesOf(canonNaN(out)), err
			})
			exact("maxf64", func(d offload.Device) ([]byte, error) {
				out := make([]float64, 1)
				err := MaxF64.Run(d, v, out)
				return bytesOf(canonNaN(out)), err
			})
		}
		exact("minmaxu16", func(d offload.Device) ([]byte, error) {
			out := make([]uint16, 3)
			return bytesOf(out), MinMaxU16.Run(d, u16, out)
		})
		exact("bitand", func(d offload.Device) ([]byte, error) {
			out := make([]uint64, 2)
			return bytesOf(out), Bits.Run(d, u64, out)
		})
		exact("bitor", func(d offload.Device) ([]byte, error) {
			out := make([]uint64, 1)
			return bytesOf(out), BitOr.Run(d, u64, out)
		})
		exact("bitxor", func(d offload.Device) ([]byte, error) {
			out := make([]uint64, 1)
			return bytesOf(out), BitXor.Run(d, u64, out)
		})
		for _, v := range [][]bool{b, nb} {
			exact("logicaland", func(d offload.Device) ([]byte, error) {
				out := make([]bool, 1)
				return bytesOf(out), Logical.Run(d, v, out)
			})
			exact("logicalor", func(d offload.Device) ([]byte, error) {
				out := make([]bool, 2)
				return bytesOf(out), LogicalOr.Run(d, v, out)
			})
		}
	}
}

// canonNaN makes every NaN of x math.NaN(): Go's min and max promise a
// NaN, not which.
func canonNaN(x []float64) []float64 {
	for i, v := range x {
		if math.IsNaN(v) {
			x[i] = math.NaN()
		}
	}
	return x
}

// withNaN is x with a NaN in the middle.
func withNaN(x []float64) []float64 {
	y := append([]float64(nil), x...)
	if len(y) > 0 {
		y[len(y)/2] = math.NaN()
	}
	return y
}

// TestReduceFault: an index out of range in a Reduce body fails the
// launch on PoCL as on the host (the chunk's panic), and the device works
// on.
func TestReduceFault(t *testing.T) {
	host, cl := start(t)
	x := make([]int64, 1000)
	for i := range x {
		x[i] = int64(i)
	}
	var msgs []string
	for _, d := range []offload.Device{host, cl} {
		err := ReduceFault.Run(d, x, make([]int64, 1))
		var kp *offload.KernelPanic
		if !errors.Is(err, offload.ErrKernelFailed) || !errors.As(err, &kp) || !kp.Chunk {
			t.Fatalf("device %d: %v, want a KernelPanic in a chunk", d.Num(), err)
		}
		if d == cl && !strings.Contains(err.Error(), "reduce.go:160: runtime error: index out of range [1000] with length 1000") {
			t.Errorf("PoCL: %v", err)
		}
		msgs = append(msgs, kp.Value)
	}
	if msgs[0] != msgs[1] {
		t.Errorf("the host says %q, PoCL %q", msgs[0], msgs[1])
	}
	out := make([]float64, 1)
	if err := SumF64.Run(cl, []float64{1, 2, 3}, out); err != nil || out[0] != 6 {
		t.Fatalf("sum after the fault: %v, %v", out, err)
	}
}

// TestDevice: ctx.Device() in a generated kernel (its setup, a ctx.For
// body, a Reduce body and what follows it) is the device's number on
// PoCL, as on the host.
func TestDevice(t *testing.T) {
	host, cl := start(t)
	for _, d := range []offload.Device{host, cl} {
		out := make([]int64, 300)
		if err := DeviceNum.Run(d, out); err != nil {
			t.Fatal(err)
		}
		n := int64(d.Num())
		for i, v := range out {
			if want := n*1000 + int64(i) + n*1000000; v != want {
				t.Fatalf("device %d: out[%d] = %d, want %d", n, i, v, want)
			}
		}
		x := []int64{1, 2, 3, 4, 5}
		s := make([]int64, 1)
		if err := DeviceSum.Run(d, x, s); err != nil {
			t.Fatal(err)
		}
		if want := 15 + 5*n + n*1000000; s[0] != want {
			t.Fatalf("device %d: sum %d, want %d", n, s[0], want)
		}
	}
}

// TestPanic: a panic in a generated kernel (its value a fmt.Sprintf,
// which the device does not evaluate) fails the launch on PoCL with a
// KernelPanic naming the line; a kernel without one runs.
func TestPanic(t *testing.T) {
	host, cl := start(t)
	x := []float64{1, 2, -3, 4}
	for _, d := range []offload.Device{host, cl} {
		err := Sqrts.Run(d, x, make([]float64, 4))
		var kp *offload.KernelPanic
		if !errors.Is(err, offload.ErrKernelFailed) || !errors.As(err, &kp) || !kp.Chunk {
			t.Fatalf("device %d: %v, want a KernelPanic in a chunk", d.Num(), err)
		}
		if d == cl && (kp.At != "panic.go:21" || !strings.Contains(kp.Value, "panic")) {
			t.Errorf("PoCL: %v (at %q, value %q), want panic.go:21", err, kp.At, kp.Value)
		}
	}
	out := make([]float64, 2)
	if err := Sqrts.Run(cl, []float64{2, 3}, out); err != nil || out[1] != 9 {
		t.Fatalf("after the panic: %v, %v", out, err)
	}
}
