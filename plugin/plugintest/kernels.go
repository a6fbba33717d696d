package plugintest

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
)

// kctx is the kernel context as the suite's kernels see it; *plugin.KernelCtx
// implements it.
type kctx interface {
	Device() int
	Cores() int
	For(n int, body func(lo, hi int))
}

// plain is a struct of plain fields, passed by value to the scalars kernel.
type plain struct {
	A int16
	B float64
	C [2]uint8
	D bool
	E complex64
}

// scalarWords is how many uint64 words the scalars kernel writes for its
// scalar parameters, before the copy of its slice parameter.
const scalarWords = 27

// The suite's kernels, registered at package init under names prefixed
// "plugintest." so that they cannot clash with a program's own.
var (
	kScalars   = mustRegister("plugintest.scalars", scalarsKernel)
	kAddInt32  = mustRegister("plugintest.addInt32", addInt32Kernel)
	kFillInt64 = mustRegister("plugintest.fillInt64", fillInt64Kernel)
	kAddInt64  = mustRegister("plugintest.addInt64", addInt64Kernel)
	kLens      = mustRegister("plugintest.lens", lensKernel)
	kCtxFill   = mustRegister("plugintest.ctxFill", ctxFillKernel)
	kPanic     = mustRegister("plugintest.panic", panicKernel)
	kPanicFor  = mustRegister("plugintest.panicInFor", panicInForKernel)
	kSleep     = mustRegister("plugintest.sleep", sleepKernel)
	kCancel    = mustRegister("plugintest.cancel", cancelKernel)
)

func mustRegister(name string, fn any) plugin.Kernel {
	k, err := entries.RegisterKernel(name, fn)
	if err != nil {
		panic(fmt.Sprintf("plugintest: %v", err))
	}
	return k
}

// scalarsKernel writes the bits of every scalar it receives into out, in
// parameter order (see wantScalars), and copies in (a []int32) after them.
func scalarsKernel(out []uint64, b bool, i8 int8, i16 int16, i32 int32, i64 int64,
	u8 uint8, u16 uint16, u32 uint32, u64 uint64, i int, u uint,
	f32 float32, f64 float64, c64 complex64, c128 complex128,
	arr [3]float32, s plain, in []int32) {
	var w []uint64
	bit := uint64(0)
	if b {
		bit = 1
	}
	w = append(w, bit, uint64(int64(i8)), uint64(int64(i16)), uint64(int64(i32)), uint64(i64),
		uint64(u8), uint64(u16), uint64(u32), u64, uint64(int64(i)), uint64(u),
		uint64(math.Float32bits(f32)), math.Float64bits(f64),
		uint64(math.Float32bits(real(c64))), uint64(math.Float32bits(imag(c64))),
		math.Float64bits(real(c128)), math.Float64bits(imag(c128)))
	for _, a := range arr {
		w = append(w, uint64(math.Float32bits(a)))
	}
	sb := uint64(0)
	if s.D {
		sb = 1
	}
	w = append(w, uint64(int64(s.A)), math.Float64bits(s.B), uint64(s.C[0]), uint64(s.C[1]), sb,
		uint64(math.Float32bits(real(s.E))), uint64(math.Float32bits(imag(s.E))))
	for _, x := range in {
		w = append(w, uint64(int64(x)))
	}
	copy(out, w)
}

// addInt32Kernel sets dst[i] = src[i] + k.
func addInt32Kernel(dst, src []int32, k int32) {
	for i := range dst {
		dst[i] = src[i] + k
	}
}

// fillInt64Kernel sets every element of x to v.
func fillInt64Kernel(x []int64, v int64) {
	for i := range x {
		x[i] = v
	}
}

// addInt64Kernel adds k to every element of x.
func addInt64Kernel(x []int64, k int64) {
	for i := range x {
		x[i] += k
	}
}

// lensKernel writes the lengths of its slice arguments to out.
func lensKernel(out []int64, a []int32, b []float64) {
	out[0], out[1] = int64(len(a)), int64(len(b))
}

// ctxFillKernel records the context's Device and Cores in info. It adds 1 to
// every element of out in a parallel loop. So a loop that covers an index
// twice or not at all shows.
func ctxFillKernel(c kctx, out []int32, info []int64) {
	info[0], info[1] = int64(c.Device()), int64(c.Cores())
	c.For(len(out), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			out[i]++
		}
	})
}

// panicMessage is what the panic kernels panic with.
func panicMessage(code int64) string { return fmt.Sprintf("plugintest boom %d", code) }

// panicKernel panics with panicMessage(code).
func panicKernel(code int64) { panic(panicMessage(code)) }

// panicInForKernel panics with panicMessage(code) in the last chunk of a
// parallel loop over n.
func panicInForKernel(c kctx, n int, code int64) {
	c.For(n, func(lo, hi int) {
		if hi == n {
			panic(panicMessage(code))
		}
	})
}

// sleepKernel sleeps for ms milliseconds.
func sleepKernel(ms int64) { time.Sleep(time.Duration(ms) * time.Millisecond) }

// cancelCtx is what cancelKernel asks of its context.
type cancelCtx interface {
	Done() <-chan struct{}
	Err() error
}

// cancelKernel waits up to ms milliseconds for its context to say it should
// stop. It writes what it saw: 1 cancelled (Err is context.Canceled), 2 not,
// -1 Done closed with Err nil.
func cancelKernel(c cancelCtx, out []int64, ms int64) {
	select {
	case <-c.Done():
		out[0] = -1
		if c.Err() == context.Canceled {
			out[0] = 1
		}
	case <-time.After(time.Duration(ms) * time.Millisecond):
		out[0] = 2
	}
}
