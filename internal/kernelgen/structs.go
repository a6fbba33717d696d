package kernelgen

// Structs of scalars: C structs of the same layout (Go and OpenCL C both
// align a field to its size on the devices goffload runs), by value,
// in slices and as local variables; a struct parameter is its fields, as
// the kinds pass it.

import (
	"fmt"
	"go/ast"
	"go/types"
	"strings"
)

// structOf returns t's struct type if t is a named struct type.
func structOf(t types.Type) (*types.Named, *types.Struct) {
	n, ok := types.Unalias(t).(*types.Named)
	if !ok {
		return nil, nil
	}
	s, ok := n.Underlying().(*types.Struct)
	if !ok {
		return nil, nil
	}
	return n, s
}

// structType is the C typedef of struct type t, declared on first use:
// its fields scalars (bool a uchar, as in a buffer) or structs of them.
func (f *fn) structType(t types.Type, at ast.Node) string {
	named, st := structOf(t)
	if named == nil {
		if _, ok := t.Underlying().(*types.Struct); ok {
			f.refuse(at, "an unnamed struct type: not in the subset (declare the struct type)")
		}
		return ""
	}
	g := f.g
	name := "go_T_" + named.Obj().Name()
	if pk := named.Obj().Pkg(); pk != g.p.types && pk != nil {
		name = "go_T_" + pk.Name() + "_" + named.Obj().Name()
	}
	if g.structs == nil {
		g.structs = map[*types.Named]string{}
	}
	if n, ok := g.structs[named]; ok {
		return n
	}
	if named.TypeArgs().Len() > 0 {
		f.refuse(at, "a generic struct type %s: not in the subset", named)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "typedef struct {\n")
	for i := range st.NumFields() {
		fl := st.Field(i)
		var ct string
		switch {
		case isScalar(fl.Type()):
			ct = f.storeType(fl.Type(), at)
		default:
			if _, s := structOf(fl.Type()); s != nil {
				ct = f.structType(fl.Type(), at)
				break
			}
			f.refuse(at, "struct %s: field %s of type %s: not in the subset (scalars and structs of them)", named.Obj().Name(), fl.Name(), fl.Type())
		}
		fmt.Fprintf(&b, "\t%s %s;\n", ct, fieldName(fl.Name()))
	}
	fmt.Fprintf(&b, "} %s;\n", name)
	fmt.Fprintf(&b, "static inline %s go_zero_%s(void) { %s z = {0}; return z; }\n", name, name, name)
	g.structs[named] = name
	g.structOrder = append(g.structOrder, b.String())
	return name
}

// fieldName is a struct field's C name.
func fieldName(n string) string {
	if reserved[n] || strings.HasPrefix(n, "go_") || n == "_" {
		return n + "_"
	}
	return n
}

// isStruct reports whether t is a named struct type.
func isStruct(t types.Type) bool {
	_, s := structOf(t)
	return s != nil
}

// selector translates x.f: a field of a struct parameter (a parameter of
// its own), or of a struct value.
func (f *fn) selector(e *ast.SelectorExpr) string {
	sel, ok := f.info().Selections[e]
	if !ok || sel.Kind() != types.FieldVal {
		return ""
	}
	if len(sel.Index()) != 1 {
		f.refuse(e, "an embedded field %s: not in the subset", e.Sel.Name)
	}
	if id, ok := ast.Unparen(e.X).(*ast.Ident); ok {
		if v, ok := f.info().Uses[id].(*types.Var); ok {
			if fs, ok := f.fields[v]; ok {
				name := fs[sel.Index()[0]]
				if _, isSlice := sel.Obj().Type().Underlying().(*types.Slice); isSlice {
					f.refuse(e, "slice field %s used as a value: only indexing, len and passing it to a function are in the subset", e.Sel.Name)
				}
				if isBool(sel.Obj().Type()) {
					return "(" + name + " != 0)"
				}
				return name
			}
		}
	}
	if !isStruct(f.info().TypeOf(e.X)) {
		f.refuse(e, "a field of a %s: not in the subset (structs of scalars)", f.info().TypeOf(e.X))
	}
	x := f.expr(e.X)
	v := "(" + x + ")." + fieldName(e.Sel.Name)
	if isBool(sel.Obj().Type()) {
		return "(" + v + " != 0)"
	}
	return v
}

// fieldSlice returns the slice that x.f is where x is a struct parameter
// and f a slice field of it.
func (f *fn) fieldSlice(e ast.Expr) (sliceRef, bool) {
	se, ok := ast.Unparen(e).(*ast.SelectorExpr)
	if !ok {
		return sliceRef{}, false
	}
	sel, ok := f.info().Selections[se]
	id, isID := ast.Unparen(se.X).(*ast.Ident)
	if !ok || !isID || sel.Kind() != types.FieldVal || len(sel.Index()) != 1 {
		return sliceRef{}, false
	}
	v, _ := f.info().Uses[id].(*types.Var)
	r, ok := f.fieldSlices[v][sel.Index()[0]]
	return r, ok
}

// composite translates T{…} of a struct type T into a temporary.
func (f *fn) composite(e *ast.CompositeLit) string {
	t := f.info().TypeOf(e)
	named, st := structOf(t)
	if named == nil {
		f.refuse(e, "a composite literal of %s: not in the subset (of a struct type)", t)
	}
	ct := f.structType(t, e)
	tmp := f.temp(ct, "go_zero_"+ct+"()")
	for i, el := range e.Elts {
		var fld *types.Var
		val := el
		if kv, ok := el.(*ast.KeyValueExpr); ok {
			id := kv.Key.(*ast.Ident)
			for j := range st.NumFields() {
				if st.Field(j).Name() == id.Name {
					fld = st.Field(j)
				}
			}
			val = kv.Value
		} else {
			fld = st.Field(i)
		}
		f.line("%s.%s = %s;", tmp, fieldName(fld.Name()), f.expr(val))
	}
	return tmp
}

// structParam declares kernel parameter v, a struct, as the kinds pass
// it: a struct of plain data by value; one with slices field by field
// (a slice a pointer, its length a hidden parameter), reached so.
func (f *fn) structParam(v *types.Var, name string, st *types.Struct, at ast.Node) (params, lens []string) {
	withSlices := false
	for i := range st.NumFields() {
		if _, ok := st.Field(i).Type().Underlying().(*types.Slice); ok {
			withSlices = true
		}
	}
	if !withSlices {
		return []string{f.structType(v.Type(), at) + " " + name}, nil
	}
	names := make([]string, st.NumFields())
	for i := range st.NumFields() {
		fl := st.Field(i)
		pn := name + "_" + fieldName(fl.Name())
		f.used[pn] = true
		if sl, ok := fl.Type().Underlying().(*types.Slice); ok {
			elem := f.storeType(sl.Elem(), at)
			params = append(params, fmt.Sprintf("global %s *%s", elem, pn))
			ln := "go_len_" + pn
			lens = append(lens, "long "+ln)
			if f.fieldSlices[v] == nil {
				f.fieldSlices[v] = map[int]sliceRef{}
			}
			f.fieldSlices[v][i] = sliceRef{ptr: pn, len: ln, elem: sl.Elem()}
			f.paramLens[ln] = true
			continue
		}
		if !isScalar(fl.Type()) && !isStruct(fl.Type()) {
			f.refuse(at, "parameter %s: field %s of type %s: not in the subset (a struct parameter's fields are scalars, structs of them and slices)", v.Name(), fl.Name(), fl.Type())
		}
		params = append(params, f.storeType(fl.Type(), at)+" "+pn)
		names[i] = pn
	}
	f.fields[v] = names
	return params, lens
}
