package opencl

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unsafe"

	"github.com/goffload/offload/internal/cldrv"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/gpukind"
)

// argVal is one argument of a launch as the kernel object takes it.
type argVal struct {
	ptr   bool
	svm   uintptr   // a slice's SVM address (ptr, SVM)
	buf   cldrv.Mem // a slice's buffer (ptr, buffers)
	bytes []byte    // a scalar's bytes
}

// packArgs resolves args, checked against k's parameters, into what the
// kernel object takes. Slices become device memory, checked to lie in a live
// allocation. Scalars become their bytes in Go's layout.
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
		if err := d.setArg(kf, i, v); err != nil {
			return fmt.Errorf("argument %d: %w", i, err)
		}
	}
	return nil
}

// setArg sets argument i of the kernel object to v; under kf.mu.
func (d *device) setArg(kf *kernelFn, i int, v argVal) error {
	switch {
	case v.ptr && v.buf != 0:
		return d.lib.SetKernelArg(kf.k, i, unsafe.Sizeof(v.buf), unsafe.Pointer(&v.buf))
	case v.ptr && d.svm:
		return d.lib.SetKernelArgSVM(kf.k, i, v.svm)
	case v.ptr:
		var null cldrv.Mem
		return d.lib.SetKernelArg(kf.k, i, unsafe.Sizeof(null), unsafe.Pointer(&null))
	}
	return d.lib.SetKernelArg(kf.k, i, uintptr(len(v.bytes)), unsafe.Pointer(&v.bytes[0]))
}

// scalarBytes returns v's bytes in Go's layout, which is C's for plain data.
// It returns false if v is not of type t.
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

// clType splits an OpenCL C type name ("float4", "uint") into its scalar type
// and size. ok is false for a type it does not know (a struct).
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

// checkEntry checks k's Go parameters against its entry's (kf.k). It checks
// their count, then each one's kind (pointer or value). Where
// clGetKernelArgInfo names a type the kind knows, it checks its size and
// whether it is a float. It checks the size of every by-value parameter with
// clSetKernelArg, which refuses a size that is not the entry's.
func (d *device) checkEntry(k plugin.Kernel, kf *kernelFn, sizes map[string]int) error {
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
	if hidden := hiddenParams(k, kf); n != len(ps)+hidden {
		if hidden > 0 {
			return fmt.Errorf("generated OpenCL C entry %s has %s, the Go kernel %s and %d hidden ones (slice lengths and a fault record): generate it again (go generate)", kf.entry, gpukind.Plural(n, "parameter"), gpukind.Plural(len(ps), "parameter"), hidden)
		}
		var goTypes []string
		for i := range ps {
			goTypes = append(goTypes, gpukind.GoType(ps[i]))
		}
		which := ""
		if n < len(ps) {
			which = fmt.Sprintf("the Go parameter %s has none in the entry", gpukind.GoParam(k, n))
		} else {
			which = fmt.Sprintf("OpenCL C parameter %d (%s) has no Go parameter", len(ps), types[len(ps)])
		}
		return fmt.Errorf("OpenCL C entry %s has %s (%s); the Go kernel has %s (%s): %s", kf.entry,
			gpukind.Plural(n, "parameter"), strings.Join(types, ", "), gpukind.Plural(len(ps), "parameter"), strings.Join(goTypes, ", "), which)
	}
	kf.ptrs = make([]bool, n)
	for i, p := range ps {
		kf.ptrs[i] = p.Kind == plugin.Slice
		if p.Kind != plugin.Slice && p.Type.Size() == 0 {
			return fmt.Errorf("the Go parameter %s has size 0, and an OpenCL C entry has no parameter of size 0: leave it out", gpukind.GoParam(k, i))
		}
		if info {
			if err := checkArg(k, i, kf.entry, types[i], quals[i], sizes); err != nil {
				return err
			}
		}
		if p.Kind != plugin.Slice {
			zero := make([]byte, p.Type.Size())
			if err := d.lib.SetKernelArg(kf.k, i, uintptr(len(zero)), unsafe.Pointer(&zero[0])); cldrv.Code(err) == cldrv.InvalidArgSize {
				return fmt.Errorf("OpenCL C entry %s parameter %d is %s, whose size is not the %s of the Go parameter %s (clSetKernelArg: %v): declare it %s",
					kf.entry, i, types[i], gpukind.Plural(len(zero), "byte"), gpukind.GoParam(k, i), err, openCL.Decl(p))
			}
		}
	}
	return nil
}

// checkArg checks k's parameter i against its entry's, of type cl in address
// space qual (from the argument info). It checks pointer or value, and the
// size of a value or of a pointer's elements. (sizes has those of structs and
// typedefs.) It checks whether they are floats.
func checkArg(k plugin.Kernel, i int, entry, cl string, qual uint32, sizes map[string]int) error {
	p := k.Params()[i]
	side := fmt.Sprintf("OpenCL C entry %s parameter %d is %s", entry, i, cl)
	fix := fmt.Sprintf("declare it %s, or take %s in Go", openCL.Decl(p), goFor(cl))
	isPtr := strings.HasSuffix(cl, "*")
	switch {
	case qual == cldrv.AddressLocal:
		return fmt.Errorf("%s, a local pointer: the kind passes only global pointers and values", side)
	case p.Kind == plugin.Slice && (!isPtr || qual == cldrv.AddressPrivate):
		return fmt.Errorf("%s, a value; the Go parameter %s is a slice, which the kind passes as a global pointer: %s", side, gpukind.GoParam(k, i), fix)
	case p.Kind != plugin.Slice && isPtr:
		return fmt.Errorf("%s, a pointer; the Go parameter %s is a value: %s", side, gpukind.GoParam(k, i), fix)
	}
	scalar, size, ok := clType(elemType(cl))
	if !ok {
		if size, ok := sizes[elemType(cl)]; ok && size != int(p.Type.Size()) {
			return sizeMismatch(k, i, entry, cl, size)
		}
		return nil // a struct as big as the Go type, or one the probe could not measure
	}
	goSize := int(p.Type.Size())
	float := scalar == "float" || scalar == "double" || scalar == "half"
	var clIs, goIs, clElems, goElems string // of a value; of a pointer's and a slice's elements
	switch {
	case size != goSize:
		clIs, goIs = gpukind.Plural(size, "byte"), gpukind.Plural(goSize, "byte")
		clElems, goElems = clIs, "of "+goIs
	case float && !isFloatType(p.Type):
		clIs, goIs, clElems, goElems = "a float", "an integer", "floats", "that are integers"
	case !float && isFloatType(p.Type):
		clIs, goIs, clElems, goElems = "an integer", "a float", "integers", "that are floats"
	default:
		return nil
	}
	if p.Kind == plugin.Slice {
		return fmt.Errorf("%s, whose elements are %s; the Go parameter %s has elements %s: %s", side, clElems, gpukind.GoParam(k, i), goElems, fix)
	}
	return fmt.Errorf("%s, %s; the Go parameter %s is %s: %s", side, clIs, gpukind.GoParam(k, i), goIs, fix)
}

// sizeMismatch is the error of k's parameter i, whose Go type's size is not
// that of the entry's type cl. cl is a struct or a typedef, of size bytes.
func sizeMismatch(k plugin.Kernel, i int, entry, cl string, size int) error {
	p := k.Params()[i]
	t := elemType(cl)
	goSize := gpukind.Plural(int(p.Type.Size()), "byte")
	fix := fmt.Sprintf("make the Go type match %s: the same size, and a struct's fields in the same order", t)
	if p.Kind == plugin.Slice {
		return fmt.Errorf("OpenCL C entry %s parameter %d is %s, whose elements are %s (sizeof(%s)); the Go parameter %s has elements of %s: %s",
			entry, i, cl, gpukind.Plural(size, "byte"), t, gpukind.GoParam(k, i), goSize, fix)
	}
	return fmt.Errorf("OpenCL C entry %s parameter %d is %s, %s; the Go parameter %s is %s: %s",
		entry, i, cl, gpukind.Plural(size, "byte"), gpukind.GoParam(k, i), goSize, fix)
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

// openCL is how an OpenCL C entry declares parameters.
var openCL = gpukind.Dialect{
	Types: map[reflect.Kind]string{
		reflect.Int8: "char", reflect.Bool: "uchar", reflect.Uint8: "uchar", // OpenCL C has no bool parameters
		reflect.Int16: "short", reflect.Uint16: "ushort",
		reflect.Int32: "int", reflect.Uint32: "uint", reflect.Float32: "float",
		reflect.Int: "long", reflect.Int64: "long", // Go's int is 64 bits
		reflect.Uint: "ulong", reflect.Uint64: "ulong", reflect.Uintptr: "ulong",
		reflect.Float64: "double", reflect.Complex64: "float2", reflect.Complex128: "double2",
	},
	Pointer: func(elem string) string {
		if elem == "" {
			return "a global pointer to structs"
		}
		return "global " + elem + " *"
	},
}

// goFor says what Go type takes an OpenCL C parameter of type cl. Examples:
// "int32", "[]float32", "[4]float32" (a float4), "a Go struct with P5's
// fields".
func goFor(cl string) string {
	elem := elemType(cl)
	scalar, size, ok := clType(elem)
	var g string
	switch {
	case !ok:
		g = "a Go struct with " + elem + "'s fields"
		if strings.HasSuffix(cl, "*") {
			return "a slice of " + g
		}
		return g
	case size != clSizes[scalar]: // a vector
		g = fmt.Sprintf("[%d]%s", size/clSizes[scalar], goScalars[scalar][0])
	default:
		g = strings.Join(goScalars[scalar], " or ")
	}
	if strings.HasSuffix(cl, "*") {
		if alts := goScalars[scalar]; ok && size == clSizes[scalar] && len(alts) > 1 {
			return "[]" + alts[0] + " or []" + alts[1]
		}
		return "[]" + g
	}
	return g
}

// goScalars are the Go types of OpenCL C's scalar types, the usual first.
var goScalars = map[string][]string{
	"char": {"int8"}, "uchar": {"uint8", "bool"}, "short": {"int16"}, "ushort": {"uint16"},
	"int": {"int32"}, "uint": {"uint32"}, "long": {"int", "int64"}, "ulong": {"uint64", "uint"},
	"float": {"float32"}, "double": {"float64"}, "half": {"uint16"}, "bool": {"bool"},
	"unsigned char": {"uint8", "bool"}, "unsigned short": {"uint16"}, "unsigned int": {"uint32"}, "unsigned long": {"uint64", "uint"},
}
