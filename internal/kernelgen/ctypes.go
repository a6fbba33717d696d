package kernelgen

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/types"
	"math"
	"strconv"
	"strings"
)

// intInfo describes an integer type: its width in bits and signedness.
type intInfo struct {
	bits   int
	signed bool
}

// basicOf returns t's underlying basic type, nil if it has none.
func basicOf(t types.Type) *types.Basic {
	b, _ := t.Underlying().(*types.Basic)
	return b
}

// intOf describes integer type t; ok false if t is not an integer.
func intOf(t types.Type) (intInfo, bool) {
	b := basicOf(t)
	if b == nil || b.Info()&types.IsInteger == 0 {
		return intInfo{}, false
	}
	switch b.Kind() {
	case types.Int8:
		return intInfo{8, true}, true
	case types.Uint8:
		return intInfo{8, false}, true
	case types.Int16:
		return intInfo{16, true}, true
	case types.Uint16:
		return intInfo{16, false}, true
	case types.Int32, types.UntypedRune:
		return intInfo{32, true}, true
	case types.Uint32:
		return intInfo{32, false}, true
	case types.Uint, types.Uint64, types.Uintptr:
		return intInfo{64, false}, true
	}
	return intInfo{64, true}, true // int, int64, untyped int
}

// isScalar reports whether t is in the subset's scalars: bool, an
// integer, float32 or float64.
func isScalar(t types.Type) bool {
	b := basicOf(t)
	return b != nil && b.Info()&(types.IsBoolean|types.IsInteger|types.IsFloat) != 0 && b.Kind() != types.UnsafePointer
}

func isFloat(t types.Type) bool {
	b := basicOf(t)
	return b != nil && b.Info()&types.IsFloat != 0
}

func isFloat32(t types.Type) bool {
	b := basicOf(t)
	return b != nil && b.Kind() == types.Float32
}

func isBool(t types.Type) bool {
	b := basicOf(t)
	return b != nil && b.Info()&types.IsBoolean != 0
}

// cInt names the OpenCL C type of an integer type.
func (i intInfo) c() string {
	var n string
	switch i.bits {
	case 8:
		n = "char"
	case 16:
		n = "short"
	case 32:
		n = "int"
	default:
		n = "long"
	}
	if !i.signed {
		n = "u" + n
	}
	return n
}

// wide is the unsigned type wrapping arithmetic is done in: uint for
// widths up to 32 bits (C promotes narrower operands to int, which
// overflows), ulong for 64.
func (i intInfo) wide() string {
	if i.bits == 64 {
		return "ulong"
	}
	return "uint"
}

// ctype is the OpenCL C type of a scalar Go type t; at is where t is used,
// for the refusal.
func (f *fn) ctype(t types.Type, at ast.Node) string {
	if i, ok := intOf(t); ok {
		return i.c()
	}
	b := basicOf(t)
	switch {
	case b != nil && b.Kind() == types.Float32:
		return "float"
	case b != nil && (b.Kind() == types.Float64 || b.Kind() == types.UntypedFloat):
		f.g.double = true
		return "double"
	case b != nil && b.Info()&types.IsBoolean != 0:
		return "bool"
	case isStruct(t):
		return f.structType(t, at)
	}
	panic(f.g.p.errorf(at, "a value of type %s: not in the subset (the scalar types are bool, the integers, float32 and float64)", t))
}

// storeType is the OpenCL C type of a buffer element or kernel parameter
// of type t: bool is a uchar there.
func (f *fn) storeType(t types.Type, at ast.Node) string {
	if isBool(t) {
		return "uchar"
	}
	return f.ctype(t, at)
}

// literal is constant v of type t as OpenCL C.
func (f *fn) literal(v constant.Value, t types.Type, at ast.Node) string {
	if b := basicOf(t); b != nil && b.Info()&types.IsUntyped != 0 {
		switch b.Kind() {
		case types.UntypedBool:
			t = types.Typ[types.Bool]
		case types.UntypedFloat:
			t = types.Typ[types.Float64]
		case types.UntypedRune:
			t = types.Typ[types.Int32]
		default:
			t = types.Typ[types.Int]
		}
	}
	switch {
	case isBool(t):
		if constant.BoolVal(v) {
			return "true"
		}
		return "false"
	case isFloat(t):
		if isFloat32(t) {
			x, _ := constant.Float32Val(constant.ToFloat(v))
			return floatLit(float64(x), 32)
		}
		f.g.double = true
		x, _ := constant.Float64Val(constant.ToFloat(v))
		return floatLit(x, 64)
	}
	i, ok := intOf(t)
	if !ok {
		panic(f.g.p.errorf(at, "a constant of type %s: not in the subset", t))
	}
	v = constant.ToInt(v)
	if i.signed {
		x, _ := constant.Int64Val(v)
		if i.bits == 64 {
			if x == math.MinInt64 {
				return "(-9223372036854775807L - 1L)"
			}
			return fmt.Sprintf("%dL", x)
		}
		if i.bits == 32 {
			if x == math.MinInt32 {
				return "(-2147483647 - 1)"
			}
			return strconv.FormatInt(x, 10)
		}
		return fmt.Sprintf("((%s)%d)", i.c(), x)
	}
	x, _ := constant.Uint64Val(v)
	switch i.bits {
	case 64:
		return fmt.Sprintf("%dUL", x)
	case 32:
		return fmt.Sprintf("%dU", x)
	}
	return fmt.Sprintf("((%s)%dU)", i.c(), x)
}

// floatLit is x as a C floating literal that reads back exactly: the
// shortest decimal that does at the given precision (with an f suffix
// for float32's 32).
func floatLit(x float64, bits int) string {
	s := strconv.FormatFloat(x, 'g', -1, bits)
	if !strings.ContainsAny(s, ".eE") {
		s += ".0"
	}
	if bits == 32 {
		s += "f"
	}
	if x < 0 {
		return "(" + s + ")"
	}
	return s
}

// reserved are names a C variable may not take: C's and OpenCL C's
// keywords and types, and the builtin functions the code calls.
var reserved = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`auto break case char const continue default do double else enum extern
		float for goto if inline int long register restrict return short signed sizeof static struct switch
		typedef union unsigned void volatile while bool true false uchar ushort uint ulong half size_t ptrdiff_t
		intptr_t uintptr_t kernel __kernel global __global local __local constant __constant private __private
		read_only write_only read_write image2d_t image3d_t sampler_t event_t NULL INFINITY NAN
		sqrt fabs floor ceil trunc round rint exp exp2 expm1 log log2 log10 log1p pow sin cos tan asin acos atan
		atan2 sinh cosh tanh asinh acosh atanh hypot cbrt fmod copysign erf erfc tgamma fma remainder fdim
		isnan isinf signbit min max fmin fmax get_global_id get_global_size atomic_cmpxchg main
		char2 float2 float4 double2 int2 int4 long2 select clamp mad`) {
		reserved[w] = true
	}
}
