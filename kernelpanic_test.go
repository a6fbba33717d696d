package offload_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/goffload/offload"
)

var errUserBoom = errors.New("user boom")

var boomErr = offload.MustKernel("test.boom.err", func(x []int32) {
	panic(fmt.Errorf("kernel wraps: %w", errUserBoom))
})

// TestKernelPanicError: a kernel's panic is a *KernelPanic (errors.As) with
// the panic value and the stack trimmed to the program's frames, on the
// initial device, a host device and a device process; its text is one short
// line that says where it panicked (it held ~30 lines of reflect and
// runtime frames). errors.Is(err, ErrKernelFailed) holds.
func TestKernelPanicError(t *testing.T) {
	start(t, offload.WithDevices("host,local"))
	devs := []offload.Device{offload.On(0), offload.On(1), offload.Initial()}
	for _, dev := range devs {
		for where, msg := range map[int32]string{0: "boom in the body", 1: "boom in a chunk"} {
			for _, nowait := range []bool{false, true} {
				what := fmt.Sprintf("%v, %q, nowait %v", dev, msg, nowait)
				var err error
				if nowait {
					err = dev.Nowait().Run(Boom, where, filled(64, 3)).Wait()
				} else {
					err = dev.Run(Boom, where, filled(64, 3))
				}
				checkKernelPanic(t, what, err, "test.boom", msg, where == 1, false)
			}
		}
		// A Goexit is told the same way.
		checkKernelPanic(t, fmt.Sprintf("%v, Goexit", dev), dev.Run(goexitBody, make([]int32, 4)), "misuse.goexit", "", false, true)
		// The chunk that calls Goexit runs on a worker when one is idle,
		// and on the kernel's own goroutine when none is (a loaded
		// machine): Goexit then ends the kernel's body itself, which is
		// told as a Goexit of the body (Chunk false), as workpool.ForChunks
		// documents. Either is right; the chunk's case must come up.
		for try := 0; ; try++ {
			err := dev.Run(goexitChunk, make([]int32, 4096))
			var kp *offload.KernelPanic
			if try < 50 && errors.As(err, &kp) && !kp.Chunk && kp.Goexit && kp.Kernel == "misuse.goexit.chunk" {
				continue // ran on the kernel's goroutine: try again
			}
			checkKernelPanic(t, fmt.Sprintf("%v, Goexit in a chunk", dev), err, "misuse.goexit.chunk", "", true, true)
			break
		}
	}
	// A panic value that is an error is wrapped where the kernel ran in
	// this process; from a device process its text comes.
	for _, dev := range devs {
		err := dev.Run(boomErr, make([]int32, 1))
		checkKernelPanic(t, fmt.Sprintf("%v, error value", dev), err, "test.boom.err", "kernel wraps: user boom", false, false)
		if local := dev.Num() != 1; errors.Is(err, errUserBoom) != local {
			t.Errorf("%v: errors.Is(err, the panic value) = %v, want %v", dev, !local, local)
		}
	}
	// A device process's errors name it as one.
	err := offload.On(1).Run(Boom, int32(0), filled(4, 1))
	if !strings.Contains(err.Error(), "device 1 (local)") || !strings.Contains(err.Error(), "local device 1 (pid") {
		t.Errorf("a device process's kernel panic: %q, want it named device 1 (local), local device 1 (pid …)", err)
	}
}

func checkKernelPanic(t *testing.T, what string, err error, kernel, value string, chunk, goexit bool) {
	t.Helper()
	if !errors.Is(err, offload.ErrKernelFailed) {
		t.Errorf("%s: %v, want an error wrapping ErrKernelFailed", what, err)
		return
	}
	var kp *offload.KernelPanic
	if !errors.As(err, &kp) {
		t.Errorf("%s: %v: errors.As finds no *KernelPanic", what, err)
		return
	}
	if kp.Kernel != kernel || kp.Value != value || kp.Chunk != chunk || kp.Goexit != goexit {
		t.Errorf("%s: KernelPanic{Kernel: %q, Value: %q, Chunk: %v, Goexit: %v}, want %q, %q, %v, %v",
			what, kp.Kernel, kp.Value, kp.Chunk, kp.Goexit, kernel, value, chunk, goexit)
	}
	file := "kernel_test.go:"
	if goexit {
		file = "misuse_goexit_test.go:"
	} else if kernel == "test.boom.err" {
		file = "kernelpanic_test.go:"
	}
	text := err.Error()
	if strings.Contains(text, "\n") || len(text) > 400 || !strings.Contains(text, value) || !strings.Contains(text, kernel) || !strings.Contains(text, " at "+file) {
		t.Errorf("%s: error text %q: want one line of at most 400 bytes naming the kernel, the value and %s…", what, text, file)
	}
	if !strings.HasPrefix(kp.At, file) {
		t.Errorf("%s: At = %q, want %s…", what, kp.At, file)
	}
	if !strings.Contains(kp.Stack, file) {
		t.Errorf("%s: Stack lacks the kernel's frame (%s):\n%s", what, file, kp.Stack)
	}
	for _, internal := range []string{"goroutine ", "reflect.", "runtime.", "runtime/debug", "goffload/offload/internal/", "goffload/offload/plugins/", "goffload/offload/plugin/", "goffload/offload/plugin.", "panic("} {
		if strings.Contains(kp.Stack, internal) {
			t.Errorf("%s: Stack holds %q frames:\n%s", what, internal, kp.Stack)
		}
	}
}
