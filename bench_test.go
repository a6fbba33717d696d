package offload_test

import (
	"context"
	"testing"

	"github.com/goffload/offload"
)

// Benchmarks of the runtime on a host device, the same work as suite host
// of go run ./bench (which also prints the baselines and ratios):
//
//	go test -run XXX -bench . .
//
// Each starts the runtime itself and stops it at the end, so they can run
// beside tests that do the same.

var (
	benchEmpty = offload.MustKernel("benchtest.empty", func() {})
	benchTouch = offload.MustKernel("benchtest.touch", func(x []byte) { x[0]++ })
)

const bench64MiB = 64 << 20

// startBench starts the runtime with one host device for a benchmark.
func startBench(b *testing.B) offload.Device {
	b.Helper()
	if err := offload.Start(offload.WithDevices("host"), offload.WithOffload("MANDATORY")); err != nil {
		b.Fatalf("Start: %v", err)
	}
	b.Cleanup(func() {
		if err := offload.Stop(); err != nil {
			b.Errorf("Stop: %v", err)
		}
	})
	return offload.On(0)
}

// filled64MiB returns a 64 MiB buffer with its pages faulted in.
func filled64MiB() []byte {
	buf := make([]byte, bench64MiB)
	for i := 0; i < len(buf); i += 4096 {
		buf[i] = byte(i >> 12)
	}
	return buf
}

// BenchmarkEmptyRegion is a synchronous target region with an empty kernel
// and no arguments on device 0.
func BenchmarkEmptyRegion(b *testing.B) {
	dev := startBench(b)
	for b.Loop() {
		if err := dev.Run(benchEmpty); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMapToFrom64MiB is a target region mapping 64 MiB tofrom:
// allocate, copy in, run, copy out, free. SetBytes counts both copies.
func BenchmarkMapToFrom64MiB(b *testing.B) {
	dev := startBench(b)
	buf := filled64MiB()
	start := buf[0]
	runs := 0
	b.SetBytes(2 * bench64MiB)
	for b.Loop() {
		if err := dev.Run(benchTouch, offload.ToFrom(buf).Named("buf")); err != nil {
			b.Fatal(err)
		}
		runs++
	}
	if want := start + byte(runs); buf[0] != want {
		b.Fatalf("after %d regions buf[0] = %d, want %d", runs, buf[0], want)
	}
}

// BenchmarkPresentRegion64MiB is the region of BenchmarkMapToFrom64MiB
// while the buffer is mapped already, so it only looks the buffer up and
// moves its reference count: no bytes move.
func BenchmarkPresentRegion64MiB(b *testing.B) {
	dev := startBench(b)
	buf := filled64MiB()
	if err := dev.EnterData(offload.To(buf).Named("buf")); err != nil {
		b.Fatal(err)
	}
	start := buf[0]
	runs := 0
	for b.Loop() {
		if err := dev.Run(benchTouch, offload.ToFrom(buf).Named("buf")); err != nil {
			b.Fatal(err)
		}
		runs++
	}
	if buf[0] != start {
		b.Fatalf("buf[0] changed on the host while the buffer was present: %d, want %d", buf[0], start)
	}
	if err := dev.ExitData(offload.From(buf).Named("buf")); err != nil {
		b.Fatal(err)
	}
	if want := start + byte(runs); buf[0] != want {
		b.Fatalf("after %d regions and exit data buf[0] = %d, want %d", runs, buf[0], want)
	}
}

// BenchmarkCopyBaseline64MiB is the baseline of BenchmarkMapToFrom64MiB:
// the same two 64 MiB copies with Go's copy into and out of a preallocated
// buffer. It needs no runtime.
func BenchmarkCopyBaseline64MiB(b *testing.B) {
	buf := filled64MiB()
	other := filled64MiB()
	b.SetBytes(2 * bench64MiB)
	for b.Loop() {
		copy(other, buf)
		copy(buf, other)
	}
}

// BenchmarkTaskChain is a chain of host tasks on one object and tasks on
// disjoint sections: the cost of the dependence history.
func BenchmarkTaskChain(b *testing.B) {
	startBench(b)
	x := make([]int64, 1<<16)
	b.Run("same", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			offload.Nowait(offload.DependInOut(x)).Go("chain", func() error { return nil })
		}
		if err := offload.Taskwait(context.Background()); err != nil {
			b.Fatal(err)
		}
	})
	b.Run("disjoint", func(b *testing.B) { // 2000 sections apart: the search costs, nothing waits
		for i := 0; i < b.N; i++ {
			lo := (i % 2000) * 32
			offload.Nowait(offload.DependInOut(x[lo:lo+24])).Go("chain", func() error { return nil })
		}
		if err := offload.Taskwait(context.Background()); err != nil {
			b.Fatal(err)
		}
	})
}

var benchTyped3 = offload.MustKernel3("benchtest.typed3", func(ctx offload.Ctx, a float32, x offload.In[float32], y offload.InOut[float32]) {})

// BenchmarkLaunch3 is a synchronous region with a kernel of a scalar and
// two present buffers, launched typed and untyped: the cost of argument
// checks and the call.
func BenchmarkLaunch3(b *testing.B) {
	dev := startBench(b)
	x, y := make([]float32, 64), make([]float32, 64)
	if err := dev.EnterData(offload.To(x), offload.To(y)); err != nil {
		b.Fatal(err)
	}
	b.Run("typed", func(b *testing.B) {
		for b.Loop() {
			if err := benchTyped3.Run(dev, 2, x, y); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("untyped", func(b *testing.B) {
		for b.Loop() {
			if err := dev.Run(benchTyped3.Kernel(), float32(2), x, y); err != nil {
				b.Fatal(err)
			}
		}
	})
}

var benchEmpty0 = offload.MustKernel("benchtest.empty0", func(offload.Ctx) {})

// BenchmarkEmptyRegionTyped is BenchmarkEmptyRegion with a func(Ctx)
// kernel, called without reflection as a typed kernel is (Kernel0 was
// its typed form).
func BenchmarkEmptyRegionTyped(b *testing.B) {
	dev := startBench(b)
	for b.Loop() {
		if err := dev.Run(benchEmpty0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTargetTaskChain is a chain of nowait target tasks on a host
// device, each depend(inout) on one present buffer, and tasks of two
// devices that each read the other's last output (a stencil of width two):
// the cost of a target task's lowering, its dependencies and completion.
func BenchmarkTargetTaskChain(b *testing.B) {
	if err := offload.Start(offload.WithDevices("host:2"), offload.WithOffload("MANDATORY")); err != nil {
		b.Fatalf("Start: %v", err)
	}
	b.Cleanup(func() {
		if err := offload.Stop(); err != nil {
			b.Errorf("Stop: %v", err)
		}
	})
	var out [2][2][]float32
	for p := range out {
		for i := range out[p] {
			out[p][i] = make([]float32, 4)
			for d := range 2 {
				if err := offload.On(d).EnterData(offload.Alloc(out[p][i])); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.Run("same", func(b *testing.B) {
		x, y := out[0][0], out[0][1]
		for b.Loop() {
			benchTyped3.Nowait(offload.On(0).Nowait(offload.DependInOut(y)), 1, x, y)
		}
		if err := offload.Taskwait(context.Background()); err != nil {
			b.Fatal(err)
		}
	})
	b.Run("stencil2", func(b *testing.B) {
		t := 0
		for b.Loop() {
			cur, prev := out[t%2], out[(t+1)%2]
			i := t % 2
			benchTyped3.Nowait(offload.On(i).Nowait(offload.DependIn(prev[1-i]), offload.DependOut(cur[i])), 1, prev[1-i], cur[i])
			t++
		}
		if err := offload.Taskwait(context.Background()); err != nil {
			b.Fatal(err)
		}
	})
}

// BenchmarkAnyTaskChain is BenchmarkTargetTaskChain/same with Any-tasks on
// two host devices: a chain of small tasks on two buffers that the runtime
// places (the placement, its copies and bookkeeping per task); /hand is
// the same chain placed by hand on device 0, its buffers mapped once.
func BenchmarkAnyTaskChain(b *testing.B) {
	if err := offload.Start(offload.WithDevices("host:2"), offload.WithOffload("MANDATORY")); err != nil {
		b.Fatalf("Start: %v", err)
	}
	b.Cleanup(func() {
		if err := offload.Stop(); err != nil {
			b.Errorf("Stop: %v", err)
		}
	})
	x, y := make([]float32, 4), make([]float32, 4)
	b.Run("any", func(b *testing.B) {
		for b.Loop() {
			benchTyped3.Nowait(offload.Any().Nowait(), 1, x, y)
		}
		if err := offload.Taskwait(context.Background()); err != nil {
			b.Fatal(err)
		}
	})
	b.Run("hand", func(b *testing.B) {
		for _, s := range [][]float32{x, y} {
			if err := offload.On(0).EnterData(offload.Alloc(s)); err != nil {
				b.Fatal(err)
			}
		}
		for b.Loop() {
			benchTyped3.Nowait(offload.On(0).Nowait(offload.DependIn(x), offload.DependInOut(y)), 1, x, y)
		}
		if err := offload.Taskwait(context.Background()); err != nil {
			b.Fatal(err)
		}
		for _, s := range [][]float32{x, y} {
			if err := offload.On(0).ExitData(offload.Delete(s)); err != nil {
				b.Fatal(err)
			}
		}
	})
}
