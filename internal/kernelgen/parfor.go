package kernelgen

// The kernel's body and its ctx.For: the parallel loop becomes the
// NDRange, one element per work-item where the global size covers it, a
// grid-stride loop otherwise.

import (
	"go/ast"
	"go/token"
	"go/types"
	"regexp"
	"strings"
)

// kernelBody translates the kernel's body: scalar setup, then at most one
// ctx.For at its top level, whose body every work-item runs for its own
// elements; a body without ctx.For runs on one work-item. (A kernel with
// offload.Reduce is reduce.go's.)
func (f *fn) kernelBody(b *ast.BlockStmt) string {
	f.indent = 1
	at := -1
	for i, s := range b.List {
		if f.isFor(s) != nil {
			if at >= 0 {
				f.refuse(s, "a second ctx.For: one ctx.For a kernel (split the kernel, or join the loops)")
			}
			at = i
		}
	}
	switch {
	case at < 0:
		f.line("if (get_global_id(0) != 0)")
		f.line("\treturn; /* no ctx.For: one work-item runs the body */")
		f.block(b.List)
	default:
		if at+1 < len(b.List) {
			f.refuse(b.List[at+1], "a statement after ctx.For: only scalar setup before it, and nothing after, is in the subset")
		}
		f.setup = true
		f.block(b.List[:at])
		f.setup = false
		f.chunkLoop(f.isFor(b.List[at]))
	}
	body := f.out.String()
	if f.usesFl {
		// go_fl's bit 0: a called function failed a check; bit 1: in a
		// ctx.For chunk (the fault record's flags).
		body = "\tint go_fl = 0;\n" + body
	}
	return body
}

// isFor returns the call if s is ctx.For(n, func(lo, hi int) {…}).
func (f *fn) isFor(s ast.Stmt) *ast.CallExpr {
	es, ok := s.(*ast.ExprStmt)
	if !ok || f.ctx == nil {
		return nil
	}
	call, ok := es.X.(*ast.CallExpr)
	if !ok {
		return nil
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "For" && sel.Sel.Name != "ForChunks" {
		return nil
	}
	if id, ok := sel.X.(*ast.Ident); ok && f.info().Uses[id] == f.ctx {
		return call
	}
	return nil
}

// chunkLoop translates ctx.For(n, body): each work-item runs body over
// chunks of one element, [i, i+1), for i from its global id in steps of
// the global size (so any NDRange covers [0, n)).
func (f *fn) chunkLoop(call *ast.CallExpr) {
	lit, ok := call.Args[1].(*ast.FuncLit)
	if !ok {
		f.refuse(call.Args[1], "ctx.For's body is not a function literal")
	}
	n := f.expr(call.Args[0])
	n = f.temp("long", n)
	f.outer = map[types.Object]bool{}
	for v := range f.names {
		f.outer[v] = true
	}
	f.inChunk = true
	if f.g.checks {
		f.line("go_fl = 2;")
		f.usesFl = true
	}
	sig := f.info().TypeOf(lit).(*types.Signature)
	f.indent++ // the body is written at the depth of the ifs elements writes
	if sig.Params().Len() == 1 {
		// ctx.ForChunks(n, func(c offload.Chunk) {…}): chunk go_i of n,
		// [go_i, go_i+1)
		c := sig.Params().At(0)
		ct := f.ctype(c.Type(), lit)
		body, _ := f.capture(func() string {
			name := f.define(c, "go_c")
			f.line("%s %s;", ct, name)
			f.line("%s.Index = go_i; %s.Count = %s; %s.Lo = go_i; %s.Hi = go_i + 1;", name, name, n, name, name)
			f.block(lit.Body.List)
			if f.chunkNext {
				f.line("go_next: ;")
			}
			return ""
		})
		f.indent--
		f.elements(n, body, "", nil)
		f.inChunk = false
		return
	}
	lo := f.define(sig.Params().At(0), "go_lo")
	hi := f.define(sig.Params().At(1), "go_hi")
	v, elems := f.elementLoop(lit, sig)
	translate := func(hoist *types.Var) string {
		f.chunkNext = false
		f.hoist, f.hoisted = hoist, nil
		body, _ := f.capture(func() string {
			if v != nil {
				// for i := lo; i < hi; i++ over a chunk of one element: i is go_i
				f.line("long %s = go_i;", f.define(v, "go_e"))
				f.block(elems)
			} else {
				f.line("long %s = go_i;", lo)
				f.line("long %s = go_i + 1;", hi)
				f.block(lit.Body.List)
			}
			if f.chunkNext {
				f.line("go_next: ;")
			}
			return ""
		})
		f.hoist = nil
		return body
	}
	slow := translate(nil)
	var fast string
	var conds []string
	if v != nil && f.g.checks && len(slow) <= maxTwice {
		// The element's own index checks, x[i] of a parameter x, hold for
		// every i < n where n <= len(x): the one-element path checks that
		// once instead, and takes the loop's (every check) where it fails.
		fast = translate(v)
		for _, l := range f.hoisted {
			conds = append(conds, n+" <= "+l)
		}
	}
	f.indent--
	f.elements(n, slow, fast, conds)
	f.inChunk = false
}

// elements writes the work-items' loop over [0, n) around body (which
// defines its variables from go_i). Where the NDRange covers [0, n), as
// the kinds' default does (a work-item per element of the slices a kernel
// writes), a work-item runs one element, without a loop, which drivers
// vectorize across work-items (PoCL does not vectorize a work-item's
// loop); else it loops in steps of the global size. A small body is
// written twice for this (the one-element path fast, if given, where
// conds hold); a large one only in the loop.
func (f *fn) elements(n, body, fast string, conds []string) {
	loop := func(body string) {
		f.line("for (long go_i = (long)get_global_id(0); go_i < %s; go_i += (long)get_global_size(0)) {", n)
		f.out.WriteString(body)
		f.line("}")
	}
	if len(body) > maxTwice {
		loop(strings.ReplaceAll(body, "\n\t", "\n")[1:])
		return
	}
	one := body
	if fast != "" {
		one = fast
	}
	f.line("if (%s) {", strings.Join(append([]string{"(long)get_global_size(0) >= " + n}, conds...), " && "))
	f.indent++
	f.line("long go_i = (long)get_global_id(0);")
	f.line("if (go_i < %s) {", n)
	f.out.WriteString(one)
	f.line("}")
	f.indent--
	f.line("} else {")
	f.indent++
	// the second copy's labels are its own
	loop(labels.ReplaceAllString(body, "${1}_l"))
	f.indent--
	f.line("}")
}

// maxTwice is the size in bytes of the largest chunk body that elements
// writes twice.
const maxTwice = 4096

// labels matches the C labels a translated body defines and jumps to.
var labels = regexp.MustCompile(`\b(go_(?:brk|cont|next)[0-9]*)\b`)

// elementLoop recognizes a ctx.For body that is one loop for i := lo;
// i < hi; i++ whose body neither assigns i nor breaks or continues: over a
// chunk of one element it runs once with i = lo, and is translated so
// (drivers vectorize a work-item without a loop better).
func (f *fn) elementLoop(lit *ast.FuncLit, sig *types.Signature) (*types.Var, []ast.Stmt) {
	if len(lit.Body.List) != 1 {
		return nil, nil
	}
	fs, ok := lit.Body.List[0].(*ast.ForStmt)
	if !ok || fs.Init == nil || fs.Cond == nil || fs.Post == nil {
		return nil, nil
	}
	info := f.info()
	init, ok := fs.Init.(*ast.AssignStmt)
	if !ok || init.Tok != token.DEFINE || len(init.Lhs) != 1 || len(init.Rhs) != 1 {
		return nil, nil
	}
	id, _ := init.Lhs[0].(*ast.Ident)
	lo, _ := init.Rhs[0].(*ast.Ident)
	if id == nil || lo == nil || info.Uses[lo] != sig.Params().At(0) {
		return nil, nil
	}
	v, _ := info.Defs[id].(*types.Var)
	cond, ok := fs.Cond.(*ast.BinaryExpr)
	if v == nil || !ok || cond.Op != token.LSS {
		return nil, nil
	}
	cx, _ := cond.X.(*ast.Ident)
	cy, _ := cond.Y.(*ast.Ident)
	if cx == nil || cy == nil || info.Uses[cx] != v || info.Uses[cy] != sig.Params().At(1) {
		return nil, nil
	}
	post, ok := fs.Post.(*ast.IncDecStmt)
	if pi, _ := post.X.(*ast.Ident); !ok || post.Tok != token.INC || pi == nil || info.Uses[pi] != v {
		return nil, nil
	}
	plain := true
	ast.Inspect(fs.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.BranchStmt, *ast.FuncLit:
			plain = false
		case *ast.AssignStmt:
			for _, l := range n.Lhs {
				if li, ok := l.(*ast.Ident); ok && info.Uses[li] == v {
					plain = false
				}
			}
		case *ast.IncDecStmt:
			if li, ok := n.X.(*ast.Ident); ok && info.Uses[li] == v {
				plain = false
			}
		}
		return plain
	})
	if !plain {
		return nil, nil
	}
	return v, fs.Body.List
}
