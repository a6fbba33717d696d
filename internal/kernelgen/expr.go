package kernelgen

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/token"
	"go/types"
	"regexp"
	"slices"
	"strings"
)

// simpleC matches a C expression that can be used twice: a name or a
// number.
var simpleC = regexp.MustCompile(`^(\(?-?[0-9][0-9xa-fA-F.]*[UL]*\)?|[A-Za-z_][A-Za-z0-9_]*)$`)

// expr translates e. Checks and calls it needs are written before the
// statement that uses the result, in Go's order of evaluation.
func (f *fn) expr(e ast.Expr) string {
	tv := f.info().Types[e]
	if tv.Value != nil {
		return f.literal(tv.Value, tv.Type, e)
	}
	switch e := e.(type) {
	case *ast.ParenExpr:
		return f.expr(e.X)
	case *ast.Ident:
		return f.ident(e)
	case *ast.BinaryExpr:
		return f.binary(e)
	case *ast.UnaryExpr:
		return f.unary(e)
	case *ast.IndexExpr:
		v := f.index(e)
		if isBool(tv.Type) {
			return "(" + v + " != 0)"
		}
		return v
	case *ast.CallExpr:
		return f.call(e, false)
	case *ast.SelectorExpr:
		if id, ok := e.X.(*ast.Ident); ok && f.ctx != nil && f.info().Uses[id] == f.ctx {
			f.refuse(e, "ctx.%s: only ctx.For, at the top level of the kernel's body, is in the subset", e.Sel.Name)
		}
		if v, ok := f.opMember(e, nil); ok {
			return v
		}
		if v := f.selector(e); v != "" {
			return v
		}
		f.refuse(e, "a method value %s: not in the subset", e.Sel.Name)
	case *ast.CompositeLit:
		return f.composite(e)
	case *ast.SliceExpr:
		f.refuse(e, "a slice expression used as a value: only a variable's definition, a function's argument and indexing are in the subset")
	}
	f.refuse(e, "a %s: not in the subset", nodeName(e))
	return ""
}

func (f *fn) ident(e *ast.Ident) string {
	obj := f.info().Uses[e]
	if obj == f.ctx && obj != nil {
		f.refuse(e, "ctx used other than for ctx.For: not in the subset")
	}
	if name, ok := f.names[obj]; ok {
		if v, ok := obj.(*types.Var); ok {
			if _, isSlice := f.slices[v]; isSlice {
				f.refuse(e, "slice %s used as a value: only indexing, len and passing it to a function are in the subset", e.Name)
			}
		}
		return name
	}
	if v, ok := obj.(*types.Var); ok && v.Parent() == f.g.p.types.Scope() {
		f.refuse(e, "package-level variable %s: a kernel's inputs are its arguments (pass it as one)", e.Name)
	}
	if _, ok := obj.(*types.Nil); ok {
		f.refuse(e, "nil: not in the subset")
	}
	f.refuse(e, "%s: not in the subset", e.Name)
	return ""
}

// operandType is the type e's operands have: for a comparison, the type
// of its operands.
func (f *fn) typeOf(e ast.Expr) types.Type {
	t := f.info().TypeOf(e)
	if b := basicOf(t); b != nil && b.Info()&types.IsUntyped != 0 {
		switch b.Kind() {
		case types.UntypedBool:
			return types.Typ[types.Bool]
		case types.UntypedFloat:
			return types.Typ[types.Float64]
		case types.UntypedRune:
			return types.Typ[types.Int32]
		case types.UntypedInt:
			return types.Typ[types.Int]
		}
	}
	return t
}

func (f *fn) binary(e *ast.BinaryExpr) string {
	switch e.Op {
	case token.LAND, token.LOR:
		x := f.expr(e.X)
		pre, y := f.capture(func() string { return f.expr(e.Y) })
		if pre == "" {
			return "(" + x + " " + e.Op.String() + " " + y + ")"
		}
		t := f.temp("bool", x)
		if e.Op == token.LAND {
			f.line("if (%s) {", t)
		} else {
			f.line("if (!%s) {", t)
		}
		f.out.WriteString(pre)
		f.line("\t%s = %s;", t, y)
		f.line("}")
		return t
	case token.EQL, token.NEQ, token.LSS, token.LEQ, token.GTR, token.GEQ:
		xt := f.typeOf(e.X)
		if basicOf(xt) == nil || basicOf(xt).Info()&types.IsString != 0 {
			f.refuse(e, "a comparison of %s: not in the subset (scalars)", xt)
		}
		x := f.expr(e.X)
		y := f.expr(e.Y)
		return "(" + x + " " + e.Op.String() + " " + y + ")"
	}
	t := f.typeOf(e)
	x := f.expr(e.X)
	y := f.expr(e.Y)
	if e.Op == token.SHL || e.Op == token.SHR {
		return f.shift(e.Op, x, y, t, e.Y, e)
	}
	return f.arith(e.Op, x, y, t, e.Y)
}

// arith is x op y for operands of type t, with Go's semantics: integers
// wrap, division truncates and a zero divisor fails the check at ye.
func (f *fn) arith(op token.Token, x, y string, t types.Type, ye ast.Expr) string {
	if isFloat(t) {
		switch op {
		case token.ADD, token.SUB, token.MUL, token.QUO:
			return "(" + x + " " + op.String() + " " + y + ")"
		}
		f.refuse(ye, "operator %s on %s: not in the subset", op, t)
	}
	i, ok := intOf(t)
	if !ok {
		f.refuse(ye, "operator %s on %s: not in the subset (scalars)", op, t)
	}
	ct := i.c()
	switch op {
	case token.ADD, token.SUB, token.MUL:
		if !i.signed && i.bits >= 32 {
			return "(" + x + " " + op.String() + " " + y + ")"
		}
		return fmt.Sprintf("((%s)((%s)(%s) %s (%s)(%s)))", ct, i.wide(), x, op, i.wide(), y)
	case token.AND, token.OR, token.XOR:
		return fmt.Sprintf("((%s)(%s %s %s))", ct, x, op, y)
	case token.AND_NOT:
		return fmt.Sprintf("((%s)(%s & ~%s))", ct, x, y)
	case token.QUO, token.REM:
		return f.divide(op, x, y, i, ye)
	}
	f.refuse(ye, "operator %s: not in the subset", op)
	return ""
}

// divide is x / y or x % y of integers as Go's: truncated, MinInt / -1
// wraps to MinInt (and % gives 0), a zero divisor fails the check.
func (f *fn) divide(op token.Token, x, y string, i intInfo, ye ast.Expr) string {
	ct := i.c()
	if c := f.info().Types[ye].Value; c != nil {
		if i.signed && constant.Compare(c, token.EQL, constant.MakeInt64(-1)) {
			if op == token.QUO {
				return fmt.Sprintf("((%s)(-(%s)(%s)))", ct, i.wide(), x)
			}
			return "((" + ct + ")0)"
		}
		return fmt.Sprintf("((%s)(%s %s %s))", ct, x, op, y)
	}
	if !simpleC.MatchString(y) {
		y = f.temp(ct, y)
	}
	if f.g.checks {
		f.line("if (%s == 0) %s", y, f.fail(f.g.site(ye, "divide"), "0", "0"))
	}
	if !i.signed {
		return fmt.Sprintf("((%s)(%s %s %s))", ct, x, op, y)
	}
	if op == token.QUO {
		return fmt.Sprintf("(%s == -1 ? (%s)(-(%s)(%s)) : (%s)(%s / %s))", y, ct, i.wide(), x, ct, x, y)
	}
	return fmt.Sprintf("(%s == -1 ? (%s)0 : (%s)(%s %% %s))", y, ct, ct, x, y)
}

// shift is x << y or x >> y for x of type t, as Go's: a count of the
// width or more gives 0 (or the sign for >>), a negative count fails the
// check at ye.
func (f *fn) shift(op token.Token, x, y string, t types.Type, ye ast.Expr, at ast.Node) string {
	i, ok := intOf(t)
	if !ok {
		f.refuse(at, "a shift of %s: not in the subset", t)
	}
	ct := i.c()
	if c := f.info().Types[ye].Value; c != nil {
		n, _ := constant.Uint64Val(constant.ToInt(c))
		switch {
		case n >= uint64(i.bits) && op == token.SHL, n >= uint64(i.bits) && !i.signed:
			return "((" + ct + ")0)"
		case n >= uint64(i.bits):
			return fmt.Sprintf("((%s)(%s >> %d))", ct, x, i.bits-1)
		case op == token.SHL:
			return fmt.Sprintf("((%s)((%s)(%s) << %d))", ct, i.wide(), x, n)
		}
		return fmt.Sprintf("((%s)(%s >> %d))", ct, x, n)
	}
	if !simpleC.MatchString(y) {
		y = f.temp(f.ctype(f.typeOf(ye), ye), y)
	}
	if yi, _ := intOf(f.typeOf(ye)); yi.signed && f.g.checks {
		f.line("if (%s < 0) %s", y, f.fail(f.g.site(ye, "shift"), y, "0"))
	}
	name := "go_shl_" + ct
	if op == token.SHR {
		name = "go_shr_" + ct
	}
	if _, ok := f.g.helpers[name]; !ok {
		var body string
		switch {
		case op == token.SHL:
			body = fmt.Sprintf("return s >= %d ? (%s)0 : (%s)((%s)x << s);", i.bits, ct, ct, i.wide())
		case i.signed:
			body = fmt.Sprintf("return (%s)(x >> (s >= %d ? %d : s));", ct, i.bits, i.bits-1)
		default:
			body = fmt.Sprintf("return s >= %d ? (%s)0 : (%s)(x >> s);", i.bits, ct, ct)
		}
		f.g.helpers[name] = fmt.Sprintf("static inline %s %s(%s x, ulong s) { %s }\n", ct, name, ct, body)
	}
	return fmt.Sprintf("%s(%s, (ulong)(%s))", name, x, y)
}

func (f *fn) unary(e *ast.UnaryExpr) string {
	t := f.typeOf(e)
	switch e.Op {
	case token.ADD:
		return f.expr(e.X)
	case token.NOT:
		return "(!" + f.expr(e.X) + ")"
	case token.SUB:
		x := f.expr(e.X)
		if isFloat(t) {
			return "(-" + x + ")"
		}
		if i, ok := intOf(t); ok {
			return fmt.Sprintf("((%s)(-(%s)(%s)))", i.c(), i.wide(), x)
		}
	case token.XOR:
		x := f.expr(e.X)
		if i, ok := intOf(t); ok {
			return fmt.Sprintf("((%s)(~%s))", i.c(), x)
		}
	case token.AND:
		f.refuse(e, "taking an address (&): not in the subset (no pointers)")
	case token.ARROW:
		f.refuse(e, "a channel receive: not in the subset")
	}
	f.refuse(e, "operator %s on %s: not in the subset", e.Op, t)
	return ""
}

// sliceValue translates a slice-typed expression: a slice variable, or a
// slice expression of one, checked as Go checks it (0 ≤ lo ≤ hi ≤ the
// length: a device knows no capacity beyond the length).
func (f *fn) sliceValue(e ast.Expr) sliceRef {
	se, ok := ast.Unparen(e).(*ast.SliceExpr)
	if !ok {
		return f.sliceOf(e)
	}
	if se.Slice3 {
		f.refuse(se, "a three-index slice expression: not in the subset")
	}
	if _, ok := f.info().TypeOf(se.X).Underlying().(*types.Slice); !ok {
		f.refuse(se, "slicing a %s: not in the subset (slices)", f.info().TypeOf(se.X))
	}
	base := f.sliceValue(se.X)
	lo, hi := "0L", base.len
	if se.Low != nil {
		lo = f.expr(se.Low)
		if !simpleC.MatchString(lo) {
			lo = f.temp("long", "(long)("+lo+")")
		}
	}
	if se.High != nil {
		hi = f.expr(se.High)
		if !simpleC.MatchString(hi) {
			hi = f.temp("long", "(long)("+hi+")")
		}
	}
	if f.g.checks {
		if se.High != nil {
			f.line("if ((ulong)(%s) > (ulong)(%s)) %s", hi, base.len, f.fail(f.g.site(se, "slice high"), hi, base.len))
		}
		if se.Low != nil {
			f.line("if ((ulong)(%s) > (ulong)(%s)) %s", lo, hi, f.fail(f.g.site(se, "slice low"), lo, hi))
		}
	}
	f.tmp++
	ref := sliceRef{ptr: fmt.Sprintf("go_s%d", f.tmp), len: fmt.Sprintf("go_len_s%d", f.tmp), elem: base.elem}
	f.line("global %s *%s = %s + %s;", f.storeType(base.elem, se), ref.ptr, base.ptr, lo)
	f.line("long %s = %s - %s;", ref.len, hi, lo)
	return ref
}

// sliceOf returns the slice variable e names (or X.On(ctx)).
func (f *fn) sliceOf(e ast.Expr) sliceRef {
	if r, ok := f.fieldSlice(e); ok {
		return r
	}
	if r, ok := f.globalOn(e); ok {
		return r
	}
	if id, ok := ast.Unparen(e).(*ast.Ident); ok {
		if v, ok := f.info().Uses[id].(*types.Var); ok {
			if r, ok := f.slices[v]; ok {
				return r
			}
			if v.Parent() == f.g.p.types.Scope() {
				f.refuse(e, "package-level slice %s: a kernel's buffers are its arguments (pass it as one)", id.Name)
			}
		}
	}
	if _, ok := ast.Unparen(e).(*ast.CallExpr); ok {
		f.refuse(e, "a slice made in the kernel (%s): not in the subset (pass it as a Scratch buffer)", types.ExprString(e))
	}
	f.refuse(e, "a slice that is not a parameter (%s): not in the subset", nodeName(e))
	return sliceRef{}
}

// arrayBase returns the C expression of an array: a local array variable
// or an element of one.
func (f *fn) arrayBase(e ast.Expr) string {
	switch x := ast.Unparen(e).(type) {
	case *ast.Ident:
		if name, ok := f.names[f.info().Uses[x]]; ok {
			return name
		}
	case *ast.IndexExpr:
		return f.index(x)
	}
	f.refuse(e, "an array that is not a local variable (%s): not in the subset", nodeName(e))
	return ""
}

// index translates x[i], checked: the index must lie in [0, len(x)).
func (f *fn) index(e *ast.IndexExpr) string {
	switch t := f.info().TypeOf(e.X).Underlying().(type) {
	case *types.Slice:
		ref := f.sliceValue(e.X)
		return ref.ptr + "[" + f.checkedIndex(e.Index, ref.len, e, false) + "]"
	case *types.Array:
		base := f.arrayBase(e.X)
		return base + "[" + f.checkedIndex(e.Index, fmt.Sprintf("%dL", t.Len()), e, true) + "]"
	case *types.Map:
		f.refuse(e, "a map: not in the subset")
	case *types.Basic:
		f.refuse(e, "indexing a %s: not in the subset", t)
	}
	f.refuse(e, "indexing a %s: not in the subset", f.info().TypeOf(e.X))
	return ""
}

func (f *fn) checkedIndex(ie ast.Expr, n string, at ast.Node, array bool) string {
	if c := f.info().Types[ie].Value; c != nil && array {
		return f.literal(c, types.Typ[types.Int], ie) // the compiler checked it
	}
	i := f.expr(ie)
	if id, ok := ast.Unparen(ie).(*ast.Ident); ok && f.hoist != nil && !array && f.paramLens[n] && f.info().Uses[id] == f.hoist {
		if !slices.Contains(f.hoisted, n) {
			f.hoisted = append(f.hoisted, n)
		}
		return i
	}
	if !simpleC.MatchString(i) {
		i = f.temp("long", "(long)("+i+")")
	}
	if f.g.checks {
		f.line("if ((ulong)(%s) >= (ulong)(%s)) %s", i, n, f.fail(f.g.site(at, "index"), i, n))
	}
	return i
}

func (f *fn) call(e *ast.CallExpr, stmt bool) string {
	info := f.info()
	if tv := info.Types[e.Fun]; tv.IsType() {
		return f.conversion(e)
	} else if tv.IsBuiltin() {
		return f.builtin(e)
	}
	fun := ast.Unparen(e.Fun)
	switch name := f.offloadFunc(e); {
	case name == "Reduce":
		f.refuse(e, "offload.Reduce inside an expression or statement: only r := offload.Reduce(…) (or r = …, out[0] = …) at the top level of the kernel's body is in the subset")
	case name != "":
		f.refuse(e, "offload.%s: not in the subset", name)
	}
	if name := f.builtinOp(e); name != "" {
		f.refuse(e, "reduction.%s used other than to define an Op variable or as Reduce's op: not in the subset", name)
	}
	if e.Ellipsis.IsValid() {
		f.refuse(e, "a variadic call: not in the subset")
	}
	var obj *types.Func
	switch x := fun.(type) {
	case *ast.SelectorExpr:
		if id, ok := x.X.(*ast.Ident); ok && f.ctx != nil && info.Uses[id] == f.ctx {
			if x.Sel.Name == "Device" {
				return "go_dev" // the kind passes it
			}
			f.refuse(e, "ctx.%s: only ctx.For, ctx.ForChunks and ctx.Device, and offload.Reduce(ctx, …), are in the subset", x.Sel.Name)
		}
		if v, ok := f.opMember(x, e); ok {
			return v
		}
		obj, _ = info.Uses[x.Sel].(*types.Func)
		if obj != nil && obj.Pkg() != nil && obj.Pkg().Path() == "math" && obj.Type().(*types.Signature).Recv() == nil {
			return f.math(obj.Name(), e)
		}
		if _, isMethod := info.Selections[x]; isMethod {
			f.refuse(e, "a method call (%s): not in the subset", x.Sel.Name)
		}
	case *ast.Ident:
		obj, _ = info.Uses[x].(*types.Func)
	case *ast.FuncLit:
		f.refuse(e, "a call of a function literal: not in the subset")
	}
	if obj == nil || obj.Pkg() != f.g.p.types {
		name := types.ExprString(fun)
		f.refuse(e, "a call of %s: not in the subset (functions of this package, builtins len, min and max, and math)", name)
	}
	c := f.g.function(obj, e)
	sig := obj.Type().(*types.Signature)
	var args []string
	for i, a := range e.Args {
		if _, ok := sig.Params().At(i).Type().Underlying().(*types.Slice); ok {
			if f.setup {
				f.refuse(a, "a buffer passed to a function before ctx.For: every work-item runs the code before ctx.For, so only scalar setup may be there")
			}
			r := f.sliceValue(a)
			args = append(args, r.ptr, r.len)
			continue
		}
		args = append(args, f.expr(a))
	}
	if f.g.checks {
		if f.kernel {
			args = append(args, "go_f", "&go_fl")
		} else {
			args = append(args, "go_f", "go_fl")
		}
	}
	text := c.name + "(" + strings.Join(args, ", ") + ")"
	if !f.g.checks {
		if stmt {
			f.line("%s;", text)
			return ""
		}
		return text
	}
	if sig.Results().Len() == 0 {
		if !stmt {
			f.refuse(e, "the value of %s, which has none", obj.Name())
		}
		f.line("%s;", text)
		f.line("%s", f.afterCall())
		return ""
	}
	t := f.temp(f.ctype(sig.Results().At(0).Type(), e), text)
	f.line("%s", f.afterCall())
	if stmt {
		return ""
	}
	return t
}

func (f *fn) conversion(e *ast.CallExpr) string {
	to := f.typeOf(e)
	from := f.typeOf(e.Args[0])
	if basicOf(to) == nil || basicOf(from) == nil || basicOf(to).Info()&types.IsString != 0 || basicOf(from).Info()&types.IsString != 0 {
		f.refuse(e, "a conversion from %s to %s: not in the subset (scalars)", from, to)
	}
	x := f.expr(e.Args[0])
	if f.ctype(to, e) == f.ctype(from, e) {
		return x
	}
	return "((" + f.ctype(to, e) + ")(" + x + "))"
}

func (f *fn) builtin(e *ast.CallExpr) string {
	id, _ := ast.Unparen(e.Fun).(*ast.Ident)
	name := ""
	if id != nil {
		name = id.Name
	}
	switch name {
	case "len":
		if _, ok := f.info().TypeOf(e.Args[0]).Underlying().(*types.Slice); ok {
			return f.sliceOf(e.Args[0]).len
		}
		f.refuse(e, "len of a %s: not in the subset (len of a slice)", f.info().TypeOf(e.Args[0]))
	case "min", "max":
		t := f.typeOf(e)
		v := f.expr(e.Args[0])
		for _, a := range e.Args[1:] {
			y := f.expr(a)
			if isFloat(t) {
				v = f.fminmax(name, f.ctype(t, e), v, y)
			} else {
				// each operand in the type: C promotes a narrow one (in a
				// ?: or an operation) to int, and OpenCL's min of a short
				// and an int is ambiguous
				ct := f.ctype(t, e)
				v = fmt.Sprintf("%s((%s)(%s), (%s)(%s))", name, ct, v, ct, y)
			}
		}
		return v
	case "panic":
		// the launch fails naming this line; the value is not evaluated
		// (a device formats no strings)
		f.line("%s", f.fail(f.g.site(e, "panic"), "0", "0"))
		return ""
	}
	f.refuse(e, "builtin %s: not in the subset (len of a slice, min, max, panic)", name)
	return ""
}

// fminmax is Go's min or max of two floats: a NaN if either is one, and
// -0 below +0.
func (f *fn) fminmax(name, ct, x, y string) string {
	h := "go_" + name + "_" + ct
	if _, ok := f.g.helpers[h]; !ok {
		pick := "a < b ? a : b"
		zero := "signbit(a) ? a : b"
		if name == "max" {
			pick = "a > b ? a : b"
			zero = "signbit(a) ? b : a"
		}
		f.g.helpers[h] = fmt.Sprintf("static inline %s %s(%s a, %s b) { return isnan(a) || isnan(b) ? a + b : a == b ? (%s) : (%s); }\n", ct, h, ct, ct, zero, pick)
	}
	return h + "(" + x + ", " + y + ")"
}

// mathFuncs are the math functions that are OpenCL C's of the same
// meaning, by Go name.
var mathFuncs = map[string]string{
	"Sqrt": "sqrt", "Abs": "fabs", "Floor": "floor", "Ceil": "ceil", "Trunc": "trunc", "Round": "round",
	"RoundToEven": "rint", "Exp": "exp", "Exp2": "exp2", "Expm1": "expm1", "Log": "log", "Log2": "log2",
	"Log10": "log10", "Log1p": "log1p", "Pow": "pow", "Sin": "sin", "Cos": "cos", "Tan": "tan", "Asin": "asin",
	"Acos": "acos", "Atan": "atan", "Atan2": "atan2", "Sinh": "sinh", "Cosh": "cosh", "Tanh": "tanh",
	"Asinh": "asinh", "Acosh": "acosh", "Atanh": "atanh", "Hypot": "hypot", "Cbrt": "cbrt", "Mod": "fmod",
	"Copysign": "copysign", "Erf": "erf", "Erfc": "erfc", "Gamma": "tgamma", "FMA": "fma",
	"Remainder": "remainder",
}

func (f *fn) math(name string, e *ast.CallExpr) string {
	f.g.double = true
	args := make([]string, len(e.Args))
	for i, a := range e.Args {
		args[i] = f.expr(a)
	}
	if c, ok := mathFuncs[name]; ok {
		if !ptxMath[c] {
			f.g.noPTXAt(e, "math.%s has no NVPTX instruction, and clang has no libdevice to call", name)
		}
		return c + "(" + strings.Join(args, ", ") + ")"
	}
	switch name {
	case "Max", "Min":
		inf := "INFINITY"
		cmp := ">"
		if name == "Min" {
			inf, cmp = "(-INFINITY)", "<"
		}
		x, y := args[0], args[1]
		if !simpleC.MatchString(x) {
			x = f.temp("double", x)
		}
		if !simpleC.MatchString(y) {
			y = f.temp("double", y)
		}
		return fmt.Sprintf("((isinf(%s) && %s %s 0) || (isinf(%s) && %s %s 0) ? %s : %s)", x, x, cmp, y, y, cmp, inf,
			f.fminmax(strings.ToLower(name), "double", x, y))
	case "Dim":
		// Go's x - y where it is above 0, else 0: Dim(Inf, Inf) is NaN,
		// where C's fdim gives 0
		if _, ok := f.g.helpers["go_dim"]; !ok {
			f.g.helpers["go_dim"] = "static inline double go_dim(double x, double y) { double v = x - y; return v <= 0 ? 0.0 : v; }\n"
		}
		return "go_dim(" + args[0] + ", " + args[1] + ")"
	case "IsNaN":
		return "(isnan(" + args[0] + ") != 0)"
	case "Signbit":
		return "(signbit(" + args[0] + ") != 0)"
	case "IsInf":
		sign := f.info().Types[e.Args[1]].Value
		if sign == nil {
			f.refuse(e, "math.IsInf with a sign that is not a constant: not in the subset")
		}
		s, _ := constant.Int64Val(constant.ToInt(sign))
		switch {
		case s > 0:
			return "(isinf(" + args[0] + ") && " + args[0] + " > 0)"
		case s < 0:
			return "(isinf(" + args[0] + ") && " + args[0] + " < 0)"
		}
		return "(isinf(" + args[0] + ") != 0)"
	case "Inf":
		return "(" + args[0] + " >= 0 ? INFINITY : -INFINITY)"
	case "NaN":
		return "as_double(0x7FF8000000000001UL)"
	case "Float64bits":
		return "as_ulong(" + args[0] + ")"
	case "Float64frombits":
		return "as_double(" + args[0] + ")"
	case "Float32bits":
		return "as_uint(" + args[0] + ")"
	case "Float32frombits":
		return "as_float(" + args[0] + ")"
	}
	f.refuse(e, "math.%s: not in the subset (see docs/kernels.md for the math functions a device has)", name)
	return ""
}

// prelude is the C every generated program starts with: the fault record
// a failed check writes (the first to fail wins).
const prelude = `
static void go_fault(global long *f, int site, long a, long b, long flags)
{
	if (atomic_cmpxchg((volatile global int *)f, 0, site) == 0) {
		f[1] = a;
		f[2] = b;
		f[3] = flags;
	}
}
`
