// Package plugintest is the conformance suite that every device kind must
// pass. It is in the spirit of golang.org/x/net/nettest.TestConn. A kind's
// tests call [Run] with a function that opens devices of the kind. The suite
// checks the whole contract of package plugin against them: memory, copies,
// kernel launches, queues, events, errors and concurrent use.
//
// The suite registers its own kernels at package init (names prefixed
// "plugintest."). So a test binary that imports it has them in its image.
package plugintest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
)

// timeout bounds every blocking call of the suite. So a plugin that hangs
// fails the test that hung, not the whole binary.
const timeout = 20 * time.Second

// Run runs the conformance suite, each aspect of the contract as a subtest.
//
// open returns at least two fresh devices of the kind under test, constructed
// but not loaded. The suite loads them with [entries.Current] as device
// numbers 0, 1, … and closes them when the test ends. The suite may call open
// more than once (to test closing a device).
func Run(t *testing.T, open func(t *testing.T) []plugin.Device) {
	t.Helper()
	e := &env{open: open, img: entries.Current()}
	for _, k := range []plugin.Kernel{kScalars, kAddInt32, kFillInt64, kAddInt64, kLens, kCtxFill, kPanic, kPanicFor, kSleep, kCancel} {
		if k.Index() >= len(e.img.Kernels) || e.img.Kernels[k.Index()] != k {
			t.Fatalf("plugintest: kernel %q is not in entries.Current()", k.Name())
		}
	}
	e.devs = e.openLoaded(t)

	t.Run("Info", e.testInfo)
	t.Run("Alloc", e.testAlloc)
	t.Run("Free", e.testFree)
	t.Run("SubmitRetrieve", e.testSubmitRetrieve)
	t.Run("HostMemoryOrder", e.testHostMemoryOrder)
	t.Run("CopyBadRange", e.testCopyBadRange)
	t.Run("Exchange", e.testExchange)
	t.Run("LaunchScalars", e.testLaunchScalars)
	t.Run("LaunchSlices", e.testLaunchSlices)
	t.Run("LaunchBad", e.testLaunchBad)
	t.Run("LaunchGeometry", e.testLaunchGeometry)
	t.Run("KernelContext", e.testKernelContext)
	t.Run("KernelPanic", e.testKernelPanic)
	t.Run("QueueOrder", e.testQueueOrder)
	t.Run("QueueQuery", e.testQueueQuery)
	t.Run("InlineHandOver", e.testInlineHandOver)
	t.Run("Events", e.testEvents)
	t.Run("EventWait", e.testEventWait)
	t.Run("EventError", e.testEventError)
	t.Run("CrossDeviceWait", e.testCrossDeviceWait)
	t.Run("ForeignEvent", e.testForeignEvent)
	t.Run("Concurrency", e.testConcurrency)
	t.Run("ClosedHandles", e.testClosedHandles)
	t.Run("ClosedDevice", e.testClosedDevice)
	t.Run("Tracer", e.testTracer)
	t.Run("FireNotifier", e.testFireNotifier)
	t.Run("CancelKernels", e.testCancelKernels)
	t.Run("StopLaunch", e.testStopLaunch)
	t.Run("HostSharer", e.testHostSharer)
	t.Run("GraphDefiner", e.testGraphDefiner)
}

// env is the state the subtests share: the loaded devices and the image.
type env struct {
	open func(t *testing.T) []plugin.Device
	img  *plugin.Image
	devs []plugin.Device
	// closed holds the devices a subtest closed itself. Closing them again at
	// the end is not checked: the contract does not say what a second Close
	// returns.
	closed sync.Map
}

// openLoaded opens devices, loads them as numbers 0, 1, … and closes them
// when t ends.
func (e *env) openLoaded(t *testing.T) []plugin.Device {
	t.Helper()
	devs := e.open(t)
	if len(devs) < 2 {
		t.Fatalf("open returned %d devices; the suite needs at least 2", len(devs))
	}
	for _, d := range devs {
		t.Cleanup(func() {
			if err := within(t, "Device.Close", d.Close); err != nil {
				if _, ok := e.closed.Load(d); ok {
					return
				}
				t.Errorf("Device.Close: %v", err)
			}
		})
	}
	for i, d := range devs {
		if err := d.Load(e.img, i); err != nil {
			t.Fatalf("device %d: Load: %v", i, err)
		}
	}
	return devs
}

func (e *env) testInfo(t *testing.T) {
	kind := e.devs[0].Info().Kind
	for i, d := range e.devs {
		in := d.Info()
		if in.Kind == "" {
			t.Errorf("device %d: Info().Kind is empty", i)
		}
		if in.Kind != kind {
			t.Errorf("device %d: Info().Kind = %q, device 0 says %q; open must return devices of one kind", i, in.Kind, kind)
		}
		if in.Name == "" {
			t.Errorf("device %d: Info().Name is empty", i)
		}
		if in.Cores < 1 {
			t.Errorf("device %d: Info().Cores = %d, want >= 1", i, in.Cores)
		}
		if in.Arch == "" {
			t.Errorf("device %d: Info().Arch is empty", i)
		}
		if in.Memory < 0 {
			t.Errorf("device %d: Info().Memory = %d, want >= 0", i, in.Memory)
		}
		if in.PID < 0 {
			t.Errorf("device %d: Info().PID = %d, want >= 0", i, in.PID)
		}
	}
}

// within runs f and returns its error, failing t if f does not return within
// the suite's timeout.
func within(t *testing.T, what string, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(timeout):
		t.Fatalf("%s did not return within %v", what, timeout)
		return nil
	}
}

// qsync synchronizes q within the timeout.
func qsync(t *testing.T, q plugin.Queue) error {
	t.Helper()
	return within(t, "Queue.Synchronize", q.Synchronize)
}

// mustSync synchronizes q and fails t on an error.
func mustSync(t *testing.T, q plugin.Queue) {
	t.Helper()
	if err := qsync(t, q); err != nil {
		t.Fatalf("Queue.Synchronize: %v", err)
	}
}

// esync synchronizes ev within the timeout.
func esync(t *testing.T, ev plugin.Event) error {
	t.Helper()
	return within(t, "Event.Synchronize", ev.Synchronize)
}

// newQueue creates a queue on d, closed when t ends.
func newQueue(t *testing.T, d plugin.Device) plugin.Queue {
	t.Helper()
	q, err := d.NewQueue()
	if err != nil {
		t.Fatalf("NewQueue: %v", err)
	}
	t.Cleanup(func() { _ = within(t, "Queue.Close", q.Close) })
	return q
}

// newEvent creates an event on d, closed when t ends.
func newEvent(t *testing.T, d plugin.Device) plugin.Event {
	t.Helper()
	ev, err := d.NewEvent()
	if err != nil {
		t.Fatalf("NewEvent: %v", err)
	}
	t.Cleanup(func() { _ = ev.Close() })
	return ev
}

// alloc allocates n bytes on d, freed when t ends (if still live).
func alloc(t *testing.T, d plugin.Device, n int64) plugin.Ptr {
	t.Helper()
	p, err := d.Alloc(n)
	if err != nil {
		t.Fatalf("Alloc(%d): %v", n, err)
	}
	t.Cleanup(func() { _ = d.Free(p) })
	return p
}

// put enqueues a Submit of b to p and fails t if it is refused.
func put(t *testing.T, q plugin.Queue, p plugin.Ptr, b []byte) {
	t.Helper()
	if err := q.Submit(p, b); err != nil {
		t.Fatalf("Submit(%#x, %d bytes): %v", uint64(p), len(b), err)
	}
}

// get retrieves n bytes at p through q, synchronizing q.
func get(t *testing.T, q plugin.Queue, p plugin.Ptr, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if err := q.Retrieve(b, p); err != nil {
		t.Fatalf("Retrieve(%d bytes, %#x): %v", n, uint64(p), err)
	}
	mustSync(t, q)
	return b
}

// launch enqueues k with args and fails t if it is refused.
func launch(t *testing.T, q plugin.Queue, k plugin.Kernel, args ...plugin.Arg) {
	t.Helper()
	if err := q.Launch(k, args); err != nil {
		t.Fatalf("Launch(%s): %v", k.Name(), err)
	}
}

// scalar and slice build kernel arguments.
func scalar(v any) plugin.Arg              { return plugin.Arg{Scalar: v} }
func slice(p plugin.Ptr, n int) plugin.Arg { return plugin.Arg{Ptr: p, Len: n} }

// expectErr checks that an operation failed with an error wrapping target. It
// may fail when it was enqueued (enqErr) or at q's next Synchronize. Then q
// must be clean again.
func expectErr(t *testing.T, what string, q plugin.Queue, enqErr, target error) {
	t.Helper()
	err := enqErr
	if err == nil {
		err = qsync(t, q)
	}
	if !errors.Is(err, target) {
		t.Errorf("%s: error %v, want one wrapping %q", what, err, target)
	}
	if err := qsync(t, q); err != nil {
		t.Errorf("%s: Synchronize after the failure returned %v, want nil (the error state must clear)", what, err)
	}
}

// asBytes returns the memory of s as bytes (native layout, as the core maps
// buffers).
func asBytes[T any](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(s[0])))
}

// fromBytes reinterprets b, whose length must be a multiple of T's size.
func fromBytes[T any](b []byte) []T {
	var z T
	n := len(b) / int(unsafe.Sizeof(z))
	out := make([]T, n)
	copy(asBytes(out), b)
	return out
}

// pattern returns n bytes that differ from any other seed's and repeat only
// after a long period. So a misplaced or shifted copy shows.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	x := uint32(seed)*2654435761 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

// firstDiff describes where got and want differ, or returns "".
func firstDiff(got, want []byte) string {
	if len(got) != len(want) {
		return fmt.Sprintf("length %d, want %d", len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Sprintf("byte %d is %#02x, want %#02x", i, got[i], want[i])
		}
	}
	return ""
}
