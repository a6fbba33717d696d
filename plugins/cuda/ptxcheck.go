package cuda

import (
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/goffload/offload/internal/cudadrv"
	"github.com/goffload/offload/internal/ptx"
	"github.com/goffload/offload/plugin"
)

// The check of a kernel's Go parameters against its PTX entry's, when the
// device loads the image. cuLaunchKernel reads each parameter's bytes from
// its pointer at the size the entry declares, so a kernel whose .cu file
// declares `int n` where the Go kernel takes an int (8 bytes) would run on
// garbage; the check makes that a launch error naming both sides.

// checkEntry checks k's parameters, as pack lays them out (paramLayout),
// against params, those of its PTX entry: the counts, then each
// parameter's size, alignment, and float or integer kind.
//
// The alignments must match too, but for an array parameter (a struct or
// vector by value) aligned more strictly than the Go type: CUDA's float2,
// float4, double2 and cuComplex types are aligned 8 or 16, which Go cannot
// declare, and the driver copies each parameter's bytes into its aligned
// place, so the value arrives whole.
func checkEntry(k plugin.Kernel, entry string, params []ptx.Param) error {
	if len(params) != len(k.Params()) {
		var goTypes, ptxTypes []string
		for i := range k.Params() {
			goTypes = append(goTypes, goType(k.Params()[i]))
		}
		for _, p := range params {
			ptxTypes = append(ptxTypes, p.Type)
		}
		which := ""
		if n := len(params); n < len(k.Params()) {
			which = fmt.Sprintf("the Go parameter %s has none in the entry", goParam(k, n))
		} else {
			n := len(k.Params())
			which = fmt.Sprintf("PTX parameter %d (%s) has no Go parameter", n, params[n].Type)
		}
		return fmt.Errorf("PTX entry %s has %s (%s), the Go kernel %s (%s): %s",
			entry, plural(len(params), "parameter"), strings.Join(ptxTypes, ", "),
			plural(len(k.Params()), "parameter"), strings.Join(goTypes, ", "), which)
	}
	for i, gp := range k.Params() {
		p := params[i]
		size, align := paramLayout(gp)
		ptxSide := fmt.Sprintf("PTX entry %s parameter %d is %s (%s, align %d)", entry, i, p.Type, plural(p.Size, "byte"), p.Align)
		goSide := fmt.Sprintf("the Go parameter %s is %s, align %d", goParam(k, i), plural(size, "byte"), align)
		switch {
		case size != p.Size:
		case align != p.Align && !(p.Count > 0 && p.Align > align):
		case (p.Elem == ".f32" || p.Elem == ".f64") && p.Count == 0 && !isFloat(gp):
			ptxSide = fmt.Sprintf("PTX entry %s parameter %d is %s, a float", entry, i, p.Type)
			goSide = fmt.Sprintf("the Go parameter %s is not", goParam(k, i))
		case p.Integer() && isFloat(gp):
			ptxSide = fmt.Sprintf("PTX entry %s parameter %d is %s, an integer", entry, i, p.Type)
			goSide = fmt.Sprintf("the Go parameter %s is a float", goParam(k, i))
		default:
			continue
		}
		return fmt.Errorf("%s, %s: declare it %s (or take %s in Go)", ptxSide, goSide, cDecl(gp), goFor(p))
	}
	return nil
}

// noEntry adds to err, the driver's for an entry the image has not, the
// entries it has, and a hint if one of them is the entry's name mangled
// (a .cu function not declared extern "C").
func noEntry(err error, entry string, entries map[string][]ptx.Param) error {
	if entries == nil || cudadrv.Code(err) != cudadrv.ErrNotFound {
		return err
	}
	names := make([]string, 0, len(entries))
	mangled := ""
	for name := range entries {
		names = append(names, name)
		if strings.HasPrefix(name, "_Z"+strconv.Itoa(len(entry))+entry) {
			mangled = name
		}
	}
	sort.Strings(names)
	if len(names) > 10 {
		names = append(names[:10], "…")
	}
	has := "has no entries"
	if len(names) > 0 {
		has = "has entries " + strings.Join(names, ", ")
	}
	if mangled != "" {
		return fmt.Errorf("%w (the PTX %s: is %s the C++ name of %s? declare it extern \"C\" in the .cu file)", err, has, mangled, entry)
	}
	return fmt.Errorf("%w (the PTX %s)", err, has)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

func isFloat(p plugin.Param) bool {
	if p.Kind != plugin.Scalar || p.Type == nil {
		return false
	}
	k := p.Type.Kind()
	return k == reflect.Float32 || k == reflect.Float64
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

// goParam names k's parameter i: "2 (offload.In[float32])", or for a field
// of a struct parameter "3 (field Scale float32 of parameter 1)".
func goParam(k plugin.Kernel, i int) string {
	p := k.Params()[i]
	if p.Field >= 0 {
		if t := p.Struct; t != nil && t.Kind() == reflect.Struct && p.Field < t.NumField() {
			return fmt.Sprintf("%d (field %s %s of parameter %d, a %s)", i, t.Field(p.Field).Name, goType(p), p.Top, t)
		}
	}
	return fmt.Sprintf("%d (%s)", i, goType(p))
}

// cTypes are the C types of Go's basic kinds.
var cTypes = map[reflect.Kind]string{
	reflect.Bool: "bool", reflect.Int8: "signed char", reflect.Uint8: "unsigned char",
	reflect.Int16: "short", reflect.Uint16: "unsigned short", reflect.Int32: "int", reflect.Uint32: "unsigned int",
	reflect.Int: "long long", reflect.Int64: "long long", reflect.Uint: "unsigned long long", reflect.Uint64: "unsigned long long",
	reflect.Uintptr: "unsigned long long", reflect.Float32: "float", reflect.Float64: "double",
	reflect.Complex64: "cuFloatComplex (float2)", reflect.Complex128: "cuDoubleComplex (double2)",
}

// cDecl says how a .cu file declares a parameter that takes p.
func cDecl(p plugin.Param) string {
	if p.Type == nil {
		return "as the Go parameter"
	}
	if p.Kind == plugin.Slice {
		if c, ok := cTypes[p.Type.Kind()]; ok {
			c, _, _ = strings.Cut(c, " (")
			return c + " *"
		}
		return "a pointer"
	}
	t := p.Type
	if c, ok := cTypes[t.Kind()]; ok {
		return c
	}
	if t.Kind() == reflect.Array {
		if c, ok := cTypes[t.Elem().Kind()]; ok {
			return fmt.Sprintf("a struct holding %s[%d]", c, t.Len())
		}
	}
	return fmt.Sprintf("a struct of the same fields (%s, aligned %d)", plural(int(t.Size()), "byte"), t.Align())
}

// goTypes are the Go types for PTX's scalar types.
var goTypes = map[string]string{
	".u8": "int8, uint8 or bool", ".s8": "int8", ".b8": "uint8",
	".u16": "int16 or uint16", ".s16": "int16", ".b16": "int16 or uint16", ".f16": "uint16 (its bits)", ".bf16": "uint16 (its bits)",
	".u32": "int32 or uint32", ".s32": "int32", ".b32": "int32, uint32 or float32", ".f32": "float32",
	".u64": "int, int64, uint64 or a slice", ".s64": "int or int64", ".b64": "int64, uint64 or a slice", ".f64": "float64",
}

// goFor says what Go type takes p.
func goFor(p ptx.Param) string {
	switch {
	case p.Ptr:
		return "a slice"
	case p.Count > 0:
		return fmt.Sprintf("an array or struct of %s aligned %d", plural(p.Size, "byte"), p.Align)
	}
	if t, ok := goTypes[p.Elem]; ok {
		return t
	}
	return fmt.Sprintf("a type of %s aligned %d", plural(p.Size, "byte"), p.Align)
}
