package offload

import (
	"reflect"

	"github.com/goffload/offload/internal/core"
)

// Copy copies the elements of src, as mapped on device from, to the
// mapping of dst on device to. It is a device-to-device copy of a buffer's
// copies, counted in elements rather than bytes.
// On the initial device a slice is its own memory. So
// Copy(offload.Initial(), x, dev, x) is target update from(x) without the
// present table's counts. dst and src must have the same length; sub-slice
// them for sections. On any other device they must be mapped there, as for
// MappedPtr. Copy is omp_target_memcpy with the addresses found for you:
//
//	offload.Copy(offload.On(1), x[:n], offload.On(0), x[:n]) // halo from device 0 to 1
func Copy[T any](to Device, dst []T, from Device, src []T) error {
	dp, sp, n, err := copyPtrs(to, dst, from, src)
	if err != nil || n == 0 {
		return err
	}
	return Memcpy(dp, sp, n)
}

// CopyNowait is Copy as a task of nw, with nw's depend clauses.
// The device of nw is not used: the copy runs on the source's queue, as
// Async.Memcpy does. The mappings are looked up when CopyNowait is called.
// A mapping that a task not yet enqueued will make is not found.
func CopyNowait[T any](nw Async, to Device, dst []T, from Device, src []T) *Task {
	dp, sp, n, err := copyPtrs(to, dst, from, src)
	if err != nil {
		return nw.failed(err)
	}
	return nw.Memcpy(dp, sp, n)
}

// copyPtrs finds the device memory of dst on to and src on from.
func copyPtrs[T any](to Device, dst []T, from Device, src []T) (DevicePtr, DevicePtr, int64, error) {
	et := reflect.TypeFor[T]()
	if err := checkPlain(et); err != nil {
		return DevicePtr{}, DevicePtr{}, 0, core.Errorf("goffload: omp_target_memcpy of []%s: %w: %v", et, ErrBadArgument, err)
	}
	if len(dst) != len(src) {
		return DevicePtr{}, DevicePtr{}, 0, core.Errorf("goffload: omp_target_memcpy from %s to %s: %w: source has %d elements of %s (host %#x), destination %d (host %#x): sub-slice them to the same length",
			from, to, ErrBadArgument, len(src), et, addrOf(src), len(dst), addrOf(dst))
	}
	if len(src) == 0 {
		return DevicePtr{}, DevicePtr{}, 0, nil
	}
	dp, err := to.MappedPtr(dst)
	if err != nil {
		return DevicePtr{}, DevicePtr{}, 0, core.Errorf("goffload: omp_target_memcpy: destination: %w", core.Quote(err))
	}
	sp, err := from.MappedPtr(src)
	if err != nil {
		return DevicePtr{}, DevicePtr{}, 0, core.Errorf("goffload: omp_target_memcpy: source: %w", core.Quote(err))
	}
	return dp, sp, int64(len(src)) * int64(et.Size()), nil
}

func addrOf[T any](s []T) uintptr {
	if cap(s) == 0 {
		return 0
	}
	return reflect.ValueOf(s).Pointer()
}

// failed is a task that failed before it was created.
func (a Async) failed(err error) *Task {
	if a.rec != nil {
		return a.rec.fail(err)
	}
	return a.start(func(rt *core.Runtime, deps []core.Dep) (*core.Task, error) { return nil, err })
}
