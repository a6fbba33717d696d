package fuzz

import (
	"flag"
	"fmt"
	"go/format"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
)

// The random kernels: Seed and Count make kernels.go (TestKernelsUpToDate
// -update writes it; go generate runs that). Another seed is another
// corpus of bodies for the fuzz target: change it, run go generate, fuzz.
const (
	Seed  = 1
	Count = 32
)

var update = flag.Bool("update", false, "write kernels.go from Seed and Count")

// TestKernelsUpToDate: kernels.go is what randomKernels makes of Seed and
// Count (with -update, it writes it).
func TestKernelsUpToDate(t *testing.T) {
	src := randomKernels(Seed, Count)
	if *update {
		if err := os.WriteFile("kernels.go", src, 0o666); err != nil {
			t.Fatal(err)
		}
		return
	}
	old, err := os.ReadFile("kernels.go")
	if err != nil {
		t.Fatal(err)
	}
	if string(old) != string(src) {
		t.Fatal("kernels.go is stale: run go generate in examples/internal/gentest/fuzz")
	}
}

// Every kernel has the signature
//
//	func(ctx offload.Ctx, base, n int, iv offload.In[int64], uv offload.In[uint32],
//		fv offload.In[float64], out offload.InOut[uint64], fo offload.InOut[float64],
//		ap offload.InOut[float64])
//
// and computes elements base … base+n-1: element i reads iv, uv and fv
// (each at least n+base long, a few more or not: reads near the end may
// be out of range) and writes slots i*IntSlots … of out (integers, as
// uint64), i*FloatSlots … of fo (floats, as float64: exact) and
// i*ApproxSlots … of ap (math functions that are not exact, compared
// within the ulp bound the generated Bounds table gives).
const (
	IntSlots    = 6
	FloatSlots  = 4
	ApproxSlots = 2
)

var (
	intTypes   = []string{"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "int", "uint"}
	floatTypes = []string{"float32", "float64"}
)

func isFloatT(t string) bool  { return t == "float32" || t == "float64" }
func isSignedT(t string) bool { return strings.HasPrefix(t, "int") }
func widthOf(t string) int {
	switch t {
	case "int8", "uint8":
		return 8
	case "int16", "uint16":
		return 16
	case "int32", "uint32", "float32":
		return 32
	}
	return 64
}

// constants of each type, in range (a constant expression that overflows
// does not compile).
func constsOf(t string) []string {
	switch t {
	case "int8":
		return []string{"0", "1", "-1", "7", "-128", "127", "-3"}
	case "uint8":
		return []string{"0", "1", "3", "128", "255", "200"}
	case "int16":
		return []string{"0", "1", "-1", "-32768", "32767", "1000", "-7"}
	case "uint16":
		return []string{"0", "1", "65535", "32768", "999"}
	case "int32":
		return []string{"0", "1", "-1", "-2147483648", "2147483647", "65536", "-99", "0x7fff"}
	case "uint32":
		return []string{"0", "1", "4294967295", "2147483648", "0x9e3779b1", "12345"}
	case "int64", "int":
		return []string{"0", "1", "-1", "-9223372036854775808", "9223372036854775807", "1 << 40", "-12345", "4294967296"}
	case "uint64", "uint":
		return []string{"0", "1", "18446744073709551615", "9223372036854775808", "1 << 33", "77"}
	case "float32":
		return []string{"0", "1", "-1", "0.5", "3.4028234663852886e+38", "1e-45", "1e-38", "16777217", "-2.75", "0.1"}
	case "float64":
		return []string{"0", "1", "-1", "0.5", "1.7976931348623157e+308", "5e-324", "2.2250738585072014e-308", "9007199254740993", "-2.75", "0.1", "1e300", "1e-300"}
	}
	panic(t)
}

// approx are the math functions that are not exact, with the bound in
// ulp that the comparison allows: OpenCL C's bound for double (its
// specification, section 7.4) and two more for Go's own error.
var approx = []struct {
	name string
	args int
	ulp  int
}{
	{"Sin", 1, 6}, {"Cos", 1, 6}, {"Tan", 1, 7}, {"Exp", 1, 5}, {"Exp2", 1, 5}, {"Expm1", 1, 5},
	{"Log", 1, 5}, {"Log2", 1, 5}, {"Log10", 1, 5}, {"Log1p", 1, 4}, {"Atan", 1, 7}, {"Asin", 1, 6},
	{"Acos", 1, 6}, {"Sinh", 1, 6}, {"Cosh", 1, 6}, {"Tanh", 1, 7}, {"Cbrt", 1, 4}, {"Atan2", 2, 8},
	{"Hypot", 2, 6}, {"Pow", 2, 18},
}

// rgen writes random kernels.
type rgen struct {
	r      *rand.Rand
	b      strings.Builder
	ind    int
	scopes [][]rvar // variables in scope, innermost last
	nvar   int
	loopK  int // nesting of generated loops (for names)
	inLoop int // inside a generated loop (break and continue allowed)
	depth  int
}

type rvar struct{ name, typ string }

func (g *rgen) line(format string, args ...any) {
	g.b.WriteString(strings.Repeat("\t", g.ind))
	fmt.Fprintf(&g.b, format, args...)
	g.b.WriteByte('\n')
}

func (g *rgen) pick(xs []string) string { return xs[g.r.IntN(len(xs))] }
func (g *rgen) chance(p float64) bool   { return g.r.Float64() < p }

func (g *rgen) anyType() string {
	if g.chance(0.3) {
		return g.pick(floatTypes)
	}
	return g.pick(intTypes)
}

// varsOf are the variables in scope of type t (assignable ones only when
// assign, which leaves out the element's index).
func (g *rgen) varsOf(t string, assign bool) []string {
	var vs []string
	for _, s := range g.scopes {
		for _, v := range s {
			if v.typ == t && !(assign && (v.name == "i" || strings.HasPrefix(v.name, "k"))) {
				vs = append(vs, v.name)
			}
		}
	}
	return vs
}

// index is an index expression into a slice named s of the element i:
// in range mostly, near the end (perhaps out of range) sometimes.
func (g *rgen) index(s string) string {
	switch g.r.IntN(20) {
	case 0:
		return "i + 1"
	case 1:
		return fmt.Sprintf("i + %d", 2+g.r.IntN(2))
	case 2, 3:
		return "len(" + s + ") - 1 - i"
	case 4:
		return "int(uv[i] % uint32(len(" + s + ")+1))"
	case 5, 6:
		return "(i + 1) % len(" + s + ")"
	}
	return "i"
}

// leaf is a non-constant expression of type t: a variable or an input.
func (g *rgen) leaf(t string) string {
	if vs := g.varsOf(t, false); len(vs) > 0 && g.chance(0.6) {
		return g.pick(vs)
	}
	if isFloatT(t) {
		e := "fv[" + g.index("fv") + "]"
		if g.chance(0.1) {
			e = "at(fv, " + g.index("fv") + ")"
		}
		if t == "float32" {
			return "float32(" + e + ")"
		}
		return e
	}
	var e string
	switch g.r.IntN(8) {
	case 0, 1, 2:
		e = "iv[" + g.index("iv") + "]"
	case 3, 4:
		e = "uv[" + g.index("uv") + "]"
	case 5:
		e = "pick(iv, int(uv[i]%50) - 3)"
	case 6:
		e = "i"
	default:
		e = "f2i(fv[" + g.index("fv") + "])"
	}
	return t + "(" + e + ")"
}

// expr is a random expression of type t; konst allows a constant.
func (g *rgen) expr(t string, konst bool) string {
	g.depth++
	defer func() { g.depth-- }()
	if g.depth > 3 || g.chance(0.25) {
		if konst && g.chance(0.4) {
			return t + "(" + g.pick(constsOf(t)) + ")"
		}
		return g.leaf(t)
	}
	if isFloatT(t) {
		return g.floatExpr(t)
	}
	return g.intExpr(t)
}

func (g *rgen) intExpr(t string) string {
	x := g.expr(t, false)
	switch g.r.IntN(16) {
	case 0, 1, 2:
		return "(" + x + " " + g.pick([]string{"+", "-", "*"}) + " " + g.other(t, x, true) + ")"
	case 3:
		return "(" + x + " " + g.pick([]string{"&", "|", "^", "&^"}) + " " + g.other(t, x, true) + ")"
	case 4:
		// a division: guarded mostly, by zero sometimes
		op := g.pick([]string{"/", "%"})
		switch g.r.IntN(4) {
		case 0:
			return "(" + x + " " + op + " " + g.other(t, x, false) + ")"
		case 1:
			c := g.pick(constsOf(t))
			if c == "0" {
				c = "1"
			}
			if isSignedT(t) && g.chance(0.5) {
				c = "-1"
			}
			return "(" + x + " " + op + " " + t + "(" + c + "))"
		}
		return "(" + x + " " + op + " (" + g.other(t, x, false) + " | 1))"
	case 5:
		// a shift: past the width sometimes, by a negative count rarely
		op := g.pick([]string{"<<", ">>"})
		switch g.r.IntN(5) {
		case 0:
			return "(" + x + " " + op + " " + fmt.Sprint(g.r.IntN(widthOf(t))) + ")"
		case 1:
			return "(" + x + " " + op + " " + g.expr("int8", false) + ")"
		}
		return "(" + x + " " + op + " (uint(" + g.expr(g.pick(intTypes), false) + ") & 127))"
	case 6:
		return "(" + g.pick([]string{"-", "^"}) + x + ")"
	case 7:
		return g.pick([]string{"min", "max"}) + "(" + x + ", " + g.other(t, x, true) + ")"
	case 8:
		// a conversion from another integer type
		return t + "(" + g.expr(g.pick(intTypes), false) + ")"
	case 9:
		// from a float, where it fits
		if isSignedT(t) {
			return t + "(f2i(" + g.expr("float64", false) + "))"
		}
		return t + "(f2u(float64(" + g.expr(g.pick(floatTypes), false) + ")))"
	case 10:
		return t + "(mix(uint32(" + x + "), uint32(" + g.expr("uint32", true) + ")))"
	case 11:
		return t + "(steps(int64(" + x + ") & 0xffff, int(uv[i] % 30)))"
	case 12:
		if t == "int32" && g.chance(0.5) {
			return "quo(" + x + ", " + g.expr("int32", false) + ")"
		}
		return "(" + x + " * " + g.other(t, x, false) + ")"
	}
	return "(" + x + " + " + g.other(t, x, true) + ")"
}

func (g *rgen) floatExpr(t string) string {
	x := g.expr(t, false)
	wrap := func(e string) string {
		if t == "float32" {
			return "float32(" + e + ")"
		}
		return e
	}
	d := func(e string) string {
		if t == "float32" {
			return "float64(" + e + ")"
		}
		return e
	}
	switch g.r.IntN(13) {
	case 0, 1, 2, 3:
		return "(" + x + " " + g.pick([]string{"+", "-", "*", "/"}) + " " + g.other(t, x, true) + ")"
	case 4:
		return "(-" + x + ")"
	case 5:
		return g.pick([]string{"min", "max"}) + "(" + x + ", " + g.other(t, x, true) + ")"
	case 6:
		f := g.pick([]string{"Sqrt", "Abs", "Floor", "Ceil", "Trunc", "Round", "RoundToEven"})
		return wrap("math." + f + "(" + d(x) + ")")
	case 7:
		f := g.pick([]string{"Copysign", "Mod", "Max", "Min", "Dim"})
		return wrap("math." + f + "(" + d(x) + ", " + d(g.other(t, x, false)) + ")")
	case 8:
		if t == "float64" {
			return "math.FMA(" + x + ", " + g.expr(t, false) + ", " + g.expr(t, true) + ")"
		}
		return "(" + x + "*" + g.expr(t, false) + " + " + g.expr(t, true) + ")"
	case 9:
		// from an integer
		return t + "(" + g.expr(g.pick(intTypes), false) + ")"
	case 10:
		// the other float type
		o := "float64"
		if t == "float64" {
			o = "float32"
		}
		return t + "(" + g.expr(o, false) + ")"
	case 11:
		return "(" + x + " * " + g.other(t, x, false) + ")"
	}
	return "(" + x + " + " + g.other(t, x, true) + ")"
}

// other is a random expression of type t that is not x (staticcheck
// flags x op x).
func (g *rgen) other(t, x string, konst bool) string {
	if y := g.expr(t, konst); y != x {
		return y
	}
	return t + "(1)"
}

// cond is a random condition.
func (g *rgen) cond() string {
	t := g.anyType()
	x := g.expr(t, false)
	c := "(" + x + " " + g.pick([]string{"<", "<=", "==", "!=", ">", ">="}) + " " + g.other(t, x, true) + ")"
	switch g.r.IntN(5) {
	case 0:
		return "(" + c + " && " + g.cond() + ")"
	case 1:
		return "(" + c + " || " + g.cond() + ")"
	case 2:
		return "!" + c
	}
	return c
}

func (g *rgen) push() { g.scopes = append(g.scopes, nil) }
func (g *rgen) pop()  { g.scopes = g.scopes[:len(g.scopes)-1] }

func (g *rgen) declare(t string) string {
	g.nvar++
	name := fmt.Sprintf("v%d", g.nvar)
	g.line("%s := %s", name, g.expr(t, false))
	g.scopes[len(g.scopes)-1] = append(g.scopes[len(g.scopes)-1], rvar{name, t})
	return name
}

// assignment assigns to a variable in scope, if there is one of t.
func (g *rgen) assignment() {
	var all []rvar
	for _, s := range g.scopes {
		for _, v := range s {
			if v.name != "i" && !strings.HasPrefix(v.name, "k") {
				all = append(all, v)
			}
		}
	}
	if len(all) == 0 {
		return
	}
	pv := all[g.r.IntN(len(all))]
	v, t := pv.name, pv.typ
	ops := []string{"=", "+=", "-=", "*="}
	if !isFloatT(t) {
		ops = append(ops, "^=", "|=", "&=")
	} else {
		ops = append(ops, "/=")
	}
	if g.chance(0.1) && !isFloatT(t) {
		g.line("%s++", v)
		return
	}
	op, e := g.pick(ops), g.expr(t, true)
	if e == v {
		op = "+=" // not v = v (go vet)
	}
	g.line("%s %s %s", v, op, e)
}

// stmts writes n random statements (no new variables outside the
// element's top level: each is stored there, so each is used).
func (g *rgen) stmts(n int) {
	for range n {
		g.stmt()
	}
}

func (g *rgen) stmt() {
	if g.ind > 6 {
		g.assignment()
		return
	}
	switch g.r.IntN(9) {
	case 0, 1, 2:
		g.assignment()
	case 3:
		g.line("if %s {", g.cond())
		g.ind++
		g.stmts(1 + g.r.IntN(2))
		g.ind--
		if g.chance(0.5) {
			g.line("} else {")
			g.ind++
			g.stmts(1 + g.r.IntN(2))
			g.ind--
		}
		g.line("}")
	case 4:
		// a loop over a small count, with its counter used
		g.loopK++
		k := fmt.Sprintf("k%d", g.loopK)
		bound := g.pick([]string{"3", "int(uv[i] % 5)", "int(iv[i] & 7)"})
		if g.chance(0.3) {
			g.line("for %s := range %s {", k, bound)
		} else {
			g.line("for %s := 0; %s < %s; %s++ {", k, k, bound, k)
		}
		g.ind++
		g.push()
		g.scopes[len(g.scopes)-1] = append(g.scopes[len(g.scopes)-1], rvar{k, "int"})
		g.inLoop++
		t := g.pick(intTypes)
		if vs := g.varsOf(t, true); len(vs) > 0 {
			g.line("%s += %s(%s)", g.pick(vs), t, k)
		} else {
			g.line("_ = %s", k)
		}
		g.stmts(1 + g.r.IntN(2))
		if g.chance(0.4) {
			g.line("if %s {", g.cond())
			g.line("\t%s", g.pick([]string{"break", "continue"}))
			g.line("}")
		}
		g.inLoop--
		g.pop()
		g.ind--
		g.line("}")
	case 5:
		t := g.pick(intTypes)
		g.line("switch %s(%s) & 3 {", t, g.expr(t, false))
		for _, c := range []string{"case 0:", "case 1, 2:", "default:"} {
			if c == "default:" && g.chance(0.3) {
				continue
			}
			g.line("%s", c)
			g.ind++
			g.stmts(1)
			g.ind--
		}
		g.line("}")
	case 6:
		// a local array, filled and summed
		g.loopK++
		a := fmt.Sprintf("a%d", g.loopK)
		t := g.pick(intTypes)
		g.line("var %s [4]%s", a, t)
		g.line("%s[%s(%s)&3] = %s", a, "int", g.expr("int", false), g.expr(t, true))
		g.line("%s[2] += %s", a, g.expr(t, true))
		if vs := g.varsOf(t, true); len(vs) > 0 {
			g.line("for _, e := range %s {", a)
			g.line("\t%s ^= e", g.pick(vs))
			g.line("}")
		} else {
			g.line("_ = %s[1]", a)
		}
	case 7:
		if g.inLoop > 0 && g.chance(0.5) {
			g.line("if %s {", g.cond())
			g.line("\tcontinue")
			g.line("}")
			return
		}
		g.assignment()
	default:
		g.assignment()
	}
}

// kernel writes kernel number k; it returns the ulp bound of its ap
// slots and whether it has no ctx.For.
func (g *rgen) kernel(k int) (int, bool) {
	g.nvar, g.loopK = 0, 0
	shape := g.r.IntN(6) // 0: no ctx.For; 1: a chunk loop with continue; else an element loop
	fmt.Fprintf(&g.b, "\n// K%d is random kernel %d.\n", k, k)
	fmt.Fprintf(&g.b, "var K%d = offload.MustKernel8(\"fuzz.k%d\", func(ctx offload.Ctx, base, n int, iv offload.In[int64], uv offload.In[uint32], fv offload.In[float64], out offload.InOut[uint64], fo offload.InOut[float64], ap offload.InOut[float64]) {\n", k, k)
	g.ind = 1
	g.scopes = [][]rvar{nil}
	switch shape {
	case 0:
		g.line("for j := 0; j < n; j++ {")
	default:
		g.line("ctx.For(n, func(lo, hi int) {")
		g.ind++
		g.line("for j := lo; j < hi; j++ {")
	}
	g.ind++
	g.push()
	g.line("i := base + j")
	g.scopes[len(g.scopes)-1] = append(g.scopes[len(g.scopes)-1], rvar{"i", "int"})
	var vars []rvar
	for range 3 + g.r.IntN(4) {
		t := g.anyType()
		vars = append(vars, rvar{g.declare(t), t})
	}
	g.inLoop = 0
	if shape <= 1 {
		g.inLoop = 1 // the element loop itself: continue skips the stores
	}
	g.stmts(2 + g.r.IntN(3))
	g.inLoop = 0
	ni, nf := 0, 0
	for _, v := range vars {
		if isFloatT(v.typ) && nf < FloatSlots {
			g.line("fo[i*%d+%d] = float64(%s)", FloatSlots, nf, v.name)
			nf++
		} else if !isFloatT(v.typ) && ni < IntSlots {
			g.line("out[i*%d+%d] = uint64(%s)", IntSlots, ni, v.name)
			ni++
		} else {
			g.line("_ = %s", v.name)
		}
	}
	bound := 0
	for s := range ApproxSlots {
		if g.chance(0.4) {
			continue
		}
		f := approx[g.r.IntN(len(approx))]
		bound = max(bound, f.ulp)
		args := []string{g.expr("float64", false)}
		if f.name == "Sin" || f.name == "Cos" || f.name == "Tan" {
			// Go's reduction of a huge argument is off by tens of ulp
			// (sin(MaxFloat64): 25); OpenCL's is within 4
			args[0] = "math.Mod(" + args[0] + ", 1e8)"
		}
		if f.name == "Log" || f.name == "Log10" {
			args[0] = "normal(" + args[0] + ")"
		}
		if f.args == 2 {
			args = append(args, g.expr("float64", true))
		}
		g.line("ap[i*%d+%d] = math.%s(%s)", ApproxSlots, s, f.name, strings.Join(args, ", "))
	}
	g.pop()
	g.ind--
	g.line("}")
	if shape != 0 {
		g.ind--
		g.line("})")
	}
	g.b.WriteString("})\n")
	return bound, shape == 0
}

// randomKernels is the source of kernels.go: count random kernels from
// seed, and Kernels and Bounds, which list them.
func randomKernels(seed uint64, count int) []byte {
	g := &rgen{r: rand.New(rand.NewPCG(seed, 43))}
	g.b.WriteString("// Code generated by TestKernelsUpToDate -update; DO NOT EDIT.\n\n//lint:file-ignore SA4006 random bodies assign values that a later statement may overwrite unread\n\npackage fuzz\n\n")
	g.b.WriteString("import (\n\t\"math\"\n\n\t\"github.com/goffload/offload\"\n)\n")
	bounds := make([]int, count)
	var serial []int
	for k := range count {
		var s bool
		bounds[k], s = g.kernel(k)
		if s {
			serial = append(serial, k)
		}
	}
	g.b.WriteString("\n// Kernels are the random kernels, by number.\nvar Kernels = []offload.Kernel8[int, int, offload.In[int64], offload.In[uint32], offload.In[float64], offload.InOut[uint64], offload.InOut[float64], offload.InOut[float64]]{")
	for k := range count {
		if k%8 == 0 {
			g.b.WriteString("\n\t")
		} else {
			g.b.WriteString(" ")
		}
		fmt.Fprintf(&g.b, "K%d,", k)
	}
	g.b.WriteString("\n}\n\n// Bounds are the ulp bounds of each kernel's ap slots.\nvar Bounds = []int{")
	for k, b := range bounds {
		if k > 0 {
			g.b.WriteString(", ")
		}
		fmt.Fprint(&g.b, b)
	}
	g.b.WriteString("}\n\n// Serial are the kernels without ctx.For (one work-item runs them).\nvar Serial = []int{")
	for k, s := range serial {
		if k > 0 {
			g.b.WriteString(", ")
		}
		fmt.Fprint(&g.b, s)
	}
	g.b.WriteString("}\n")
	src, err := format.Source([]byte(g.b.String()))
	if err != nil {
		panic(fmt.Sprintf("formatting the random kernels: %v\n%s", err, g.b.String()))
	}
	return src
}
