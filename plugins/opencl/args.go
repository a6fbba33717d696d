package opencl

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unsafe"

	"github.com/goffload/offload/internal/cldrv"
	"github.com/goffload/offload/plugin"
)

// argVal is one argument of a launch as the kernel object takes it.
type argVal struct {
	ptr   bool
	svm   uintptr   // a slice's SVM address (ptr, SVM)
	buf   cldrv.Mem // a slice's buffer (ptr, buffers)
	bytes []byte    // a scalar's bytes
}

// packArgs resolves args, checked against k's parameters, into what the
// kernel object takes: slices as device memory (checked to lie in a live
// allocation), scalars as their bytes in Go's layout.
func (d *device) packArgs(k plugin.Kernel, args []plugin.Arg) ([]argVal, error) {
	if err := plugin.CheckArgs(k, args); err != nil {
		return nil, err
	}
	out := make([]argVal, len(args))
	for i, p := range k.Params() {
		a := args[i]
		if p.Kind != plugin.Slice {
			b, ok := scalarBytes(p.Type, a.Scalar)
			if !ok {
				return nil, plugin.CheckArg(k, i, a)
			}
			out[i] = argVal{bytes: b}
			continue
		}
		out[i].ptr = true
		if a.Len == 0 {
			if _, _, err := d.mem.find(a.Ptr, 0); err != nil {
				continue // an empty slice with no address: NULL
			}
		}
		size := int64(a.Len) * int64(p.Type.Size())
		if a.Len > 0 && size/int64(a.Len) != int64(p.Type.Size()) {
			return nil, fmt.Errorf("%w: kernel %q argument %d: %d elements of %s do not fit in memory", plugin.ErrBadPointer, k.Name(), i, a.Len, p.Type)
		}
		al, off, err := d.mem.find(a.Ptr, size)
		if err != nil {
			return nil, fmt.Errorf("kernel %q argument %d ([]%s, %d elements at %#x): %w", k.Name(), i, p.Type, a.Len, uint64(a.Ptr), err)
		}
		if al.buf == 0 {
			out[i].svm = uintptr(a.Ptr)
			continue
		}
		if out[i].buf, err = d.mem.argBuffer(d, al, off); err != nil {
			return nil, fmt.Errorf("%w: kernel %q argument %d ([]%s, %d elements at %#x): %w", plugin.ErrBadKernel, k.Name(), i, p.Type, a.Len, uint64(a.Ptr), err)
		}
	}
	return out, nil
}

// setArgs sets the kernel object's arguments; under kf.mu.
func (d *device) setArgs(kf *kernelFn, vals []argVal) error {
	for i, v := range vals {
		var err error
		switch {
		case v.ptr && v.buf != 0:
			err = d.lib.SetKernelArg(kf.k, i, unsafe.Sizeof(v.buf), unsafe.Pointer(&v.buf))
		case v.ptr && d.svm:
			err = d.lib.SetKernelArgSVM(kf.k, i, v.svm)
		case v.ptr:
			var null cldrv.Mem
			err = d.lib.SetKernelArg(kf.k, i, unsafe.Sizeof(null), unsafe.Pointer(&null))
		default:
			err = d.lib.SetKernelArg(kf.k, i, uintptr(len(v.bytes)), unsafe.Pointer(&v.bytes[0]))
		}
		if err != nil {
			return fmt.Errorf("argument %d: %w", i, err)
		}
	}
	return nil
}

// scalarBytes returns v's bytes in Go's layout (which is C's for plain
// data); false if v is not of type t.
func scalarBytes(t reflect.Type, v any) ([]byte, bool) {
	rv := reflect.ValueOf(v)
	if !rv.IsValid() || rv.Type() != t || t.Size() == 0 {
		return nil, false
	}
	c := reflect.New(t)
	c.Elem().Set(rv)
	return append([]byte(nil), unsafe.Slice((*byte)(c.UnsafePointer()), t.Size())...), true
}

// clSizes are the sizes of OpenCL C's scalar types.
var clSizes = map[string]int{
	"char": 1, "uchar": 1, "short": 2, "ushort": 2, "int": 4, "uint": 4, "long": 8, "ulong": 8,
	"float": 4, "double": 8, "half": 2, "bool": 1,
	"unsigned char": 1, "unsigned short": 2, "unsigned int": 4, "unsigned long": 8,
}

// clType splits an OpenCL C type name ("float4", "uint") into its scalar
// type and size; ok false for a type it does not know (a struct).
func clType(name string) (scalar string, size int, ok bool) {
	name = strings.TrimSpace(strings.TrimPrefix(strings.TrimPrefix(name, "const "), "volatile "))
	if s, ok := clSizes[name]; ok {
		return name, s, true
	}
	for _, n := range []int{16, 8, 4, 3, 2} {
		suf := strconv.Itoa(n)
		if base, found := strings.CutSuffix(name, suf); found {
			if s, ok := clSizes[base]; ok {
				if n == 3 {
					n = 4 // a 3-vector takes a 4-vector's room
				}
				return base, s * n, true
			}
		}
	}
	return "", 0, false
}

// checkEntry checks k's Go parameters against its entry's (kf.k):
// their count, then each one's kind (pointer or value), and where
// clGetKernelArgInfo names a type the kind knows, its size and whether it
// is a float; and the size of every by-value parameter with clSetKernelArg
// (which refuses a size that is not the entry's).
func (d *device) checkEntry(k plugin.Kernel, kf *kernelFn) error {
	ps := k.Params()
	n, err := d.lib.KernelNumArgs(kf.k)
	if err != nil {
		return err
	}
	types := make([]string, n)
	quals := make([]uint32, n)
	info := true
	for i := range n {
		types[i], err = d.lib.KernelArgString(kf.k, i, cldrv.KernelArgTypeName)
		if err == nil {
			quals[i], err = d.lib.KernelArgUint(kf.k, i, cldrv.KernelArgAddressQual)
		}
		if err != nil {
			info = false // a driver without argument info: sizes only
		}
	}
	if hidden := hiddenParams(k, kf.gen); n != len(ps)+hidden {
		if hidden > 0 {
			return fmt.Errorf("generated OpenCL C entry %s has %s, the Go kernel %s and %d hidden ones (slice lengths and a fault record): generate it again (go generate)", kf.entry, plural(n, "parameter"), plural(len(ps), "parameter"), hidden)
		}
		var goTypes []string
		for i := range ps {
			goTypes = append(goTypes, goType(ps[i]))
		}
		which := ""
		if n < len(ps) {
			which = fmt.Sprintf("the Go parameter %s has none in the entry", goParam(k, n))
		} else {
			which = fmt.Sprintf("OpenCL C parameter %d (%s) has no Go parameter", len(ps), types[len(ps)])
		}
		return fmt.Errorf("OpenCL C entry %s has %s (%s), the Go kernel %s (%s): %s", kf.entry,
			plural(n, "parameter"), strings.Join(types, ", "), plural(len(ps), "parameter"), strings.Join(goTypes, ", "), which)
	}
	kf.ptrs = make([]bool, n)
	for i, p := range ps {
		cl := types[i]
		side := fmt.Sprintf("OpenCL C entry %s parameter %d is %s", kf.entry, i, cl)
		mismatch := func(goSide string) error {
			return fmt.Errorf("%s, the Go parameter %s %s: declare it %s (or take %s in Go)", side, goParam(k, i), goSide, clDecl(p), goFor(cl))
		}
		isPtr := strings.HasSuffix(cl, "*")
		kf.ptrs[i] = p.Kind == plugin.Slice
		if info {
			switch {
			case quals[i] == cldrv.AddressLocal:
				return fmt.Errorf("%s, a __local parameter: the kind passes only __global pointers and values", side)
			case p.Kind == plugin.Slice && (!isPtr || quals[i] == cldrv.AddressPrivate):
				return mismatch("is a slice, a __global pointer")
			case p.Kind != plugin.Slice && isPtr:
				return mismatch(fmt.Sprintf("is a %s by value", goType(p)))
			}
			elem := strings.TrimSuffix(cl, "*")
			if scalar, size, ok := clType(elem); ok {
				goSize := int(p.Type.Size())
				what := "its elements are"
				if p.Kind != plugin.Slice {
					what = "it is"
				}
				float := scalar == "float" || scalar == "double" || scalar == "half"
				switch {
				case size != goSize:
					return mismatch(fmt.Sprintf("%s %s", what, plural(goSize, "byte")))
				case float && !isFloatType(p.Type):
					return mismatch(fmt.Sprintf("%s not floats", what))
				case !float && isFloatType(p.Type):
					return mismatch(fmt.Sprintf("%s floats", what))
				}
			}
		}
		if p.Kind != plugin.Slice {
			zero := make([]byte, p.Type.Size())
			if len(zero) == 0 {
				return fmt.Errorf("the Go parameter %s has size 0: an OpenCL C entry has no parameter of size 0", goParam(k, i))
			}
			if err := d.lib.SetKernelArg(kf.k, i, uintptr(len(zero)), unsafe.Pointer(&zero[0])); cldrv.Code(err) == cldrv.InvalidArgSize {
				return fmt.Errorf("%s, whose size is not the Go parameter %s's %s (%v): declare it %s", side, goParam(k, i), plural(len(zero), "byte"), err, clDecl(p))
			}
		}
	}
	return nil
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

func isFloatType(t reflect.Type) bool {
	for t.Kind() == reflect.Array {
		t = t.Elem() // an array of floats is a vector of them
	}
	switch t.Kind() {
	case reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return true
	}
	return false
}

// goType names p's Go type: a slice's own type (offload.In[float32]).
func goType(p plugin.Param) string {
	switch {
	case p.Kind == plugin.Slice && p.SliceType != nil:
		return p.SliceType.String()
	case p.Kind == plugin.Slice && p.Type != nil:
		return "[]" + p.Type.String()
	case p.Type != nil:
		return p.Type.String()
	}
	return "?"
}

// goParam names k's parameter i, as the cuda kind's errors do.
func goParam(k plugin.Kernel, i int) string {
	p := k.Params()[i]
	if p.Field >= 0 {
		if t := p.Struct; t != nil && t.Kind() == reflect.Struct && p.Field < t.NumField() {
			return fmt.Sprintf("%d (field %s %s of parameter %d, a %s)", i, t.Field(p.Field).Name, goType(p), p.Top, t)
		}
	}
	return fmt.Sprintf("%d (%s)", i, goType(p))
}

// clTypes are the OpenCL C types of Go's basic kinds.
var clTypes = map[reflect.Kind]string{
	reflect.Bool: "uchar", reflect.Int8: "char", reflect.Uint8: "uchar",
	reflect.Int16: "short", reflect.Uint16: "ushort", reflect.Int32: "int", reflect.Uint32: "uint",
	reflect.Int: "long", reflect.Int64: "long", reflect.Uint: "ulong", reflect.Uint64: "ulong",
	reflect.Uintptr: "ulong", reflect.Float32: "float", reflect.Float64: "double",
	reflect.Complex64: "float2", reflect.Complex128: "double2",
}

// clDecl says how an OpenCL C entry declares a parameter that takes p.
func clDecl(p plugin.Param) string {
	if p.Type == nil {
		return "as the Go parameter"
	}
	if p.Kind == plugin.Slice {
		if c, ok := clTypes[p.Type.Kind()]; ok {
			return "global " + c + " *"
		}
		return "a global pointer to a struct of the same layout"
	}
	if c, ok := clTypes[p.Type.Kind()]; ok {
		return c
	}
	if p.Type.Kind() == reflect.Array {
		if c, ok := clTypes[p.Type.Elem().Kind()]; ok {
			return fmt.Sprintf("a struct holding %s[%d]", c, p.Type.Len())
		}
	}
	return fmt.Sprintf("a struct of the same fields (%s, aligned %d)", plural(int(p.Type.Size()), "byte"), p.Type.Align())
}

// goFor says what Go type takes an OpenCL C parameter of type cl.
func goFor(cl string) string {
	if strings.HasSuffix(cl, "*") {
		return "a slice of " + strings.TrimSuffix(cl, "*") + "'s Go type"
	}
	scalar, size, ok := clType(cl)
	if !ok {
		return "a struct of the same layout"
	}
	if size != clSizes[scalar] {
		return fmt.Sprintf("an array or struct of %s", plural(size, "byte"))
	}
	gos := map[string]string{"char": "int8", "uchar": "uint8 or bool", "short": "int16", "ushort": "uint16",
		"int": "int32", "uint": "uint32", "long": "int or int64", "ulong": "uint or uint64",
		"float": "float32", "double": "float64", "half": "uint16 (its bits)"}
	if g, ok := gos[scalar]; ok {
		return g
	}
	return fmt.Sprintf("a type of %s", plural(size, "byte"))
}
