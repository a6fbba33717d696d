package kernelgen

// Control flow: loops, switches, branches and returns, with the break and
// continue targets they leave through.

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"strings"
)

func (f *fn) push(loop bool, label string) *target {
	t := &target{loop: loop, brk: f.label("brk"), cont: f.label("cont"), label: label}
	f.targets = append(f.targets, t)
	return t
}

func (f *fn) pop() { f.targets = f.targets[:len(f.targets)-1] }

// continuedTo reports whether body has a continue with label.
func continuedTo(body ast.Node, label string) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		if b, ok := n.(*ast.BranchStmt); ok && b.Tok == token.CONTINUE && b.Label != nil && b.Label.Name == label {
			found = true
		}
		_, lit := n.(*ast.FuncLit)
		return !found && !lit
	})
	return found
}

func (f *fn) forStmt(s *ast.ForStmt, label string) {
	f.line("{")
	f.indent++
	if s.Init != nil {
		f.stmt(s.Init)
	}
	condPre, cond := "", ""
	if s.Cond != nil {
		condPre, cond = f.capture(func() string { return f.expr(s.Cond) })
	}
	postPre := ""
	if s.Post != nil {
		postPre, _ = f.capture(func() string { f.stmt(s.Post); return "" })
	}
	post, simplePost := "", true
	if postPre != "" {
		l := strings.TrimSpace(postPre)
		if strings.Count(l, "\n") == 0 && strings.HasSuffix(l, ";") && !strings.HasPrefix(l, "{") {
			post = strings.TrimSuffix(l, ";")
		} else {
			simplePost = false
		}
	}
	t := f.push(true, label)
	canonical := condPre == "" && simplePost && (label == "" || !continuedTo(s.Body, label))
	if canonical {
		f.line("for (; %s; %s) {", cond, post)
	} else {
		t.contGoto = s.Post != nil
		f.line("for (;;) {")
		if s.Cond != nil {
			f.out.WriteString(condPre)
			f.line("\tif (!(%s))", cond)
			f.line("\t\tbreak;")
		}
	}
	f.indent++
	f.block(s.Body.List)
	if !canonical {
		if t.contUsed {
			f.line("%s: ;", t.cont)
		}
		f.indent--
		f.out.WriteString(postPre)
		f.indent++
	}
	f.indent--
	f.line("}")
	f.pop()
	if t.brkUsed {
		f.line("%s: ;", t.brk)
	}
	f.indent--
	f.line("}")
}

func (f *fn) rangeStmt(s *ast.RangeStmt, label string) {
	f.line("{")
	f.indent++
	xt := f.info().TypeOf(s.X)
	var n, elem string
	var keyType types.Type = types.Typ[types.Int]
	switch u := xt.Underlying().(type) {
	case *types.Basic:
		if u.Info()&types.IsInteger == 0 {
			f.refuse(s.X, "range over a %s: not in the subset (a slice, an array or an integer)", xt)
		}
		keyType = xt
		if u.Info()&types.IsUntyped != 0 {
			keyType = types.Typ[types.Int]
		}
		n = f.temp(f.ctype(keyType, s.X), f.expr(s.X))
	case *types.Slice:
		ref := f.sliceValue(s.X)
		n, elem = ref.len, ref.ptr
	case *types.Array:
		n = fmt.Sprintf("%dL", u.Len())
		elem = f.arrayBase(s.X)
	default:
		f.refuse(s.X, "range over a %s: not in the subset (a slice, an array or an integer)", xt)
	}
	t := f.push(true, label)
	k := f.label("k")
	f.line("for (%s %s = 0; %s < %s; %s++) {", f.ctype(keyType, s), k, k, n, k)
	f.indent++
	bind := func(e ast.Expr, val string) {
		if e == nil {
			return
		}
		if id, ok := e.(*ast.Ident); ok && id.Name == "_" {
			return
		}
		if s.Tok == token.DEFINE {
			f.declare(f.info().Defs[e.(*ast.Ident)].(*types.Var), e, val)
			return
		}
		lv, lt := f.lvalue(e)
		f.line("%s = %s;", lv, f.store(val, lt))
	}
	bind(s.Key, k)
	if s.Value != nil {
		bind(s.Value, elem+"["+k+"]")
	}
	f.block(s.Body.List)
	if t.contUsed {
		f.line("%s: ;", t.cont)
	}
	f.indent--
	f.line("}")
	f.pop()
	if t.brkUsed {
		f.line("%s: ;", t.brk)
	}
	f.indent--
	f.line("}")
}

func (f *fn) switchStmt(s *ast.SwitchStmt, label string) {
	f.line("{")
	f.indent++
	if s.Init != nil {
		f.stmt(s.Init)
	}
	tag := ""
	if s.Tag != nil {
		tt := f.info().TypeOf(s.Tag)
		tag = f.temp(f.ctype(tt, s.Tag), f.expr(s.Tag))
	}
	t := f.push(false, label)
	var def *ast.CaseClause
	open := 0
	first := true
	body := func(cc *ast.CaseClause) {
		f.indent++
		for _, st := range cc.Body {
			if b, ok := st.(*ast.BranchStmt); ok && b.Tok == token.FALLTHROUGH {
				f.refuse(b, "fallthrough: not in the subset")
			}
		}
		f.block(cc.Body)
		f.indent--
	}
	for _, c := range s.Body.List {
		cc := c.(*ast.CaseClause)
		if cc.List == nil {
			def = cc
			continue
		}
		if !first {
			f.line("else {")
			f.indent++
			open++
		}
		first = false
		cond := ""
		for _, e := range cc.List {
			pre, c := f.capture(func() string {
				if tag != "" {
					return "(" + tag + " == " + f.expr(e) + ")"
				}
				return f.expr(e)
			})
			switch {
			case cond == "" && pre == "":
				cond = c
			case cond == "":
				f.indent++
				f.out.WriteString(strings.ReplaceAll(pre, "\n\t", "\n"))
				f.indent--
				cond = c
			case pre == "":
				cond = cond + " || " + c
			default:
				tv := f.temp("bool", cond)
				f.line("if (!%s) {", tv)
				f.out.WriteString(pre)
				f.line("\t%s = %s;", tv, c)
				f.line("}")
				cond = tv
			}
		}
		f.line("if (%s) {", cond)
		body(cc)
		f.line("}")
	}
	if def != nil {
		if first {
			f.line("{")
		} else {
			f.line("else {")
		}
		body(def)
		f.line("}")
	}
	for ; open > 0; open-- {
		f.indent--
		f.line("}")
	}
	f.pop()
	if t.brkUsed {
		f.line("%s: ;", t.brk)
	}
	f.indent--
	f.line("}")
}

func (f *fn) branch(s *ast.BranchStmt) {
	var t *target
	innerLoop := -1
	for i := len(f.targets) - 1; i >= 0; i-- {
		if f.targets[i].loop {
			innerLoop = i
			break
		}
	}
	find := func(loopOnly bool) (*target, int) {
		for i := len(f.targets) - 1; i >= 0; i-- {
			tt := f.targets[i]
			if s.Label != nil {
				if tt.label == s.Label.Name {
					return tt, i
				}
				continue
			}
			if tt.loop || !loopOnly {
				return tt, i
			}
		}
		f.refuse(s, "%s outside a loop", s.Tok)
		return nil, 0
	}
	switch s.Tok {
	case token.BREAK:
		var i int
		t, i = find(false)
		if t.loop && i == innerLoop {
			f.line("break;")
			return
		}
		t.brkUsed = true
		f.line("goto %s;", t.brk)
	case token.CONTINUE:
		var i int
		t, i = find(true)
		if i == innerLoop && !t.contGoto {
			f.line("continue;")
			return
		}
		t.contUsed = true
		f.line("goto %s;", t.cont)
	default:
		f.refuse(s, "%s: not in the subset", s.Tok)
	}
}

func (f *fn) returnStmt(s *ast.ReturnStmt) {
	switch {
	case f.kernel && f.inReduce:
		f.redReturn(s)
	case f.kernel && f.inChunk:
		f.chunkNext = true
		f.line("goto go_next; /* return: the chunk is done */")
	case f.kernel:
		f.line("return;")
	case len(s.Results) == 0:
		f.line("return;")
	case len(s.Results) == 1:
		f.line("return %s;", f.expr(s.Results[0]))
	default:
		f.refuse(s, "a return of several results: not in the subset")
	}
}

// nodeName names an expression's kind for a refusal.
func nodeName(e ast.Node) string {
	switch e := e.(type) {
	case *ast.SliceExpr:
		return "slice expression"
	case *ast.StarExpr:
		return "pointer indirection"
	case *ast.SelectorExpr:
		return "selector " + e.Sel.Name
	case *ast.CompositeLit:
		return "composite literal"
	case *ast.FuncLit:
		return "function literal (a closure)"
	case *ast.TypeAssertExpr:
		return "type assertion"
	case *ast.BasicLit:
		return "literal"
	}
	return strings.TrimPrefix(fmt.Sprintf("%T", e), "*ast.")
}
