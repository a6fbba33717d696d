package kernelgen

// Declare target variables in a kernel: X.On(ctx), X a package-level
// variable that offload.DeclareTarget or DeclareTargetLink declares, is
// the device's copy, which the kind passes as hidden parameters (a
// pointer and a length) after the slice lengths.

import (
	"go/ast"
	"go/types"
	"strings"
)

// kernelGlobal is a declare target variable a kernel uses.
type kernelGlobal struct {
	name string // the name it was declared with
	ref  sliceRef
}

// globalOn returns the slice that e, X.On(ctx), is; ok false if e is not
// a call of On.
func (f *fn) globalOn(e ast.Expr) (sliceRef, bool) {
	call, ok := ast.Unparen(e).(*ast.CallExpr)
	if !ok {
		return sliceRef{}, false
	}
	sel, ok := ast.Unparen(call.Fun).(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "On" {
		return sliceRef{}, false
	}
	ptr, ok := f.info().TypeOf(sel.X).(*types.Pointer)
	if !ok {
		return sliceRef{}, false
	}
	n, ok := types.Unalias(ptr.Elem()).(*types.Named)
	if !ok || n.Obj().Pkg() == nil || n.Obj().Pkg().Path() != offloadPath || n.Obj().Name() != "Global" {
		return sliceRef{}, false
	}
	if !f.kernel {
		f.refuse(e, "X.On(ctx) in a function: only the kernel's body has ctx (pass the slice X.On(ctx) to the function)")
	}
	if id, ok := ast.Unparen(call.Args[0]).(*ast.Ident); !ok || f.info().Uses[id] != f.ctx || f.ctx == nil {
		f.refuse(call.Args[0], "On of a context other than the kernel's ctx: not in the subset")
	}
	id, ok := ast.Unparen(sel.X).(*ast.Ident)
	var v *types.Var
	if ok {
		v, _ = f.info().Uses[id].(*types.Var)
	}
	if v == nil || v.Parent() != f.g.p.types.Scope() {
		f.refuse(sel.X, "On of a declare target variable that is not a package-level variable of this package: not in the subset")
	}
	name := f.g.p.globalName(v)
	if name == "" {
		f.refuse(sel.X, "declare target variable %s: not declared by offload.DeclareTarget or DeclareTargetLink with a constant name in its package-level var", v.Name())
	}
	for _, g := range f.globals {
		if g.name == name {
			return g.ref, true
		}
	}
	c := "go_g_" + cIdent(name)
	elem := n.TypeArgs().At(0)
	ref := sliceRef{ptr: c, len: "go_len_" + c, elem: elem}
	f.storeType(elem, e) // in the subset
	f.globals = append(f.globals, kernelGlobal{name: name, ref: ref})
	return ref, true
}

// globalName is the name that package-level variable v was declared
// with (offload.DeclareTarget("name", …)), "" if none.
func (p *pkg) globalName(v *types.Var) string {
	for _, file := range p.files {
		for _, d := range file.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, s := range gd.Specs {
				vs, ok := s.(*ast.ValueSpec)
				if !ok || len(vs.Values) != len(vs.Names) {
					continue
				}
				for i, id := range vs.Names {
					if p.info.Defs[id] != v {
						continue
					}
					call, ok := ast.Unparen(vs.Values[i]).(*ast.CallExpr)
					if !ok || len(call.Args) != 2 {
						return ""
					}
					fun := ast.Unparen(call.Fun)
					if ix, ok := fun.(*ast.IndexExpr); ok {
						fun = ix.X
					}
					sel, ok := fun.(*ast.SelectorExpr)
					if !ok || sel.Sel.Name != "DeclareTarget" && sel.Sel.Name != "DeclareTargetLink" {
						return ""
					}
					if obj := p.info.Uses[sel.Sel]; obj == nil || obj.Pkg() == nil || obj.Pkg().Path() != offloadPath {
						return ""
					}
					if tv := p.info.Types[call.Args[0]]; tv.Value != nil {
						return strings.Trim(tv.Value.ExactString(), `"`)
					}
					return ""
				}
			}
		}
	}
	return ""
}

// globalParams are the hidden parameters of f's declare target variables.
func (f *fn) globalParams() []string {
	var ps []string
	for _, g := range f.globals {
		ps = append(ps, "global "+f.storeType(g.ref.elem, nil)+" *"+g.ref.ptr, "long "+g.ref.len)
	}
	return ps
}
