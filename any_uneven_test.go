package offload_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/goffload/offload"
)

// unevenTime is how long anyUneven takes on each device: the devices'
// speeds for it. A test sets it before it launches the kernel.
var unevenTime [2]time.Duration

// anyUneven takes unevenTime[its device] and then sets dst: a kernel
// whose speed differs from device to device, as on devices of unequal
// speed, with a time that no load on the machine makes shorter.
var anyUneven = offload.MustKernel2("test.any.uneven", func(ctx offload.Ctx, k int64, dst offload.Out[int64]) {
	time.Sleep(unevenTime[ctx.Device()])
	for i := range dst {
		dst[i] = k + int64(i)
	}
})

// TestAnyUnequalSpeeds: with one of two devices 100× slower for a kernel,
// Any-tasks of it learn so and put most of a burst of independent tasks on
// the faster device (which would finish them all before the slower one
// finished a few), whichever of the two is the slower; the results are
// right. The slower device may get some (when the faster one's queue is
// longer than a task there), so the check is a direction with a wide
// margin: the faster device gets at least three times as many.
func TestAnyUnequalSpeeds(t *testing.T) {
	const burst, n = 40, 8
	for _, slow := range []int{1, 0} {
		t.Run(fmt.Sprintf("slow=%d", slow), func(t *testing.T) {
			fast := 1 - slow
			unevenTime[fast], unevenTime[slow] = time.Millisecond, 100*time.Millisecond
			ran := &kernelCounter{}
			start(t, offload.WithDevices("host:2"), offload.WithOffload("MANDATORY"), offload.WithTool(ran))
			run := func(tasks int) [][]int64 {
				t.Helper()
				bufs := make([][]int64, tasks)
				for i := range bufs {
					bufs[i] = make([]int64, n)
					anyUneven.Nowait(offload.Any().Nowait(), int64(i), bufs[i])
				}
				if err := offload.Taskwait(context.Background()); err != nil {
					t.Fatal(err)
				}
				for i, b := range bufs {
					for j, v := range b {
						if v != int64(i+j) {
							t.Fatalf("task %d: dst[%d] = %d, want %d", i, j, v, i+j)
						}
					}
				}
				return bufs
			}
			// The first two tasks try the kernel on each device, and
			// time it there; the next few refine its time.
			run(2)
			if ran.on(0) != 1 || ran.on(1) != 1 {
				t.Fatalf("the first 2 tasks: %d on device 0, %d on device 1; want the kernel tried on each", ran.on(0), ran.on(1))
			}
			run(8)
			f0, s0 := ran.on(fast), ran.on(slow)
			run(burst)
			f, s := ran.on(fast)-f0, ran.on(slow)-s0
			if f+s != burst {
				t.Fatalf("%d and %d kernels of a burst of %d", f, s, burst)
			}
			if f < 3*s {
				t.Errorf("a burst of %d tasks: %d on the faster device %d, %d on the slower device %d; want at least 3 times as many on the faster", burst, f, fast, s, slow)
			}
			t.Logf("a burst of %d tasks: %d on the faster device %d, %d on the slower device %d", burst, f, fast, s, slow)
		})
	}
}
