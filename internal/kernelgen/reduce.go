package kernelgen

// offload.Reduce in a kernel: [0, n) is split into min(n, redChunks)
// chunks as a host device with redChunks cores splits it
// (workpool.Bounds), and one work-item reduces the chunks and combines
// their parts in chunk order. The result then depends only on n and the
// values: it is the host's with redChunks cores. (A work-group reduction
// across work-items is left for later: PoCL 3.1 hangs at the barrier of a
// kernel whose chunks are functions or jump with goto.)

import (
	"fmt"
	"go/ast"
	"go/constant"
	"go/token"
	"go/types"
	"math"
	"regexp"
	"slices"
	"strings"
)

// redChunks is the most chunks a Reduce on a device has.
const redChunks = 256

// builtinOps are the reduction identifiers of package reduction.
var builtinOps = map[string]bool{"Sum": true, "Prod": true, "Min": true, "Max": true, "BitAnd": true,
	"BitOr": true, "BitXor": true, "LogicalAnd": true, "LogicalOr": true}

// redOp is a built-in reduction operator over T.
type redOp struct {
	name string
	t    types.Type
}

// pkgFunc returns the package path and name of the package-level function
// that call calls, "" and "" if it calls none.
func (f *fn) pkgFunc(call *ast.CallExpr) (path, name string) {
	fun := ast.Unparen(call.Fun)
	switch x := fun.(type) {
	case *ast.IndexExpr:
		fun = x.X
	case *ast.IndexListExpr:
		fun = x.X
	}
	var id *ast.Ident
	switch x := fun.(type) {
	case *ast.SelectorExpr:
		id = x.Sel
	case *ast.Ident:
		id = x
	default:
		return "", ""
	}
	obj, ok := f.info().Uses[id].(*types.Func)
	if !ok || obj.Pkg() == nil || obj.Type().(*types.Signature).Recv() != nil {
		return "", ""
	}
	return obj.Pkg().Path(), obj.Name()
}

// offloadFunc returns the name of the package-level function of package
// offload that call calls, "" if it calls none.
func (f *fn) offloadFunc(call *ast.CallExpr) string {
	if path, name := f.pkgFunc(call); path == offloadPath {
		return name
	}
	return ""
}

// builtinOp returns the name of the reduction identifier of package
// reduction that call calls (reduction.Sum[float64]()), "" if none.
func (f *fn) builtinOp(call *ast.CallExpr) string {
	if path, name := f.pkgFunc(call); path == reductionPath && builtinOps[name] {
		return name
	}
	return ""
}

// isOp reports whether t is reduction.Op[T].
func isOp(t types.Type) bool {
	n, ok := types.Unalias(t).(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == reductionPath && n.Obj().Name() == "Op"
}

// opOf returns the built-in operator that e is: a call of a reduction
// identifier (reduction.Sum[float64]()) or a variable defined from one.
func (f *fn) opOf(e ast.Expr) redOp {
	e = ast.Unparen(e)
	if id, ok := e.(*ast.Ident); ok {
		if op, ok := f.ops[f.info().Uses[id]]; ok {
			return op
		}
	}
	if call, ok := e.(*ast.CallExpr); ok {
		if name := f.builtinOp(call); name != "" {
			t := types.Unalias(f.info().TypeOf(e)).(*types.Named).TypeArgs().At(0)
			if !isScalar(t) {
				f.refuse(e, "reduction.%s of %s: not in the subset (reductions of scalars)", name, t)
			}
			return redOp{name: name, t: t}
		}
	}
	f.refuse(e, "a user-defined Op (%s): not in the subset (package reduction's identifiers: Sum, Prod, Min, Max, BitAnd, BitOr, BitXor, LogicalAnd, LogicalOr)", types.ExprString(e))
	return redOp{}
}

// defineOp records op := reduction.Sum[T]() (or var op = …, or several
// such): an Op has no C. It reports whether s was that.
func (f *fn) defineOp(lhs []ast.Expr, rhs []ast.Expr, tok token.Token, at ast.Node) bool {
	ops := 0
	for _, r := range rhs {
		if isOp(f.info().TypeOf(r)) {
			ops++
		}
	}
	if ops == 0 {
		return false
	}
	if ops != len(rhs) || len(lhs) != len(rhs) {
		f.refuse(at, "Ops defined among other values: define them on their own (op := reduction.Sum[float64]())")
	}
	for i, l := range lhs {
		id, ok := l.(*ast.Ident)
		if !ok {
			f.refuse(l, "an Op stored other than in a variable: not in the subset")
		}
		op := f.opOf(rhs[i])
		v := f.info().Defs[id]
		if v == nil || tok != token.DEFINE && tok != token.VAR {
			f.refuse(at, "assignment to Op %s: define it once (op := reduction.Sum[float64]())", id.Name)
		}
		f.ops[v] = op
	}
	return true
}

// identity is op's identity in C.
func (f *fn) identity(op redOp, at ast.Node) string {
	t := op.t
	i, _ := intOf(t)
	var v constant.Value
	switch op.name {
	case "Prod":
		v = constant.MakeInt64(1)
	case "LogicalAnd":
		v = constant.MakeBool(true)
	case "Min", "Max":
		if isFloat(t) {
			inf := "INFINITY"
			if op.name == "Max" {
				inf = "(-INFINITY)"
			}
			return "((" + f.ctype(t, at) + ")" + inf + ")"
		}
		switch {
		case op.name == "Min" && i.signed:
			v = constant.MakeInt64(math.MaxInt64 >> (64 - i.bits))
		case op.name == "Min":
			v = constant.MakeUint64(math.MaxUint64 >> (64 - i.bits))
		case i.signed:
			v = constant.MakeInt64(math.MinInt64 >> (64 - i.bits))
		default:
			v = constant.MakeInt64(0)
		}
	case "BitAnd":
		if i.signed {
			v = constant.MakeInt64(-1)
		} else {
			v = constant.MakeUint64(math.MaxUint64 >> (64 - i.bits))
		}
	case "LogicalOr":
		v = constant.MakeBool(false)
	default:
		v = constant.MakeInt64(0)
	}
	if isFloat(t) {
		v = constant.ToFloat(v)
	}
	return f.literal(v, t, at)
}

// combine is op.Combine(a, b) in C, with Go's semantics.
func (f *fn) combine(op redOp, a, b string, at ast.Expr) string {
	t := op.t
	switch op.name {
	case "Sum":
		return f.arith(token.ADD, a, b, t, at)
	case "Prod":
		return f.arith(token.MUL, a, b, t, at)
	case "BitAnd":
		return f.arith(token.AND, a, b, t, at)
	case "BitOr":
		return f.arith(token.OR, a, b, t, at)
	case "BitXor":
		return f.arith(token.XOR, a, b, t, at)
	case "LogicalAnd":
		return "(" + a + " && " + b + ")"
	case "LogicalOr":
		return "(" + a + " || " + b + ")"
	}
	name := "min"
	if op.name == "Max" {
		name = "max"
	}
	ct := f.ctype(t, at)
	if isFloat(t) {
		return f.fminmax(name, ct, a, b)
	}
	return fmt.Sprintf("%s((%s)(%s), (%s)(%s))", name, ct, a, ct, b)
}

// opMember translates op.Identity and op.Combine(a, b) (call, or nil for
// a value) of a built-in op; ok false if e is not a member of an Op.
func (f *fn) opMember(e *ast.SelectorExpr, call *ast.CallExpr) (string, bool) {
	if !isOp(f.info().TypeOf(e.X)) {
		return "", false
	}
	op := f.opOf(e.X)
	switch {
	case e.Sel.Name == "Identity" && call == nil:
		return f.identity(op, e), true
	case e.Sel.Name == "Combine" && call != nil:
		a := f.expr(call.Args[0])
		if !simpleC.MatchString(a) {
			a = f.temp(f.ctype(op.t, call), a)
		}
		b := f.expr(call.Args[1])
		return f.combine(op, a, b, call), true
	}
	f.refuse(e, "op.%s used so: only op.Identity and calls of op.Combine are in the subset", e.Sel.Name)
	return "", false
}

// reduceOf returns the offload.Reduce call whose result statement s
// assigns or defines (r := offload.Reduce(…), out[0] = …), nil if none.
func (f *fn) reduceOf(s ast.Stmt) *ast.CallExpr {
	var rhs []ast.Expr
	switch s := s.(type) {
	case *ast.AssignStmt:
		rhs = s.Rhs
	case *ast.DeclStmt:
		if gd, ok := s.Decl.(*ast.GenDecl); ok && gd.Tok == token.VAR && len(gd.Specs) == 1 {
			rhs = gd.Specs[0].(*ast.ValueSpec).Values
		}
	}
	if len(rhs) != 1 {
		return nil
	}
	if call, ok := ast.Unparen(rhs[0]).(*ast.CallExpr); ok && f.offloadFunc(call) == "Reduce" {
		return call
	}
	return nil
}

// reduceIndex returns the index of the statement of body that assigns
// offload.Reduce's result, -1 if none does.
func (f *fn) reduceIndex(body *ast.BlockStmt) int {
	for i, s := range body.List {
		if f.reduceOf(s) != nil {
			return i
		}
	}
	return -1
}

// lastIdent matches the name a C parameter declares.
var lastIdent = regexp.MustCompile(`[A-Za-z_][A-Za-z0-9_]*$`)

// reduceKernel translates kernel k, whose statement red assigns the
// result of offload.Reduce(ctx, n, op, func(lo, hi int, acc T) T {…}).
// The entry runs on one work-item: it reduces chunk c with function
// entry_chunk (the setup, then the body), combines the parts in chunk
// order and runs entry_tail (the setup again, then the statements after
// red). A failed check in a chunk returns from entry_chunk, and the entry
// then stops.
func (g *gen) reduceKernel(k *kernelDecl, entry string, params []string, red int) string {
	list := k.fnBody.List
	var args []string
	f, _ := g.entryFn(k)
	for i, s := range list {
		if f.isFor(s) != nil {
			f.refuse(s, "ctx.For in a kernel with offload.Reduce: one parallel loop a kernel (split the kernel)")
		}
		if i > red && f.reduceOf(s) != nil {
			f.refuse(s, "a second offload.Reduce: one a kernel (split the kernel, or reduce a struct of results with a loop of your own)")
		}
	}
	call := f.reduceOf(list[red])
	if len(call.Args) != 4 {
		f.refuse(call, "offload.Reduce with %d arguments", len(call.Args))
	}
	if id, ok := ast.Unparen(call.Args[0]).(*ast.Ident); !ok || f.ctx == nil || f.info().Uses[id] != f.ctx {
		f.refuse(call.Args[0], "offload.Reduce of a context other than the kernel's ctx: not in the subset")
	}
	lit, ok := ast.Unparen(call.Args[3]).(*ast.FuncLit)
	if !ok {
		f.refuse(call.Args[3], "offload.Reduce's body is not a function literal")
	}
	f.indent = 1
	f.setup = true
	f.block(list[:red])
	f.setup = false
	op := f.opOf(call.Args[2])
	ct := f.ctype(op.t, call)
	n := f.temp("long", "(long)("+f.expr(call.Args[1])+")")
	f.line("*go_rk = %s <= 0 ? 0 : %s < %d ? %s : %d;", n, n, redChunks, n, redChunks)
	f.line("if (go_rl >= *go_rk)")
	f.line("\treturn;")
	// chunk go_rl of go_rk, as workpool.Bounds splits [0, n)
	f.line("long go_rq = %s / *go_rk, go_rr = %s %% *go_rk;", n, n)
	sig := f.info().TypeOf(lit).(*types.Signature)
	f.outer = map[types.Object]bool{}
	for v := range f.names {
		f.outer[v] = true
	}
	lo, hi := f.define(sig.Params().At(0), "go_lo"), f.define(sig.Params().At(1), "go_hi")
	f.line("long %s = go_rl * go_rq + (go_rl < go_rr ? go_rl : go_rr);", lo)
	f.line("long %s = %s + go_rq + (go_rl < go_rr ? 1 : 0);", hi, lo)
	f.line("%s %s = %s;", ct, f.define(sig.Params().At(2), "go_acc"), f.identity(op, call))
	f.inChunk, f.inReduce = true, true
	if g.checks {
		f.line("go_fl = 2;")
		f.usesFl = true
	}
	f.block(lit.Body.List)
	f.inChunk, f.inReduce = false, false
	chunkBody := f.out.String()
	chunkFl := f.usesFl

	t, _ := g.entryFn(k)
	t.indent = 1
	t.setup = true
	t.block(list[:red])
	t.setup = false
	switch s := list[red].(type) {
	case *ast.AssignStmt:
		t.assign1(s, s.Lhs[0], "go_r")
	case *ast.DeclStmt:
		vs := s.Decl.(*ast.GenDecl).Specs[0].(*ast.ValueSpec)
		t.declare(t.info().Defs[vs.Names[0]].(*types.Var), vs, "go_r")
	}
	t.block(list[red+1:])
	// the entry's and both functions' parameters: the variables of both
	for _, tg := range t.globals {
		if !slices.ContainsFunc(f.globals, func(fg kernelGlobal) bool { return fg.name == tg.name }) {
			f.globals = append(f.globals, tg)
		}
	}
	g.lastGlobals = f.globals
	params = withGlobals(params, f.globalParams())
	args = args[:0]
	for _, p := range params {
		args = append(args, lastIdent.FindString(p))
	}
	pl, al := strings.Join(params, ", "), strings.Join(args, ", ")
	var b strings.Builder
	fmt.Fprintf(&b, "static void %s_chunk(%s, long go_rl, long *go_rk, %s *go_part)\n{\n", entry, pl, ct)
	if chunkFl {
		b.WriteString("\tint go_fl = 0;\n")
	}
	b.WriteString(chunkBody + "}\n\n")
	fmt.Fprintf(&b, "static void %s_tail(%s, %s go_r)\n{\n", entry, pl, ct)
	if t.usesFl {
		b.WriteString("\tint go_fl = 0;\n")
	}
	b.WriteString(t.out.String() + "}\n\n")

	fmt.Fprintf(&b, "kernel void %s(%s)\n{\n", entry, pl)
	e := &fn{g: g, out: &b, indent: 1}
	e.line("if (get_global_id(0) != 0)")
	e.line("\treturn; /* offload.Reduce: one work-item reduces the chunks in order */")
	e.line("long go_rk = 0;")
	e.line("%s go_r = %s;", ct, f.identity(op, call))
	e.line("for (long go_c = 0; go_c == 0 || go_c < go_rk; go_c++) {")
	e.line("\t%s go_part = %s;", ct, f.identity(op, call))
	e.line("\t%s_chunk(%s, go_c, &go_rk, &go_part);", entry, al)
	if g.checks {
		e.line("\tif (*(volatile global int *)go_f != 0)")
		e.line("\t\treturn; /* a chunk failed a check */")
	}
	e.line("\tif (go_c >= go_rk)")
	e.line("\t\tbreak; /* n <= 0: no chunks */")
	e.line("\tgo_r = go_c == 0 ? go_part : %s;", f.combine(op, "go_r", "go_part", call))
	e.line("}")
	e.line("%s_tail(%s, go_r);", entry, al)
	b.WriteString("}\n")
	return b.String()
}

// redReturn translates return x in a Reduce body: x is the chunk's part.
func (f *fn) redReturn(s *ast.ReturnStmt) {
	f.line("*go_part = %s;", f.expr(s.Results[0]))
	f.line("return;")
}
