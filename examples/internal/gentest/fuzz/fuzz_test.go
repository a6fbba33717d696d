package fuzz

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"testing"

	"github.com/goffload/offload"
	"github.com/goffload/offload/internal/opencltest"
	_ "github.com/goffload/offload/plugins/opencl"
)

// devices are a host device and PoCL, started once for the process (the
// fuzzer's workers are processes of their own); stopped by TestMain.
var devices struct {
	once     sync.Once
	host, cl offload.Device
	err      error
	started  bool
}

func TestMain(m *testing.M) {
	code := m.Run()
	if devices.started {
		if err := offload.Stop(); err != nil && code == 0 {
			fmt.Println("offload.Stop:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func start(t testing.TB) (host, cl offload.Device) {
	t.Helper()
	opencltest.Need(t)
	devices.once.Do(func() {
		devices.err = offload.Start(offload.WithDevices("host,opencl:0"), offload.WithOffload("MANDATORY"))
		devices.started = devices.err == nil
		devices.host, devices.cl = offload.On(0), offload.On(1)
	})
	if devices.err != nil {
		t.Fatal(devices.err)
	}
	return devices.host, devices.cl
}

// input is what one fuzz input makes: a kernel, the element count, and
// the inputs (each at least n long, a few more or not).
type input struct {
	k  int
	n  int
	iv []int64
	uv []uint32
	fv []float64
}

var (
	intEdges = []int64{0, 1, -1, 2, 3, 7, -8, 31, 32, 33, 63, 64, 127, -128, 255, 256, 32767, -32768, 65535,
		math.MaxInt32, math.MinInt32, math.MaxUint32, math.MaxInt64, math.MinInt64, math.MinInt64 + 1, 1 << 40, -1 << 53}
	floatEdges = []float64{0, math.Copysign(0, -1), 1, -1, 0.5, -0.5, 2, 3, 1e-310, -5e-324, math.MaxFloat64,
		math.SmallestNonzeroFloat64, math.Inf(1), math.Inf(-1), math.NaN(), 1e30, -1e-30, 16777217, 1 << 53, 9.5,
		-2.5, 0.1, 1e300, math.MaxFloat32, 1e-40, 0.75, 4294967296.5, -9.3e18}
)

// decode turns the fuzzer's bytes into an input: the kernel, n, the extra
// lengths, then each value as an edge (a selector byte below 160) or its
// eight bytes.
func decode(data []byte) input {
	next := func() byte {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return b
	}
	raw := func() uint64 {
		var b [8]byte
		n := copy(b[:], data)
		data = data[n:]
		return binary.LittleEndian.Uint64(b[:])
	}
	in := input{k: int(next()) % len(Kernels), n: 1 + int(next())%24}
	extra := next()
	in.iv = make([]int64, in.n+int(extra&3))
	in.uv = make([]uint32, in.n+int(extra>>2&3))
	in.fv = make([]float64, in.n+int(extra>>4&3))
	for i := range in.iv {
		if s := next(); s < 160 {
			in.iv[i] = intEdges[int(s)%len(intEdges)]
		} else {
			in.iv[i] = int64(raw())
		}
	}
	for i := range in.uv {
		if s := next(); s < 160 {
			in.uv[i] = uint32(intEdges[int(s)%len(intEdges)])
		} else {
			in.uv[i] = uint32(raw())
		}
	}
	for i := range in.fv {
		if s := next(); s < 160 {
			in.fv[i] = floatEdges[int(s)%len(floatEdges)]
		} else {
			in.fv[i] = math.Float64frombits(raw())
		}
	}
	return in
}

// result is a launch's outputs or its kernel's panic.
type result struct {
	out    []uint64
	fo, ap []float64
	panic  *offload.KernelPanic
}

// run launches kernel in.k over elements base … base+n-1 on d.
func run(t *testing.T, d offload.Device, in input, base, n int) result {
	total := in.n
	r := result{out: make([]uint64, total*IntSlots), fo: make([]float64, total*FloatSlots), ap: make([]float64, total*ApproxSlots)}
	for i := range r.out {
		r.out[i] = 0x5555_5555_5555_5555 ^ uint64(i)
	}
	for i := range r.fo {
		r.fo[i] = -float64(i) - 0.25
	}
	for i := range r.ap {
		r.ap[i] = float64(i) + 0.125
	}
	err := Kernels[in.k].Run(d, base, n, in.iv, in.uv, in.fv, r.out, r.fo, r.ap)
	if err != nil {
		if !errors.Is(err, offload.ErrKernelFailed) || !errors.As(err, &r.panic) {
			t.Fatalf("kernel %d on device %d: %v, want success or a kernel's panic", in.k, d.Num(), err)
		}
	}
	return r
}

// ulps is the distance of a and b in units of the last place, also
// across zero (saturating at MaxInt64).
func ulps(a, b float64) int64 {
	// The distance on the line of floats in the order of their values,
	// where -0 and +0 are one point: a value either side of zero is as
	// many ulps from the other as both are from zero.
	ka, kb := math.Float64bits(math.Abs(a)), math.Float64bits(math.Abs(b))
	var d uint64
	switch {
	case math.Signbit(a) != math.Signbit(b):
		d = ka + kb
	case ka > kb:
		d = ka - kb
	default:
		d = kb - ka
	}
	return int64(min(d, math.MaxInt64))
}

// sameFloat reports whether a and b are the same float (NaNs all alike).
func sameFloat(a, b float64) bool {
	return math.Float64bits(a) == math.Float64bits(b) || math.IsNaN(a) && math.IsNaN(b)
}

// differential runs one input on the host and on PoCL and fails the test
// where they disagree: a kernel's panic on one and not the other, a
// panic on PoCL that no element has on the host, an output not the same
// bits (exact slots) or farther than the kernel's ulp bound (ap slots).
func differential(t *testing.T, host, cl offload.Device, in input) {
	h := run(t, host, in, 0, in.n)
	c := run(t, cl, in, 0, in.n)
	if (h.panic == nil) != (c.panic == nil) {
		t.Fatalf("kernel K%d, n %d: the host says %v, PoCL says %v", in.k, in.n, h.panic, c.panic)
	}
	if c.panic != nil {
		faults(t, host, cl, in, h.panic, c.panic)
		return
	}
	for i := range h.out {
		if h.out[i] != c.out[i] {
			t.Fatalf("kernel K%d, n %d: element %d's integer %d: host %#x, PoCL %#x", in.k, in.n, i/IntSlots, i%IntSlots, h.out[i], c.out[i])
		}
	}
	for i := range h.fo {
		if !sameFloat(h.fo[i], c.fo[i]) {
			t.Fatalf("kernel K%d, n %d: element %d's float %d: host %v (%#x), PoCL %v (%#x)", in.k, in.n, i/FloatSlots, i%FloatSlots,
				h.fo[i], math.Float64bits(h.fo[i]), c.fo[i], math.Float64bits(c.fo[i]))
		}
	}
	for i := range h.ap {
		a, b := h.ap[i], c.ap[i]
		if sameFloat(a, b) || ulps(a, b) <= int64(Bounds[in.k]) {
			continue
		}
		t.Fatalf("kernel K%d, n %d: element %d's math function %d: host %v, PoCL %v: %d ulp apart, the bound is %d",
			in.k, in.n, i/ApproxSlots, i%ApproxSlots, a, b, ulps(a, b), Bounds[in.k])
	}
}

// faults checks a launch that failed on both devices, element by
// element: the same elements fail on both, and each device's panic is one
// of its elements'. Go orders an expression's calls but not its index
// expressions and divisions among them (gc evaluates the calls, and their
// arguments, first; the generated code goes left to right), so an element
// that has two faults may report either: its panics need not be the same.
// An index's panic must be one (index outside the length).
func faults(t *testing.T, host, cl offload.Device, in input, hp, cp *offload.KernelPanic) {
	var hs, cs []string
	for e := range in.n {
		h, c := run(t, host, in, e, 1).panic, run(t, cl, in, e, 1).panic
		if (h == nil) != (c == nil) {
			t.Fatalf("kernel K%d, n %d: element %d: the host says %v, PoCL says %v", in.k, in.n, e, h, c)
		}
		if h != nil {
			hs, cs = append(hs, h.Value), append(cs, c.Value)
			var i, n int64
			if _, err := fmt.Sscanf(c.Value, "runtime error: index out of range [%d] with length %d", &i, &n); err == nil && i >= 0 && i < n {
				t.Fatalf("kernel K%d: element %d: PoCL's %q is no fault", in.k, e, c.Value)
			}
		}
	}
	if !slices.Contains(hs, hp.Value) || !slices.Contains(cs, cp.Value) {
		t.Fatalf("kernel K%d, n %d: the host panics with %q, its elements with %q; PoCL with %q, its elements with %q", in.k, in.n, hp.Value, hs, cp.Value, cs)
	}
	if !cp.Chunk && !isSerial(in.k) {
		t.Errorf("kernel K%d: PoCL's panic is not in a loop chunk: %v", in.k, cp)
	}
}

// isSerial reports whether kernel k has no ctx.For (its panic is not a
// chunk's).
func isSerial(k int) bool { return slices.Contains(Serial, k) }

// FuzzDifferential: the random kernels of kernels.go, on inputs the
// fuzzer's bytes give, do on PoCL (their generated OpenCL C) what they do
// on a host device (their Go bodies): the same integers and exact floats
// bit for bit, the math functions within their ulp bounds, and the same
// panics (an index out of range, a division by zero, a negative shift).
func FuzzDifferential(f *testing.F) {
	for k := range Kernels {
		f.Add([]byte{byte(k), 7, 0})
		f.Add([]byte{byte(k), 23, 0xff, 1, 2, 3, 200, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11})
		f.Add([]byte{byte(k), 5, 0x3f, 4, 170, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, 21, 22, 23, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17})
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		host, cl := start(t)
		differential(t, host, cl, decode(data))
	})
}
