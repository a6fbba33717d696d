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
	"github.com/goffload/offload/plugin/gpukind"
)

// This is the check of a kernel's Go parameters against its PTX entry's, when
// the device loads the image. cuLaunchKernel reads each parameter's bytes
// from its pointer at the size the entry declares. So a kernel whose .cu file
// declares `int n` where the Go kernel takes an int (8 bytes) would run on
// garbage. The check makes that a launch error naming both sides.

// checkEntry checks k's parameters, as pack lays them out (paramLayout),
// against params, those of its PTX entry. It checks the counts, then each
// parameter's size, alignment, and float or integer kind.
//
// The alignments must match too, but for one case. An array parameter (a
// struct or vector by value) may be aligned more strictly than the Go type.
// CUDA's float2, float4, double2 and cuComplex types are aligned 8 or 16,
// which Go cannot declare. The driver copies each parameter's bytes into its
// aligned place, so the value arrives whole.
func checkEntry(k plugin.Kernel, entry string, params []ptx.Param) (offsets int, err error) {
	if offsets = offsetParams(params[min(len(k.Params()), len(params)):]); offsets > 0 {
		params = params[:len(k.Params())]
	}
	if len(params) != len(k.Params()) {
		var goTypes, ptxTypes []string
		for i := range k.Params() {
			goTypes = append(goTypes, gpukind.GoType(k.Params()[i]))
		}
		for _, p := range params {
			ptxTypes = append(ptxTypes, p.Type)
		}
		which := ""
		if n := len(params); n < len(k.Params()) {
			which = fmt.Sprintf("the Go parameter %s has none in the entry", gpukind.GoParam(k, n))
		} else {
			n := len(k.Params())
			which = fmt.Sprintf("PTX parameter %d (%s) has no Go parameter (after the Go parameters an entry may take only the global offset: one or three 64-bit integers)", n, params[n].Type)
		}
		return 0, fmt.Errorf("PTX entry %s has %s (%s); the Go kernel has %s (%s): %s",
			entry, gpukind.Plural(len(params), "parameter"), strings.Join(ptxTypes, ", "),
			gpukind.Plural(len(k.Params()), "parameter"), strings.Join(goTypes, ", "), which)
	}
	for i, gp := range k.Params() {
		if err := checkParam(k, entry, i, gp, params[i]); err != nil {
			return 0, err
		}
	}
	return offsets, nil
}

// checkParam checks k's parameter i, gp, against p, its PTX entry's.
func checkParam(k plugin.Kernel, entry string, i int, gp plugin.Param, p ptx.Param) error {
	size, align := paramLayout(gp)
	ptxSide := fmt.Sprintf("PTX entry %s parameter %d is %s (%s, align %d)", entry, i, p.Type, gpukind.Plural(p.Size, "byte"), p.Align)
	goSide := fmt.Sprintf("the Go parameter %s is %s, align %d", gpukind.GoParam(k, i), gpukind.Plural(size, "byte"), align)
	switch {
	case size != p.Size:
	case align != p.Align && !(p.Count > 0 && p.Align > align):
	case gp.Kind == plugin.Slice && p.Ptr && p.PtrAlign > 1 && int(gp.Type.Size())%p.PtrAlign != 0:
		return fmt.Errorf("PTX entry %s parameter %d is %s, a pointer to memory aligned %d; the Go parameter %s has elements of %s, which cannot all be aligned %d: give them the .cu file's element type (a multiple of %s)",
			entry, i, p.Type, p.PtrAlign, gpukind.GoParam(k, i), gpukind.Plural(int(gp.Type.Size()), "byte"), p.PtrAlign, gpukind.Plural(p.PtrAlign, "byte"))
	case (p.Elem == ".f32" || p.Elem == ".f64") && p.Count == 0 && !isFloat(gp):
		ptxSide = fmt.Sprintf("PTX entry %s parameter %d is %s, a float", entry, i, p.Type)
		goSide = fmt.Sprintf("the Go parameter %s is not a float", gpukind.GoParam(k, i))
		if isInteger(gp) {
			goSide = fmt.Sprintf("the Go parameter %s is an integer", gpukind.GoParam(k, i))
		}
	case p.Integer() && isFloat(gp):
		ptxSide = fmt.Sprintf("PTX entry %s parameter %d is %s, an integer", entry, i, p.Type)
		goSide = fmt.Sprintf("the Go parameter %s is a float", gpukind.GoParam(k, i))
	default:
		return nil
	}
	return fmt.Errorf("%s; %s: declare it %s in the .cu file, or take %s in Go", ptxSide, goSide, cuda.Decl(gp), goFor(p))
}

// checkGenerated checks the parameters of generated PTX's entry against k's
// and the hidden 64-bit ones gen says. The entry's are the kernel's, then
// hidden ones (gpukind.GenCode).
func checkGenerated(k plugin.Kernel, entry string, gen *gpukind.GenCode, params []ptx.Param) error {
	hidden := gen.Hidden(k)
	if len(params) != len(k.Params())+hidden {
		return fmt.Errorf("generated PTX entry %s has %s, the Go kernel %s and %d hidden ones (slice lengths, declare target variables, the device number and a fault record): generate it again (go generate)",
			entry, gpukind.Plural(len(params), "parameter"), gpukind.Plural(len(k.Params()), "parameter"), hidden)
	}
	for i, gp := range k.Params() {
		if err := checkParam(k, entry, i, gp, params[i]); err != nil {
			return err
		}
	}
	for i, p := range params[len(k.Params()):] {
		if p.Size != 8 || p.Align != 8 || p.Float() || p.Count > 0 {
			return fmt.Errorf("generated PTX entry %s parameter %d is %s; its hidden parameter %d should be 64 bits (a length, a pointer or the device number): generate it again (go generate)", entry, len(k.Params())+i, p.Type, i)
		}
	}
	return nil
}

// offsetParams is how many global offsets (1: x; 3: x, y, z) an entry takes
// in extra, the parameters after those of its Go kernel. They are one or
// three 64-bit integers, not pointers. It is 0 for any other extra.
func offsetParams(extra []ptx.Param) int {
	if n := len(extra); n != 1 && n != 3 {
		return 0
	}
	for _, p := range extra {
		if p.Ptr || !p.Integer() || p.Size != 8 {
			return 0
		}
	}
	return len(extra)
}

// noEntry adds to err, the driver's for an entry the image has not, the
// entries it has. If one of them is the entry's name mangled, it adds a hint.
// (That is a .cu function not declared extern "C".)
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

// isInteger reports whether p is a scalar of an integer kind.
func isInteger(p plugin.Param) bool {
	if p.Kind != plugin.Scalar || p.Type == nil {
		return false
	}
	switch p.Type.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return true
	}
	return false
}

func isFloat(p plugin.Param) bool {
	if p.Kind != plugin.Scalar || p.Type == nil {
		return false
	}
	k := p.Type.Kind()
	return k == reflect.Float32 || k == reflect.Float64
}

// cuda is how a .cu file declares parameters.
var cuda = gpukind.Dialect{
	Types: map[reflect.Kind]string{
		reflect.Bool: "bool", reflect.Int8: "signed char", reflect.Uint8: "unsigned char",
		reflect.Int16: "short", reflect.Uint16: "unsigned short", reflect.Int32: "int", reflect.Uint32: "unsigned int",
		reflect.Int: "long long", reflect.Int64: "long long", reflect.Uint: "unsigned long long", reflect.Uint64: "unsigned long long",
		reflect.Uintptr: "unsigned long long", reflect.Float32: "float", reflect.Float64: "double",
		reflect.Complex64: "cuFloatComplex (float2)", reflect.Complex128: "cuDoubleComplex (double2)",
	},
	Pointer: func(elem string) string {
		if elem == "" {
			return "a pointer to structs"
		}
		elem, _, _ = strings.Cut(elem, " (")
		return elem + " *"
	},
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
		return fmt.Sprintf("an array or struct of %s aligned %d", gpukind.Plural(p.Size, "byte"), p.Align)
	}
	if t, ok := goTypes[p.Elem]; ok {
		return t
	}
	return fmt.Sprintf("a type of %s aligned %d", gpukind.Plural(p.Size, "byte"), p.Align)
}
