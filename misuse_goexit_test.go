package offload_test

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/goffload/offload"
)

// Kernels that call runtime.Goexit: in the body, and in a loop chunk (which
// runs on a worker of the device's pool, or on the kernel's own goroutine).
var (
	goexitBody = offload.MustKernel("misuse.goexit", func(x []int32) {
		x[0] = 1
		runtime.Goexit()
	})
	goexitChunk = offload.MustKernel("misuse.goexit.chunk", func(ctx offload.Ctx, x []int32) {
		ctx.For(len(x), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				x[i] = 1
			}
			if hi == len(x) { // the last chunk, which a worker runs when there is one
				runtime.Goexit()
			}
		})
	})
)

// runOrHang runs fn on a goroutine of its own and fails the test (instead of
// hanging it) if that goroutine ends without fn returning.
func runOrHang(t *testing.T, what string, fn func() error) error {
	t.Helper()
	type result struct{ err error }
	done := make(chan result, 1)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		done <- result{fn()}
	}()
	<-ended
	select {
	case r := <-done:
		return r.err
	default:
		t.Fatalf("%s: the calling goroutine ended: runtime.Goexit in the kernel ended the caller", what)
		return nil
	}
}

// TestGoexitInKernel: a kernel that calls runtime.Goexit fails with an error
// wrapping ErrKernelFailed that says so, on every device kind; the caller's
// goroutine goes on, and the device keeps working (its queue, and its pool's
// workers: a loop afterwards still uses every core).
func TestGoexitInKernel(t *testing.T) {
	start(t, offload.WithDevices("host:1,local:1"))
	devs := []offload.Device{offload.On(0), offload.On(1), offload.Initial()}
	for _, dev := range devs {
		for _, k := range []*offload.Kernel{goexitBody, goexitChunk} {
			for range 2 { // the second time proves the device survived the first
				x := make([]int32, 64)
				err := runOrHang(t, dev.String(), func() error { return dev.Run(k, x) })
				if !errors.Is(err, offload.ErrKernelFailed) || !strings.Contains(err.Error(), "runtime.Goexit") {
					t.Fatalf("%s: %s: got %v, want an error wrapping ErrKernelFailed that names runtime.Goexit", dev, k.Name(), err)
				}
				y := make([]int32, 1000)
				if err := dev.Run(Fill, int32(7), offload.ToFrom(y)); err != nil {
					t.Fatalf("%s after a Goexit in %s: %v", dev, k.Name(), err)
				}
				if !allEqual(y, 7) {
					t.Fatalf("%s after a Goexit in %s: fill left %v...", dev, k.Name(), y[:4])
				}
			}
		}
		// The failure does not stick to a nowait task after it either.
		x := make([]int32, 4)
		task := dev.Nowait().Run(goexitBody, x)
		if err := task.Wait(); !errors.Is(err, offload.ErrKernelFailed) {
			t.Fatalf("%s: nowait Goexit kernel: got %v, want ErrKernelFailed", dev, err)
		}
		if err := dev.Run(AddTo, int32(1), offload.ToFrom(x)); err != nil {
			t.Fatalf("%s: a region after a failed nowait task: %v", dev, err)
		}
	}
}
