package outside_test

import (
	"errors"
	"testing"

	"example.com/outside"
	"github.com/goffload/offload"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/plugintest"
	"github.com/goffload/offload/reduction"
)

func TestConformance(t *testing.T) {
	cfg := outside.Config{Cores: 2, Memory: 64 << 20}
	plugintest.Run(t, func(t *testing.T) []plugin.Device {
		return []plugin.Device{outside.New(cfg), outside.New(cfg)}
	})
}

// TestConformanceOneCore runs the suite on single-core devices, where a
// kernel's parallel loop runs on one goroutine.
func TestConformanceOneCore(t *testing.T) {
	cfg := outside.Config{Cores: 1}
	plugintest.Run(t, func(t *testing.T) []plugin.Device {
		return []plugin.Device{outside.New(cfg), outside.New(cfg), outside.New(cfg)}
	})
}

// TestKernelCtx uses a kernel context as a kind makes it, with nothing
// but the public API: the pool's loops and their chunks.
func TestKernelCtx(t *testing.T) {
	pool := plugin.NewPool(3)
	defer pool.Close()
	ctx := plugin.NewKernelCtx(5, pool)
	if ctx.Device() != 5 || ctx.Cores() != pool.Workers() || pool.Workers() != 3 {
		t.Fatalf("context: device %d, cores %d, pool workers %d; want 5, 3, 3", ctx.Device(), ctx.Cores(), pool.Workers())
	}
	const n = 10
	var seen [n]int32
	var chunks [3]plugin.Chunk
	ctx.ForChunks(n, func(c plugin.Chunk) {
		chunks[c.Index] = c
		for i := c.Lo; i < c.Hi; i++ {
			seen[i]++
		}
	})
	if want := [3]plugin.Chunk{{Index: 0, Count: 3, Lo: 0, Hi: 4}, {Index: 1, Count: 3, Lo: 4, Hi: 7}, {Index: 2, Count: 3, Lo: 7, Hi: 10}}; chunks != want || ctx.Chunks(n) != 3 {
		t.Errorf("ForChunks(%d) on 3 cores made %v (Chunks: %d), want %v", n, chunks, ctx.Chunks(n), want)
	}
	for i, v := range seen {
		if v != 1 {
			t.Errorf("index %d covered %d times", i, v)
		}
	}
}

// The kernels of the end-to-end test, registered at package init as every
// program's are.
var (
	axpy = offload.MustKernel3("outside.axpy", func(ctx offload.Ctx, a float64, x offload.In[float64], y offload.InOut[float64]) {
		ctx.For(len(y), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				y[i] += a * x[i]
			}
		})
	}).Named("a", "x", "y")

	// sum writes the sum of x to out[0] and the device number to out[1].
	sum = offload.MustKernel2("outside.sum", func(ctx offload.Ctx, x offload.In[float64], out offload.Out[float64]) {
		out[0] = offload.Reduce(ctx, len(x), reduction.Sum[float64](), func(lo, hi int, acc float64) float64 {
			for _, v := range x[lo:hi] {
				acc += v
			}
			return acc
		})
		out[1] = float64(ctx.Device())
	}).Named("x", "out")

	// coef is a declare target variable: every device has its copy, which
	// the core binds by launching its bind kernel on the device.
	coef = offload.DeclareTarget("outside.coef", []float64{10, 20})

	// scale multiplies y by the device's element of coef.
	scale = offload.MustKernel1("outside.scale", func(ctx offload.Ctx, y offload.InOut[float64]) {
		c := coef.On(ctx)[ctx.Device()]
		ctx.ForChunks(len(y), func(ch offload.Chunk) {
			for i := ch.Lo; i < ch.Hi; i++ {
				y[i] *= c
			}
		})
	})

	boom = offload.MustKernel1("outside.boom", func(ctx offload.Ctx, x []int32) {
		panic("outside boom")
	})
)

// TestRuntime starts the whole runtime with the kind's devices and runs
// typed kernels with map clauses on them: the kind works end to end
// through package offload, copies between its devices included.
func TestRuntime(t *testing.T) {
	if err := offload.Start(offload.WithDevices(outside.Name+":2"), offload.WithOffload("MANDATORY")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := offload.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	if n := offload.NumDevices(); n != 2 {
		t.Fatalf("NumDevices() = %d, want 2", n)
	}
	for d := range 2 {
		info, err := offload.On(d).Info()
		if err != nil {
			t.Fatal(err)
		}
		if info.Kind != outside.Name || info.Initial {
			t.Errorf("device %d: %+v, want an %s device", d, info, outside.Name)
		}
	}

	// Split over the two devices: each half goes to its device and back.
	const n = 100_003
	x, y := make([]float64, n), make([]float64, n)
	for i := range x {
		x[i], y[i] = float64(i), float64(2*i)
	}
	half := n / 2
	if err := axpy.Run(offload.On(0), 3, x[:half], y[:half]); err != nil {
		t.Fatal(err)
	}
	if err := axpy.Run(offload.On(1), 3, x[half:], y[half:]); err != nil {
		t.Fatal(err)
	}
	for i := range y {
		if want := float64(5 * i); y[i] != want {
			t.Fatalf("y[%d] = %v after axpy on device %d, want %v", i, y[i], i/half, want)
		}
	}

	// A data region: y stays on device 0 between launches, the host copy
	// is untouched until an update or the region's end.
	err := offload.On(0).Data(func() error {
		for range 2 {
			if err := axpy.Run(offload.On(0), 1, x, y); err != nil {
				return err
			}
		}
		if y[7] != 35 {
			t.Errorf("inside the data region the host's y[7] = %v, want 35 (not copied back yet)", y[7])
		}
		if err := offload.On(0).Update(offload.From(y[:10])); err != nil {
			return err
		}
		if y[7] != 49 {
			t.Errorf("after update from(y[:10]) y[7] = %v, want 49", y[7])
		}
		return nil
	}, offload.To(x), offload.ToFrom(y))
	if err != nil {
		t.Fatal(err)
	}
	for i := range y {
		if want := float64(7 * i); y[i] != want {
			t.Fatalf("after the data region y[%d] = %v, want %v", i, y[i], want)
		}
	}

	// Device to device: z is resident on both devices; device 1's copy
	// comes from device 0's (Exchange between two outside devices).
	z := make([]float64, 1000)
	for i := range z {
		z[i] = float64(i) + 0.5
	}
	for d := range 2 {
		if err := offload.On(d).EnterData(offload.To(z)); err != nil {
			t.Fatal(err)
		}
	}
	if err := axpy.Run(offload.On(0), 1, z, z); err != nil { // z = 2z on device 0
		t.Fatal(err)
	}
	if err := offload.Copy(offload.On(1), z[100:900], offload.On(0), z[100:900]); err != nil {
		t.Fatal(err)
	}
	out := []float64{-1, -1}
	if err := sum.Run(offload.On(1), z, out); err != nil {
		t.Fatal(err)
	}
	want := 0.0
	for i := range z {
		v := float64(i) + 0.5
		if i >= 100 && i < 900 {
			v *= 2
		}
		want += v
	}
	if out[0] != want || out[1] != 1 {
		t.Errorf("sum on device 1 after the copy = %v on device %v, want %v on device 1", out[0], out[1], want)
	}
	for d := range 2 {
		if err := offload.On(d).ExitData(offload.Delete(z)); err != nil {
			t.Fatal(err)
		}
	}

	// Declare target variables: each device's copy, updated from the host.
	for d := range 2 {
		v := []float64{1, 2, 3}
		if err := scale.Run(offload.On(d), v); err != nil {
			t.Fatal(err)
		}
		if c := coef.Host()[d]; v[0] != c || v[2] != 3*c {
			t.Errorf("device %d: scale by coef = %v, want %v", d, v, []float64{c, 2 * c, 3 * c})
		}
	}
	coef.Host()[1] = 0.5
	if err := offload.On(1).Update(offload.To(coef.Host())); err != nil {
		t.Fatal(err)
	}
	v := []float64{4}
	if err := scale.Run(offload.On(1), v); err != nil {
		t.Fatal(err)
	}
	if v[0] != 2 {
		t.Errorf("after update to(coef) on device 1: %v, want [2]", v)
	}

	// A kernel panic is an error wrapping ErrKernelFailed, a KernelPanic,
	// and the device goes on.
	err = boom.Run(offload.On(1), make([]int32, 4))
	var kp *offload.KernelPanic
	if !errors.Is(err, offload.ErrKernelFailed) || !errors.As(err, &kp) || kp.Value != "outside boom" {
		t.Errorf("a panicking kernel: %v, want an error wrapping ErrKernelFailed with a KernelPanic", err)
	}
	if err := axpy.Run(offload.On(1), 1, x[:10], y[:10]); err != nil {
		t.Errorf("device 1 after a kernel panic: %v", err)
	}
}
