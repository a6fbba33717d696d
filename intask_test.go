package offload_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/goffload/offload"
)

// inKernel calls Taskwait, and launches a kernel, from inside a kernel, and
// writes what came back: out[0] 1 if Taskwait said ErrInTask; out[1] 1 if
// the launch worked, 2 if it failed saying the process serves as a device,
// 3 for anything else.
var inKernel = offload.MustKernel("test.intask.calls", func(ctx offload.Ctx, out []int32) {
	if err := offload.Taskwait(context.Background()); errors.Is(err, offload.ErrInTask) && strings.Contains(err.Error(), "would wait for itself") {
		out[0] = 1
	}
	switch err := offload.Initial().Run(Nop); {
	case err == nil:
		out[1] = 1
	case errors.Is(err, offload.ErrNotStarted) && strings.Contains(err.Error(), "serves as a device"):
		out[1] = 2
	default:
		out[1] = 3
	}
})

// TestConstructsInsideKernels: Taskwait inside a kernel is ErrInTask with
// the same words on every kind (on a device process it said "runtime not
// started: call offload.Start first"); a launch from a kernel works where
// the runtime is (host devices), and on a device process says why it
// cannot.
func TestConstructsInsideKernels(t *testing.T) {
	start(t, offload.WithDevices("host:1,local:1"))
	for dev, want := range map[int][2]int32{0: {1, 1}, 1: {1, 2}} {
		out := make([]int32, 2)
		if err := offload.On(dev).Run(inKernel, offload.ToFrom(out)); err != nil {
			t.Fatalf("device %d: %v", dev, err)
		}
		if out[0] != want[0] || out[1] != want[1] {
			t.Errorf("device %d: Taskwait %d (want %d: ErrInTask), launch %d (want %d: 1 worked, 2 the device-process error)", dev, out[0], want[0], out[1], want[1])
		}
	}
}
