package proto

import (
	"encoding/binary"
	"fmt"
	"math"
	"reflect"
	"unsafe"

	"github.com/goffload/offload/plugin"
)

// AppendArgs encodes a launch's arguments for kernel k. Each scalar goes as
// its fields in order, little-endian, with no padding. bool is one byte, int
// and uint are 8 bytes, and complex is two floats. Each slice goes as address
// and length (8 bytes each). The encoding does not depend on the
// architecture. The arguments are checked first (plugin.CheckArgs).
func AppendArgs(b []byte, k plugin.Kernel, args []plugin.Arg) ([]byte, error) {
	if err := plugin.CheckArgs(k, args); err != nil {
		return nil, err
	}
	for i, p := range k.Params() {
		a := args[i]
		if p.Kind == plugin.Slice {
			b = binary.LittleEndian.AppendUint64(b, uint64(a.Ptr))
			b = binary.LittleEndian.AppendUint64(b, uint64(a.Len))
			continue
		}
		b = appendValue(b, reflect.ValueOf(a.Scalar))
	}
	return b, nil
}

func appendValue(b []byte, v reflect.Value) []byte {
	le := binary.LittleEndian
	switch v.Kind() {
	case reflect.Bool:
		if v.Bool() {
			return append(b, 1)
		}
		return append(b, 0)
	case reflect.Int8:
		return append(b, byte(v.Int()))
	case reflect.Int16:
		return le.AppendUint16(b, uint16(v.Int()))
	case reflect.Int32:
		return le.AppendUint32(b, uint32(v.Int()))
	case reflect.Int64, reflect.Int:
		return le.AppendUint64(b, uint64(v.Int()))
	case reflect.Uint8:
		return append(b, byte(v.Uint()))
	case reflect.Uint16:
		return le.AppendUint16(b, uint16(v.Uint()))
	case reflect.Uint32:
		return le.AppendUint32(b, uint32(v.Uint()))
	case reflect.Uint64, reflect.Uint, reflect.Uintptr:
		return le.AppendUint64(b, v.Uint())
	case reflect.Float32:
		return le.AppendUint32(b, math.Float32bits(float32(v.Float())))
	case reflect.Float64:
		return le.AppendUint64(b, math.Float64bits(v.Float()))
	case reflect.Complex64:
		c := v.Complex()
		b = le.AppendUint32(b, math.Float32bits(float32(real(c))))
		return le.AppendUint32(b, math.Float32bits(float32(imag(c))))
	case reflect.Complex128:
		c := v.Complex()
		b = le.AppendUint64(b, math.Float64bits(real(c)))
		return le.AppendUint64(b, math.Float64bits(imag(c)))
	case reflect.Array:
		for i := 0; i < v.Len(); i++ {
			b = appendValue(b, v.Index(i))
		}
		return b
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			b = appendValue(b, v.Field(i))
		}
		return b
	}
	panic(fmt.Sprintf("proto: %s is not plain data", v.Type())) // RegisterKernel refused it already
}

// DecodeArgs decodes the arguments AppendArgs encoded for k. Input from the
// wire is untrusted: it fails on a short or long buffer and never panics.
func DecodeArgs(b []byte, k plugin.Kernel) ([]plugin.Arg, error) {
	d := decoder{b: b}
	args := make([]plugin.Arg, len(k.Params()))
	for i, p := range k.Params() {
		if p.Kind == plugin.Slice {
			ptr, n := d.u64(), d.u64()
			if n > math.MaxInt32*64 {
				d.fail("slice length %d", n)
			}
			args[i] = plugin.Arg{Ptr: plugin.Ptr(ptr), Len: int(n)}
			continue
		}
		v := reflect.New(p.Type).Elem()
		d.value(v)
		args[i].Scalar = v.Interface()
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d bytes left over", len(d.b))
	}
	if d.err != nil {
		return nil, fmt.Errorf("%w: arguments of kernel %q: %v", ErrFrame, k.Name(), d.err)
	}
	return args, nil
}

type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, a ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format, a...)
	}
	d.b = nil
}

func (d *decoder) take(n int) []byte {
	if d.err != nil || len(d.b) < n {
		d.fail("arguments cut short")
		return make([]byte, n)
	}
	s := d.b[:n]
	d.b = d.b[n:]
	return s
}

func (d *decoder) u64() uint64 { return binary.LittleEndian.Uint64(d.take(8)) }

func (d *decoder) value(v reflect.Value) {
	le := binary.LittleEndian
	switch v.Kind() {
	case reflect.Bool:
		switch c := d.take(1)[0]; c {
		case 0, 1:
			v.SetBool(c == 1)
		default:
			d.fail("bool byte %d", c)
		}
	case reflect.Int8:
		v.SetInt(int64(int8(d.take(1)[0])))
	case reflect.Int16:
		v.SetInt(int64(int16(le.Uint16(d.take(2)))))
	case reflect.Int32:
		v.SetInt(int64(int32(le.Uint32(d.take(4)))))
	case reflect.Int64, reflect.Int:
		x := int64(d.u64())
		if v.OverflowInt(x) {
			d.fail("%d overflows %s", x, v.Type())
			return
		}
		v.SetInt(x)
	case reflect.Uint8:
		v.SetUint(uint64(d.take(1)[0]))
	case reflect.Uint16:
		v.SetUint(uint64(le.Uint16(d.take(2))))
	case reflect.Uint32:
		v.SetUint(uint64(le.Uint32(d.take(4))))
	case reflect.Uint64, reflect.Uint, reflect.Uintptr:
		x := d.u64()
		if v.OverflowUint(x) {
			d.fail("%d overflows %s", x, v.Type())
			return
		}
		v.SetUint(x)
	case reflect.Float32:
		v.SetFloat(float64(math.Float32frombits(le.Uint32(d.take(4)))))
	case reflect.Float64:
		v.SetFloat(math.Float64frombits(d.u64()))
	case reflect.Complex64:
		re := math.Float32frombits(le.Uint32(d.take(4)))
		im := math.Float32frombits(le.Uint32(d.take(4)))
		v.SetComplex(complex(float64(re), float64(im)))
	case reflect.Complex128:
		re := math.Float64frombits(d.u64())
		im := math.Float64frombits(d.u64())
		v.SetComplex(complex(re, im))
	case reflect.Array:
		for i := 0; i < v.Len() && d.err == nil; i++ {
			d.value(v.Index(i))
		}
	case reflect.Struct:
		for i := 0; i < v.NumField() && d.err == nil; i++ {
			f := v.Field(i)
			if !f.CanSet() { // an unexported field of an addressable struct
				f = reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Elem()
			}
			d.value(f)
		}
	default:
		d.fail("%s is not plain data", v.Type())
	}
}
