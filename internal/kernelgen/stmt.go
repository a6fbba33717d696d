package kernelgen

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"slices"
	"strings"
)

// sliceRef is how a slice variable is reached in C: its pointer and the
// expression of its length.
type sliceRef struct {
	ptr, len string
	elem     types.Type
}

// target is a loop or switch that break or continue may leave.
type target struct {
	loop              bool
	brk, cont         string // C labels
	brkUsed, contUsed bool
	contGoto          bool // continue must jump to cont (a loop whose post is not C's)
	label             string
}

// fn is the translation of one function: the kernel's entry or a
// package-level function it calls.
type fn struct {
	g      *gen
	kernel bool
	ret    types.Type // a function's result type (nil: none)
	names  map[types.Object]string
	used   map[string]bool
	slices map[*types.Var]sliceRef
	// fields are the C names of the plain fields of a struct parameter
	// with slices, by field index, and fieldSlices its slice fields.
	fields      map[*types.Var][]string
	fieldSlices map[*types.Var]map[int]sliceRef
	// paramLens are the lengths of the kernel's slice parameters; hoist is
	// the element variable whose checks x[i] of them are left to the
	// caller (hoisted, their lengths), while translating the fast path.
	paramLens  map[string]bool
	hoist      *types.Var
	hoisted    []string
	ctx        *types.Var
	boolParams []string
	out        *strings.Builder
	indent     int
	tmp        int
	setup      bool                   // before the kernel's ctx.For
	inChunk    bool                   // in the ctx.For body
	outer      map[types.Object]bool  // variables from outside the ctx.For body
	chunkNext  bool                   // a return in the chunk jumps to go_next
	usesFl     bool                   // the kernel calls functions (go_fl)
	ops        map[types.Object]redOp // Op variables, by variable
	inReduce   bool                   // in an offload.Reduce body
	globals    []kernelGlobal         // declare target variables used
	targets    []*target
}

func newFn(g *gen, kernel bool) *fn {
	return &fn{g: g, kernel: kernel, names: map[types.Object]string{}, used: map[string]bool{},
		slices: map[*types.Var]sliceRef{}, out: &strings.Builder{},
		fields: map[*types.Var][]string{}, fieldSlices: map[*types.Var]map[int]sliceRef{}, paramLens: map[string]bool{},
		ops: map[types.Object]redOp{}}
}

func (f *fn) info() *types.Info { return f.g.p.info }

func (f *fn) refuse(n ast.Node, format string, args ...any) {
	panic(f.g.p.errorf(n, format, args...))
}

// line writes one line of C at the current indentation.
func (f *fn) line(format string, args ...any) {
	f.out.WriteString(strings.Repeat("\t", f.indent))
	fmt.Fprintf(f.out, format, args...)
	f.out.WriteByte('\n')
}

// capture runs do with the output redirected, one level deeper, and
// returns what it wrote and its result.
func (f *fn) capture(do func() string) (pre, val string) {
	old := f.out
	f.out = &strings.Builder{}
	f.indent++
	val = do()
	f.indent--
	pre = f.out.String()
	f.out = old
	return pre, val
}

// temp declares a temporary of C type ct holding expr and returns its name.
func (f *fn) temp(ct, expr string) string {
	f.tmp++
	name := fmt.Sprintf("go_t%d", f.tmp)
	f.line("%s %s = %s;", ct, name, expr)
	return name
}

func (f *fn) label(what string) string {
	f.tmp++
	return fmt.Sprintf("go_%s%d", what, f.tmp)
}

// define gives variable v its C name.
func (f *fn) define(v types.Object, fallback string) string {
	base := v.Name()
	if base == "" || base == "_" {
		base = fallback
	}
	if reserved[base] || strings.HasPrefix(base, "go_") {
		base += "_"
	}
	name := base
	for n := 2; f.used[name]; n++ {
		name = fmt.Sprintf("%s_%d", base, n)
	}
	f.used[name] = true
	f.names[v] = name
	return name
}

// fail is the C statement that records a failed check at site and leaves.
func (f *fn) fail(site int, a, b string) string {
	if f.kernel {
		flags := 0
		if f.inChunk {
			flags = 1
		}
		return fmt.Sprintf("{ go_fault(go_f, %d, (long)(%s), (long)(%s), %d); return; }", site, a, b, flags)
	}
	return fmt.Sprintf("{ go_fault(go_f, %d, (long)(%s), (long)(%s), *go_fl >> 1); *go_fl |= 1; return%s; }", site, a, b, f.retZero())
}

// afterCall is the C statement that leaves when a called function failed.
func (f *fn) afterCall() string {
	if f.kernel {
		f.usesFl = true
		return "if (go_fl & 1) return;"
	}
	return fmt.Sprintf("if (*go_fl & 1) return%s;", f.retZero())
}

func (f *fn) retZero() string {
	if f.ret == nil {
		return ""
	}
	return " " + f.zero(f.ret)
}

// zero is the zero value of scalar type t.
func (f *fn) zero(t types.Type) string {
	switch {
	case isBool(t):
		return "false"
	case isFloat32(t):
		return "0.0f"
	case isFloat(t):
		return "0.0"
	case isStruct(t):
		return "go_zero_" + f.ctype(t, nil) + "()"
	}
	return "(" + f.ctype(t, nil) + ")0"
}

func (f *fn) block(list []ast.Stmt) {
	for _, s := range list {
		f.stmt(s)
	}
}

func (f *fn) stmt(s ast.Stmt) {
	switch s := s.(type) {
	case *ast.BlockStmt:
		f.line("{")
		f.indent++
		f.block(s.List)
		f.indent--
		f.line("}")
	case *ast.EmptyStmt:
	case *ast.ExprStmt:
		call, ok := ast.Unparen(s.X).(*ast.CallExpr)
		if !ok {
			f.refuse(s, "an expression statement that is not a call")
		}
		if f.isFor(s) != nil {
			f.refuse(s, "ctx.For inside a statement: only a ctx.For at the top level of the kernel's body is in the subset")
		}
		if v := f.call(call, true); v != "" {
			f.line("(void)(%s);", v)
		}
	case *ast.DeclStmt:
		f.decl(s)
	case *ast.AssignStmt:
		f.assign(s)
	case *ast.IncDecStmt:
		op := token.ADD
		if s.Tok == token.DEC {
			op = token.SUB
		}
		lv, t := f.lvalue(s.X)
		f.line("%s = %s;", lv, f.arith(op, lv, "1", t, s.X))
	case *ast.IfStmt:
		f.ifStmt(s)
	case *ast.ForStmt:
		f.forStmt(s, "")
	case *ast.RangeStmt:
		f.rangeStmt(s, "")
	case *ast.SwitchStmt:
		f.switchStmt(s, "")
	case *ast.LabeledStmt:
		switch t := s.Stmt.(type) {
		case *ast.ForStmt:
			f.forStmt(t, s.Label.Name)
		case *ast.RangeStmt:
			f.rangeStmt(t, s.Label.Name)
		case *ast.SwitchStmt:
			f.switchStmt(t, s.Label.Name)
		default:
			f.refuse(s, "a label on a statement other than for, range or switch (goto is not in the subset)")
		}
	case *ast.BranchStmt:
		f.branch(s)
	case *ast.ReturnStmt:
		f.returnStmt(s)
	case *ast.GoStmt:
		f.refuse(s, "a go statement: not in the subset")
	case *ast.DeferStmt:
		f.refuse(s, "defer: not in the subset")
	case *ast.SelectStmt, *ast.SendStmt:
		f.refuse(s, "a channel operation: not in the subset")
	case *ast.TypeSwitchStmt:
		f.refuse(s, "a type switch: not in the subset (no interfaces)")
	default:
		f.refuse(s, "a %T: not in the subset", s)
	}
}

func (f *fn) decl(s *ast.DeclStmt) {
	gd := s.Decl.(*ast.GenDecl)
	switch gd.Tok {
	case token.CONST:
		return // constants are folded where they are used
	case token.TYPE:
		f.refuse(s, "a type declaration in a kernel: not in the subset")
	}
	for _, sp := range gd.Specs {
		vs := sp.(*ast.ValueSpec)
		lhs := make([]ast.Expr, len(vs.Names))
		for i, id := range vs.Names {
			lhs[i] = id
		}
		if f.defineOp(lhs, vs.Values, token.VAR, vs) {
			continue
		}
		if len(vs.Values) != 0 && len(vs.Values) != len(vs.Names) {
			f.refuse(vs, "a declaration of several variables from one call: not in the subset")
		}
		vals := make([]string, len(vs.Values))
		for i, v := range vs.Values {
			vals[i] = f.expr(v)
		}
		for i, id := range vs.Names {
			v := f.info().Defs[id].(*types.Var)
			if len(vals) == 0 {
				f.declZero(v, id)
				continue
			}
			f.declare(v, id, vals[i])
		}
	}
}

// declZero declares v with its zero value: a scalar or a fixed-size
// array of scalars.
func (f *fn) declZero(v *types.Var, at ast.Node) {
	if arr, ok := v.Type().Underlying().(*types.Array); ok {
		dims := ""
		var t types.Type = arr
		for {
			a, ok := t.Underlying().(*types.Array)
			if !ok {
				break
			}
			dims += fmt.Sprintf("[%d]", a.Len())
			t = a.Elem()
		}
		ct := f.ctype(t, at)
		f.line("%s %s%s = {0};", ct, f.define(v, "go_v"), dims)
		return
	}
	f.checkScalarVar(v, at)
	f.line("%s %s = %s;", f.ctype(v.Type(), at), f.define(v, "go_v"), f.zero(v.Type()))
}

func (f *fn) checkScalarVar(v *types.Var, at ast.Node) {
	if isStruct(v.Type()) {
		f.ctype(v.Type(), at) // its fields in the subset
		return
	}
	switch v.Type().Underlying().(type) {
	case *types.Struct:
		f.refuse(at, "a variable %s of an unnamed struct type: not in the subset (declare the struct type)", v.Name())
	case *types.Slice:
		f.refuse(at, "a slice variable %s: only parameters are slices in the subset (index the parameter)", v.Name())
	case *types.Basic:
		return
	}
	f.refuse(at, "a variable %s of type %s: not in the subset (scalars and fixed-size arrays of them)", v.Name(), v.Type())
}

// declare declares v with the value val.
func (f *fn) declare(v *types.Var, at ast.Node, val string) {
	f.checkScalarVar(v, at)
	ct := f.ctype(v.Type(), at)
	f.line("%s %s = %s;", ct, f.define(v, "go_v"), val)
}

func (f *fn) assign(s *ast.AssignStmt) {
	if len(s.Lhs) != len(s.Rhs) {
		f.refuse(s, "an assignment of several values from one call: not in the subset (functions have one result)")
	}
	switch s.Tok {
	case token.DEFINE, token.ASSIGN:
	default:
		// x op= y
		op := map[token.Token]token.Token{token.ADD_ASSIGN: token.ADD, token.SUB_ASSIGN: token.SUB, token.MUL_ASSIGN: token.MUL,
			token.QUO_ASSIGN: token.QUO, token.REM_ASSIGN: token.REM, token.AND_ASSIGN: token.AND, token.OR_ASSIGN: token.OR,
			token.XOR_ASSIGN: token.XOR, token.SHL_ASSIGN: token.SHL, token.SHR_ASSIGN: token.SHR, token.AND_NOT_ASSIGN: token.AND_NOT}[s.Tok]
		lv, t := f.lvalue(s.Lhs[0])
		y := f.expr(s.Rhs[0])
		var v string
		switch op {
		case token.SHL, token.SHR:
			v = f.shift(op, lv, y, t, s.Rhs[0], s)
		default:
			v = f.arith(op, lv, y, t, s.Rhs[0])
		}
		f.line("%s = %s;", lv, f.store(v, t))
		return
	}
	if f.defineSlices(s) || f.defineOp(s.Lhs, s.Rhs, s.Tok, s) {
		return
	}
	if len(s.Lhs) == 1 {
		f.assign1(s, s.Lhs[0], f.expr(s.Rhs[0]))
		return
	}
	// a, b = b, a: the values first, then the assignments in order
	vals := make([]string, len(s.Rhs))
	for i, r := range s.Rhs {
		vals[i] = f.temp(f.ctype(f.info().TypeOf(r), r), f.expr(r))
	}
	for i, l := range s.Lhs {
		f.assign1(s, l, vals[i])
	}
}

// defineSlices translates row, up := x[a:b], x[c:d]: new slice variables,
// views of a parameter's elements (and scalars defined beside them, as in
// t, row := 0.0, x[a:b]). It reports whether s was that.
func (f *fn) defineSlices(s *ast.AssignStmt) bool {
	if s.Tok != token.DEFINE {
		return false
	}
	isSlice := func(r ast.Expr) bool {
		_, ok := f.info().TypeOf(r).Underlying().(*types.Slice)
		return ok
	}
	if !slices.ContainsFunc(s.Rhs, isSlice) || len(s.Lhs) != len(s.Rhs) {
		return false
	}
	// the values first, in order (a scalar among them in a temporary),
	// then the definitions
	refs := make([]sliceRef, len(s.Rhs))
	vals := make([]string, len(s.Rhs))
	for i, r := range s.Rhs {
		if isSlice(r) {
			refs[i] = f.sliceValue(r)
			continue
		}
		vals[i] = f.temp(f.ctype(f.typeOf(r), r), f.expr(r))
	}
	for i, l := range s.Lhs {
		if !isSlice(s.Rhs[i]) {
			f.assign1(s, l, vals[i])
			continue
		}
		id := l.(*ast.Ident)
		v, ok := f.info().Defs[id].(*types.Var)
		if !ok || id.Name == "_" {
			if id.Name != "_" {
				f.refuse(l, "assignment to slice %s: slices are not variables in the subset (define a new one)", id.Name)
			}
			continue
		}
		name := f.define(v, "go_v")
		f.line("global %s *%s = %s;", f.storeType(refs[i].elem, l), name, refs[i].ptr)
		f.line("long go_len_%s = %s;", name, refs[i].len)
		f.slices[v] = sliceRef{ptr: name, len: "go_len_" + name, elem: refs[i].elem}
	}
	return true
}

// assign1 assigns val to l (defining it for :=).
func (f *fn) assign1(s *ast.AssignStmt, l ast.Expr, val string) {
	if id, ok := l.(*ast.Ident); ok {
		if id.Name == "_" {
			f.line("(void)(%s);", val)
			return
		}
		if s.Tok == token.DEFINE {
			if v, ok := f.info().Defs[id].(*types.Var); ok {
				f.declare(v, id, val)
				return
			}
		}
	}
	lv, t := f.lvalue(l)
	f.line("%s = %s;", lv, f.store(val, t))
}

// store converts val for storing in a location of type t (a bool in a
// buffer is a uchar).
func (f *fn) store(val string, t types.Type) string {
	if isBool(t) {
		return "(" + val + ")"
	}
	return val
}

// lvalue translates an assignable expression: a variable or an element
// of a slice or array. It returns the C lvalue and its Go type.
func (f *fn) lvalue(e ast.Expr) (string, types.Type) {
	e = ast.Unparen(e)
	t := f.info().TypeOf(e)
	switch e := e.(type) {
	case *ast.Ident:
		obj := f.info().Uses[e]
		name, ok := f.names[obj]
		if !ok {
			if v, ok := obj.(*types.Var); ok && v.Parent() == f.g.p.types.Scope() {
				f.refuse(e, "assignment to package-level variable %s: a kernel's outputs are its buffers", e.Name)
			}
			f.refuse(e, "assignment to %s: not in the subset", e.Name)
		}
		if v, ok := obj.(*types.Var); ok {
			if _, isSlice := f.slices[v]; isSlice {
				f.refuse(e, "assignment to slice %s: slices are the kernel's buffers, not variables, in the subset", e.Name)
			}
			if _, isArr := v.Type().Underlying().(*types.Array); isArr {
				f.refuse(e, "assignment to array %s as a whole: assign its elements", e.Name)
			}
		}
		if f.inChunk && f.outer[obj] {
			f.refuse(e, "assignment to %s, a variable from outside ctx.For's body: chunks run at once, each on its own copy on a device (write a buffer)", e.Name)
		}
		return name, t
	case *ast.IndexExpr:
		if _, ok := f.info().TypeOf(e.X).Underlying().(*types.Slice); ok && f.setup {
			f.refuse(e, "a buffer written before ctx.For: every work-item runs the code before ctx.For, so only scalar setup may be there")
		}
		return f.index(e), t
	case *ast.SelectorExpr:
		if sel, ok := f.info().Selections[e]; ok && sel.Kind() == types.FieldVal && isStruct(f.info().TypeOf(e.X)) {
			if id, ok := ast.Unparen(e.X).(*ast.Ident); ok {
				if v, ok := f.info().Uses[id].(*types.Var); ok && f.fields[v] != nil {
					f.refuse(e, "assignment to field %s of a struct parameter with slices: not in the subset (copy it to a variable)", e.Sel.Name)
				}
			}
			x, _ := f.lvalue(e.X)
			return x + "." + fieldName(e.Sel.Name), t
		}
	}
	f.refuse(e, "assignment to a %s: not in the subset", nodeName(e))
	return "", nil
}

func (f *fn) ifStmt(s *ast.IfStmt) {
	f.line("{")
	f.indent++
	if s.Init != nil {
		f.stmt(s.Init)
	}
	c := f.expr(s.Cond)
	f.line("if (%s) {", c)
	f.indent++
	f.block(s.Body.List)
	f.indent--
	if s.Else == nil {
		f.line("}")
	} else {
		f.line("} else {")
		f.indent++
		if b, ok := s.Else.(*ast.BlockStmt); ok {
			f.block(b.List)
		} else {
			f.stmt(s.Else)
		}
		f.indent--
		f.line("}")
	}
	f.indent--
	f.line("}")
}
