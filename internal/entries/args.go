// A launch's arguments as call values over device memory, checked against
// the kernel's parameters.

package entries

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"unsafe"

	"github.com/goffload/offload/plugin"
)

// ArgValues turns plugin arguments into call values: slices are made over
// device memory by mem, which returns the bytes of a device range (or an
// error if the range is not inside an allocation).
func (k *Kernel) ArgValues(args []plugin.Arg, mem plugin.Mem) ([]reflect.Value, error) {
	if err := plugin.CheckArgs(k, args); err != nil {
		return nil, err
	}
	vals := make([]reflect.Value, len(args))
	for i, p := range k.params {
		a := args[i]
		switch p.Kind {
		case plugin.Scalar:
			vals[i] = reflect.ValueOf(a.Scalar)
		case plugin.Slice:
			ptr, err := k.SliceArg(i, a, mem)
			if err != nil {
				return nil, err
			}
			if ptr == nil || p.Type.Size() == 0 {
				vals[i] = reflect.MakeSlice(reflect.SliceOf(p.Type), a.Len, a.Len)
				continue
			}
			vals[i] = reflect.SliceAt(p.Type, ptr, a.Len)
		}
	}
	return vals, nil
}

// SliceArg returns the device memory that slice argument a of parameter i
// starts at, once plugin.CheckArg has passed it. It returns nil for an
// empty slice with no address, and for elements of size 0. A zero-length
// section inside a mapping keeps its address. The error says mem has no
// such range.
func (k *Kernel) SliceArg(i int, a plugin.Arg, mem plugin.Mem) (unsafe.Pointer, error) {
	p := k.params[i]
	if p.Type.Size() == 0 {
		return nil, nil
	}
	if a.Len == 0 {
		// A zero-length section inside a mapping keeps its device address
		// (mem gives it as a slice with room behind it).
		if a.Ptr != 0 {
			if b, err := mem(a.Ptr, 0); err == nil && cap(b) > 0 && uintptr(unsafe.Pointer(unsafe.SliceData(b)))%uintptr(p.Type.Align()) == 0 {
				return unsafe.Pointer(unsafe.SliceData(b)), nil
			}
		}
		return nil, nil
	}
	if int64(a.Len) > math.MaxInt64/int64(p.Type.Size()) {
		return nil, fmt.Errorf("%w: kernel %q argument %d: %d elements of %s do not fit in memory", plugin.ErrBadPointer, k.name, i, a.Len, p.Type)
	}
	size := int64(a.Len) * int64(p.Type.Size())
	b, err := mem(a.Ptr, size)
	if err != nil {
		return nil, fmt.Errorf("kernel %q argument %d ([]%s, %d elements at %#x): %w", k.name, i, p.Type, a.Len, uint64(a.Ptr), err)
	}
	if uintptr(unsafe.Pointer(&b[0]))%uintptr(p.Type.Align()) != 0 {
		return nil, fmt.Errorf("%w: kernel %q argument %d: device address %#x is not aligned for %s", plugin.ErrBadKernel, k.name, i, uint64(a.Ptr), p.Type)
	}
	return unsafe.Pointer(&b[0]), nil
}

// Describe returns the kernel's parameter list for messages, e.g.
// "(ctx, float32, []float32, []float32)".
func (k *Kernel) Describe() string {
	var parts []string
	if k.hasCtx {
		parts = append(parts, "ctx")
	}
	for _, t := range k.tops {
		parts = append(parts, t.String())
	}
	return "(" + strings.Join(parts, ", ") + ")"
}
