package offload

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"unsafe"

	"github.com/goffload/offload/internal/core"
	"github.com/goffload/offload/internal/mapping"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/hostmem"
)

// ErrOutOfMemory is wrapped by the error of an allocation the device cannot
// hold, such as one larger than the machine's memory. Go could not survive
// trying it.
var ErrOutOfMemory = plugin.ErrOutOfMemory

// DevicePtr is a range of memory on one device: what Alloc returns
// (omp_target_alloc), or host memory named by HostPtr.
// It can be passed to a kernel on its device as a slice argument
// (is_device_ptr), copied with Memcpy, and associated with a host buffer.
//
// A DevicePtr into memory from Alloc on a device other than the initial one
// remembers its allocation. Once that is freed, every use of the pointer,
// or of pointers derived from it with Offset, is refused. The error wraps
// ErrBadPointer and ErrBadArgument, even where a later allocation reuses
// the memory. Memory of the initial device belongs to the garbage collector
// and stays valid while a DevicePtr refers to it.
type DevicePtr struct {
	dev  int        // device number
	ptr  plugin.Ptr // device address
	size int64      // bytes from ptr
	// keep is the host memory of a pointer on the initial device, at ptr
	// while size > 0. A pointer at the end of its memory (size 0) keeps the
	// address it was derived from. A Go pointer one past the end of an
	// allocation would point into another object or nowhere, which the
	// garbage collector treats as a fatal error.
	keep unsafe.Pointer
	host bool       // the memory is host memory
	base plugin.Ptr // start of the allocation from Alloc
	gen  uint64     // generation of that allocation; 0 if not from Alloc
	bad  string     // why the pointer is invalid (an out-of-range Offset)
}

// Device is the number of the device the memory is on.
func (p DevicePtr) Device() int { return p.dev }

// Size is the number of bytes from the pointer to the end of its range.
func (p DevicePtr) Size() int64 { return p.size }

// IsNil reports whether p points nowhere: the zero DevicePtr, or the result
// of an Offset outside its range.
func (p DevicePtr) IsNil() bool { return p.ptr == 0 && p.keep == nil }

// Offset returns the pointer off bytes further, its size shrunk to match.
// An offset outside [0, Size()] gives a nil DevicePtr. Every routine
// refuses it with an error saying which offset was out of range.
func (p DevicePtr) Offset(off int64) DevicePtr {
	if p.bad != "" {
		return p
	}
	if off < 0 || off > p.size || p.IsNil() {
		return DevicePtr{dev: p.dev, bad: fmt.Sprintf("%s offset by %d bytes, outside [0, %d]", p, off, p.size)}
	}
	q := p
	q.size -= off
	q.ptr += plugin.Ptr(off)
	if p.host && q.size > 0 {
		q.keep = unsafe.Add(p.keep, off)
	}
	return q
}

// String shows the device and address.
func (p DevicePtr) String() string {
	if p.bad != "" {
		return "invalid DevicePtr (" + p.bad + ")"
	}
	return fmt.Sprintf("device %d:%#x(+%d)", p.dev, uint64(p.ptr), p.size)
}

func (p DevicePtr) onInitial() bool { return p.host }

// valid reports why p points nowhere, if it does.
func (p DevicePtr) valid() error {
	switch {
	case p.bad != "":
		return fmt.Errorf("%w: %s", ErrBadArgument, p.bad)
	case p.IsNil():
		return fmt.Errorf("%w: nil DevicePtr", ErrBadArgument)
	}
	return nil
}

// live reports an error if p's allocation on cd was freed.
func (p DevicePtr) live(cd *core.Device) error {
	if p.gen == 0 {
		return nil
	}
	if err := cd.CheckAlloc(p.base, p.gen); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrBadArgument, p, err)
	}
	return nil
}

// check reports why p cannot be used as a kernel argument: it points
// nowhere, or into memory that was freed. The caller adds ErrBadArgument.
func (p DevicePtr) check() error {
	switch {
	case p.bad != "":
		return errors.New(p.bad)
	case p.IsNil():
		return errors.New("nil DevicePtr")
	case p.gen == 0:
		return nil
	}
	cd, _, err := On(p.dev).resolve()
	if err != nil {
		return err
	}
	if cd.Num != p.dev {
		return fmt.Errorf("%s belongs to a device that is not available", p)
	}
	if err := cd.CheckAlloc(p.base, p.gen); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	return nil
}

// HostPtr names the memory of slice s as a DevicePtr on the initial device.
// It is for Memcpy between host and device memory: omp_target_memcpy with
// the initial device on one side.
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
// A negative size is refused with an error wrapping ErrBadArgument.
// A size larger than the machine's memory is refused with an error wrapping
// ErrOutOfMemory. That is so on the initial device and on CPU devices,
// which allocate Go memory: Go ends the process when memory runs out, so
// such sizes are refused before trying.
func (d Device) Alloc(size int64) (DevicePtr, error) {
	p, err := d.alloc(size)
	return p, err
}

func (d Device) alloc(size int64) (DevicePtr, error) {
	cd, _, err := d.resolve()
	if err != nil {
		return DevicePtr{}, err
	}
	if size < 0 {
		return DevicePtr{}, core.Errorf("goffload: %s: alloc of %d bytes: %w: negative size", cd.Label(), size, ErrBadArgument)
	}
	if cd.IsInitial() {
		if err := hostmem.CheckSize(size); err != nil {
			return DevicePtr{}, core.Errorf("goffload: %s: alloc of %d bytes: %w", cd.Label(), size, err)
		}
		b := make([]byte, max(size, 1))
		return DevicePtr{dev: cd.Num, ptr: plugin.Ptr(uintptr(unsafe.Pointer(&b[0]))), size: size, keep: unsafe.Pointer(&b[0]), host: true}, nil
	}
	p, err := cd.Alloc(size)
	if err != nil {
		return DevicePtr{}, err
	}
	return DevicePtr{dev: cd.Num, ptr: p, size: size, base: p, gen: cd.TrackAlloc(p, size)}, nil
}

// Free releases memory from Alloc (omp_target_free). Freeing host memory is
// left to the garbage collector. It is an error wrapping ErrBadPointer to
// free a pointer twice, a pointer that Offset moved, or device memory that
// did not come from Alloc (MappedPtr's).
func Free(p DevicePtr) error {
	return free(p)
}

func free(p DevicePtr) error {
	const op = "omp_target_free"
	if err := p.valid(); err != nil {
		return core.Errorf("goffload: %s: %w", op, err)
	}
	if p.host {
		return nil
	}
	cd, _, err := On(p.dev).resolve()
	if err != nil {
		return err
	}
	if cd.Num != p.dev {
		return core.Errorf("goffload: %s: %w: %s belongs to a device that is not available", op, ErrBadArgument, p)
	}
	switch {
	case p.gen == 0:
		return core.Errorf("goffload: %s: %s of %s: %w (%w): not memory from Alloc", cd.Label(), op, p, ErrBadArgument, ErrBadPointer)
	case p.ptr != p.base:
		return core.Errorf("goffload: %s: %s of %s: %w (%w): %d bytes into the allocation at %#x, not its start",
			cd.Label(), op, p, ErrBadArgument, ErrBadPointer, p.ptr-p.base, uint64(p.base))
	}
	if err := cd.UntrackAlloc(p.base, p.gen); err != nil {
		return core.Errorf("goffload: %s: %s of %s: %w: %w", cd.Label(), op, p, ErrBadArgument, err)
	}
	return cd.Free(p.ptr)
}

// ptrDevice resolves the device of p for op, checking that p points into
// live memory.
func ptrDevice(p DevicePtr, op string) (*core.Device, error) {
	if err := p.valid(); err != nil {
		return nil, core.Errorf("goffload: %s: %w", op, err)
	}
	cd, _, err := On(p.dev).resolve()
	if err != nil {
		return nil, err
	}
	if cd.Num != p.dev {
		return nil, core.Errorf("goffload: %s: %w: %s belongs to a device that is not available", op, ErrBadArgument, p)
	}
	if err := p.live(cd); err != nil {
		return nil, core.Errorf("goffload: %s: %s: %w", cd.Label(), op, err)
	}
	return cd, nil
}

func loc(p DevicePtr, n int64) (core.Loc, error) {
	const op = "omp_target_memcpy"
	if err := p.valid(); err != nil {
		return core.Loc{}, core.Errorf("goffload: %s: %w", op, err)
	}
	if n > p.size {
		return core.Loc{}, core.Errorf("goffload: %s: %w: %d bytes from %s, which holds %d", op, ErrBadArgument, n, p, p.size)
	}
	if p.host {
		return core.Loc{Host: unsafe.Slice((*byte)(p.keep), n)}, nil
	}
	cd, err := ptrDevice(p, op)
	if err != nil {
		return core.Loc{}, err
	}
	return core.Loc{Dev: cd, Ptr: p.ptr}, nil
}

// Memcpy copies n bytes from src to dst, each on any device, the initial
// device included (omp_target_memcpy). A copy between two devices goes
// straight between them where their kind allows.
//
// Memcpy waits for the copy. To stop waiting when a context ends, make the
// copy a task and wait for that: the copy itself goes on.
//
//	err := offload.Nowait().Memcpy(dst, src, n).WaitContext(ctx)
func Memcpy(dst, src DevicePtr, n int64) error {
	if n < 0 {
		return core.Errorf("goffload: omp_target_memcpy: %w: negative size %d", ErrBadArgument, n)
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
	return core.MemcpyContext(context.Background(), dl, sl, n)
}

// hostBuf converts a slice for the mapping routines.
func hostBuf(cd *core.Device, op string, s any) (mapping.Buf, error) {
	v := reflect.ValueOf(s)
	if !v.IsValid() || v.Kind() != reflect.Slice {
		return mapping.Buf{}, core.Errorf("goffload: %s: %s of a %T: %w: want a slice", cd.Label(), op, s, ErrBadArgument)
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
	return mappedPtr(cd, b)
}

// mappedPtrOf is MappedPtr of a typed slice: it is not boxed.
func mappedPtrOf[T any](d Device, s []T) (DevicePtr, error) {
	cd, _, err := d.resolve()
	if err != nil {
		return DevicePtr{}, err
	}
	var zero T
	return mappedPtr(cd, mapping.Buf{Ptr: unsafe.Pointer(unsafe.SliceData(s)), Size: int64(len(s)) * int64(unsafe.Sizeof(zero))})
}

// mappedPtr is MappedPtr of the host buffer b on cd.
func mappedPtr(cd *core.Device, b mapping.Buf) (DevicePtr, error) {
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
// (omp_target_associate_ptr). Constructs then find s present at p.
// They never copy it in on their own or free p. Undo it with Disassociate.
func (d Device) Associate(s any, p DevicePtr, name string) error {
	return d.associate(s, p, name)
}

func (d Device) associate(s any, p DevicePtr, name string) error {
	cd, _, err := d.resolve()
	if err != nil {
		return err
	}
	b, err := hostBuf(cd, "omp_target_associate_ptr", s)
	if err != nil {
		return err
	}
	b.Name = name
	if err := p.valid(); err != nil {
		return core.Errorf("goffload: %s: omp_target_associate_ptr of %q: %w", cd.Label(), name, err)
	}
	if cd.IsInitial() || p.host || p.dev != cd.Num {
		return core.Errorf("goffload: %s: omp_target_associate_ptr of %q: %w: %s is not memory of this device", cd.Label(), name, ErrBadArgument, p)
	}
	if err := p.live(cd); err != nil {
		return core.Errorf("goffload: %s: omp_target_associate_ptr of %q: %w", cd.Label(), name, err)
	}
	if b.Size > p.size {
		return core.Errorf("goffload: %s: omp_target_associate_ptr of %q (%d bytes): %w: %s holds only %d bytes", cd.Label(), name, b.Size, ErrBadArgument, p, p.size)
	}
	return cd.Associate(b, p.ptr)
}

// Disassociate removes an association made by Associate
// (omp_target_disassociate_ptr).
func (d Device) Disassociate(s any) error {
	return d.disassociate(s)
}

func (d Device) disassociate(s any) error {
	cd, _, err := d.resolve()
	if err != nil {
		return err
	}
	b, err := hostBuf(cd, "omp_target_disassociate_ptr", s)
	if err != nil {
		return err
	}
	if cd.IsInitial() {
		return core.Errorf("goffload: %s: omp_target_disassociate_ptr: %w: the initial device has no associations", cd.Label(), ErrBadArgument)
	}
	if g, ok := cd.DeclaredAt(b); ok {
		return core.Errorf("goffload: %s: omp_target_disassociate_ptr: %w: the buffer is declare target %s, whose device copy lives until Stop", cd.Label(), ErrBadArgument, g.Describe())
	}
	return cd.Disassociate(b)
}

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
	dp, err := mappedPtrOf(to, dst)
	if err != nil {
		return DevicePtr{}, DevicePtr{}, 0, core.Errorf("goffload: omp_target_memcpy: destination: %w", core.Quote(err))
	}
	sp, err := mappedPtrOf(from, src)
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
