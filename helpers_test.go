package offload_test

import (
	"fmt"
	"os"
	"testing"
	"unsafe"

	"github.com/goffload/offload"
	"github.com/goffload/offload/role"
)

// The device processes that tests start (GOFFLOAD_DEVICES=local:N) are this
// test binary: they serve before running any test, as the device ranks of
// TestMatrixMPI's job do. Its host rank ends MPI after the tests.
func TestMain(m *testing.M) {
	role.ServeDevice()
	code := m.Run()
	if err := endMPIJob(); err != nil {
		fmt.Fprintf(os.Stderr, "ending TestMatrixMPI's MPI job: %v\n", err)
		code = 1
	}
	os.Exit(code)
}

// Kernels shared by the tests.
var (
	Fill = offload.MustKernel("test.fill", func(ctx offload.Ctx, v int32, x []int32) {
		ctx.For(len(x), func(lo, hi int) {
			for i := lo; i < hi; i++ {
				x[i] = v
			}
		})
	})
	AddTo = offload.MustKernel("test.addto", func(v int32, x []int32) {
		for i := range x {
			x[i] += v
		}
	})
	Copy = offload.MustKernel("test.copy", func(dst, src []int32) { copy(dst, src) })
	Nop  = offload.MustKernel("test.nop", func() {})
)

// start starts the runtime for one test and stops it at the end.
func start(t testing.TB, opts ...offload.Option) {
	t.Helper()
	if err := offload.Start(opts...); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := offload.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
}

// entryOf returns the present-table entry of device dev that starts at s's
// first element, and whether there is one.
func entryOf(dev int, s []int32) (dyn, hold int64, ok bool) {
	if len(s) == 0 {
		return 0, 0, false
	}
	addr := uintptr(unsafe.Pointer(&s[0]))
	for _, e := range offload.Entries(dev) {
		if e.HstBegin <= addr && addr < e.HstBegin+uintptr(e.Size) {
			return e.Dyn, e.Hold, true
		}
	}
	return 0, 0, false
}

// deviceCopy reads s's device copy on dev through the memory routines.
func deviceCopy(t *testing.T, dev offload.Device, s []int32) []int32 {
	t.Helper()
	p, err := dev.MappedPtr(s)
	if err != nil {
		t.Fatalf("MappedPtr: %v", err)
	}
	out := make([]int32, len(s))
	if err := offload.Memcpy(offload.HostPtr(out), p, int64(len(s))*4); err != nil {
		t.Fatalf("Memcpy from device: %v", err)
	}
	return out
}

func filled(n int, v int32) []int32 {
	s := make([]int32, n)
	for i := range s {
		s[i] = v
	}
	return s
}

func setAll(s []int32, v int32) {
	for i := range s {
		s[i] = v
	}
}

func allEqual(s []int32, v int32) bool {
	for _, x := range s {
		if x != v {
			return false
		}
	}
	return true
}
