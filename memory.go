package offload

import (
	"fmt"
	"reflect"
	"unsafe"

	"github.com/goffload/offload/internal/core"
	"github.com/goffload/offload/internal/plugin"
)

// DevicePtr is a range of memory on one device: what Alloc returns
// (omp_target_alloc), or host memory named by HostPtr. It can be passed to a
// kernel on its device as a slice argument (is_device_ptr), copied with
// Memcpy, and associated with a host buffer.
type DevicePtr struct {
	dev  int            // device number
	ptr  plugin.Ptr     // device address
	size int64          // bytes from ptr
	keep unsafe.Pointer // host memory, for a pointer on the initial device
	host bool           // the memory is host memory
}

// Device is the number of the device the memory is on.
func (p DevicePtr) Device() int { return p.dev }

// Size is the number of bytes from the pointer to the end of its range.
func (p DevicePtr) Size() int64 { return p.size }

// IsNil reports whether p is the zero DevicePtr.
func (p DevicePtr) IsNil() bool { return p.ptr == 0 && p.keep == nil }

// Offset returns the pointer off bytes further, its size shrunk to match.
// An offset outside [0, Size()] gives a nil DevicePtr.
func (p DevicePtr) Offset(off int64) DevicePtr {
	if off < 0 || off > p.size {
		return DevicePtr{}
	}
	q := p
	q.size -= off
	if p.host {
		q.keep = unsafe.Add(p.keep, off)
		q.ptr = plugin.Ptr(uintptr(q.keep))
	} else {
		q.ptr += plugin.Ptr(off)
	}
	return q
}

// String shows the device and address.
func (p DevicePtr) String() string {
	return fmt.Sprintf("device %d:%#x(+%d)", p.dev, uint64(p.ptr), p.size)
}

func (p DevicePtr) onInitial() bool { return p.host }

func (p DevicePtr) check() error {
	if p.IsNil() {
		return fmt.Errorf("nil DevicePtr")
	}
	return nil
}

// HostPtr names the memory of slice s as a DevicePtr on the initial device,
// for Memcpy between host and device memory (omp_target_memcpy with the
// initial device on one side).
func HostPtr(s any) DevicePtr {
	v := reflect.ValueOf(s)
	if !v.IsValid() || v.Kind() != reflect.Slice || checkPlain(v.Type().Elem()) != nil {
		return DevicePtr{}
	}
	b := bufOf(v)
	return DevicePtr{dev: NumDevices(), ptr: plugin.Ptr(b.Addr()), size: b.Size, keep: b.Ptr, host: true}
}

// Alloc allocates size bytes of device memory (omp_target_alloc). On the
// initial device it allocates host memory. Free it with Free.
func (d Device) Alloc(size int64) (DevicePtr, error) {
	cd, _, err := d.resolve()
	if err != nil {
		return DevicePtr{}, err
	}
	if size < 0 {
		return DevicePtr{}, fmt.Errorf("goffload: %s: alloc of %d bytes: %w: negative size", cd.Label(), size, ErrBadArgument)
	}
	if cd.IsInitial() {
		b := make([]byte, max(size, 1))
		return DevicePtr{dev: cd.Num, ptr: plugin.Ptr(uintptr(unsafe.Pointer(&b[0]))), size: size, keep: unsafe.Pointer(&b[0]), host: true}, nil
	}
	p, err := cd.Alloc(size)
	if err != nil {
		return DevicePtr{}, err
	}
	return DevicePtr{dev: cd.Num, ptr: p, size: size}, nil
}

// Free releases memory from Alloc (omp_target_free). Freeing host memory is
// left to the garbage collector.
func Free(p DevicePtr) error {
	if p.host {
		return nil
	}
	cd, err := ptrDevice(p)
	if err != nil {
		return err
	}
	return cd.Free(p.ptr)
}

func ptrDevice(p DevicePtr) (*core.Device, error) {
	if err := p.check(); err != nil {
		return nil, fmt.Errorf("goffload: %w: %v", ErrBadArgument, err)
	}
	cd, _, err := On(p.dev).resolve()
	if err != nil {
		return nil, err
	}
	if cd.Num != p.dev {
		return nil, fmt.Errorf("goffload: %w: %s belongs to a device that is not available", ErrBadArgument, p)
	}
	return cd, nil
}

func loc(p DevicePtr, n int64) (core.Loc, error) {
	if n > p.size {
		return core.Loc{}, fmt.Errorf("goffload: omp_target_memcpy: %w: %d bytes from %s, which holds %d", ErrBadArgument, n, p, p.size)
	}
	if p.host {
		return core.Loc{Host: unsafe.Slice((*byte)(p.keep), p.size)}, nil
	}
	cd, err := ptrDevice(p)
	if err != nil {
		return core.Loc{}, err
	}
	return core.Loc{Dev: cd, Ptr: p.ptr}, nil
}

// Memcpy copies n bytes from src to dst, each on any device, the initial
// device included (omp_target_memcpy). A copy between two devices goes
// straight between them where their kind allows.
func Memcpy(dst, src DevicePtr, n int64) error {
	if n < 0 {
		return fmt.Errorf("goffload: omp_target_memcpy: %w: negative size %d", ErrBadArgument, n)
	}
	if n == 0 {
		return nil
	}
	dl, err := loc(dst, n)
	if err != nil {
		return err
	}
	sl, err := loc(src, n)
	if err != nil {
		return err
	}
	return core.Memcpy(dl, sl, n)
}

// hostBuf converts a slice for the mapping routines.
func hostBuf(cd *core.Device, op string, s any) (core.Buf, error) {
	v := reflect.ValueOf(s)
	if !v.IsValid() || v.Kind() != reflect.Slice {
		return core.Buf{}, fmt.Errorf("goffload: %s: %s of a %T: %w: want a slice", cd.Label(), op, s, ErrBadArgument)
	}
	return bufOf(v), nil
}

// IsPresent reports whether slice s is mapped on the device
// (omp_target_is_present). Everything is present on the initial device.
func (d Device) IsPresent(s any) bool {
	cd, _, err := d.resolve()
	if err != nil {
		return false
	}
	b, err := hostBuf(cd, "omp_target_is_present", s)
	if err != nil {
		return false
	}
	return cd.IsPresent(b)
}

// MappedPtr returns the device memory slice s is mapped to
// (omp_get_mapped_ptr); on the initial device, s's own memory.
func (d Device) MappedPtr(s any) (DevicePtr, error) {
	cd, _, err := d.resolve()
	if err != nil {
		return DevicePtr{}, err
	}
	b, err := hostBuf(cd, "omp_get_mapped_ptr", s)
	if err != nil {
		return DevicePtr{}, err
	}
	if cd.IsInitial() {
		return DevicePtr{dev: cd.Num, ptr: plugin.Ptr(b.Addr()), size: b.Size, keep: b.Ptr, host: true}, nil
	}
	p, err := cd.MappedPtr(b)
	if err != nil {
		return DevicePtr{}, err
	}
	return DevicePtr{dev: cd.Num, ptr: p, size: b.Size}, nil
}

// Associate maps slice s to device memory p that the caller allocated
// (omp_target_associate_ptr): constructs then find s present at p, never
// copy it in on their own or free p. Undo it with Disassociate.
func (d Device) Associate(s any, p DevicePtr, name string) error {
	cd, _, err := d.resolve()
	if err != nil {
		return err
	}
	b, err := hostBuf(cd, "omp_target_associate_ptr", s)
	if err != nil {
		return err
	}
	b.Name = name
	if cd.IsInitial() || p.host || p.dev != cd.Num {
		return fmt.Errorf("goffload: %s: omp_target_associate_ptr of %q: %w: %s is not memory of this device", cd.Label(), name, ErrBadArgument, p)
	}
	if b.Size > p.size {
		return fmt.Errorf("goffload: %s: omp_target_associate_ptr of %q (%d bytes): %w: %s holds only %d bytes", cd.Label(), name, b.Size, ErrBadArgument, p, p.size)
	}
	return cd.Associate(b, p.ptr)
}

// Disassociate removes an association made by Associate
// (omp_target_disassociate_ptr).
func (d Device) Disassociate(s any) error {
	cd, _, err := d.resolve()
	if err != nil {
		return err
	}
	b, err := hostBuf(cd, "omp_target_disassociate_ptr", s)
	if err != nil {
		return err
	}
	if cd.IsInitial() {
		return fmt.Errorf("goffload: %s: omp_target_disassociate_ptr: %w: the initial device has no associations", cd.Label(), ErrBadArgument)
	}
	return cd.Disassociate(b)
}
