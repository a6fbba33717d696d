package offload_test

import (
	"go/ast"
	"go/token"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestErrorsLeaveThroughAPIError: every error that an exported function or
// method of the package returns comes through apiError (so that errors.Is
// matches the package's errors with the runtime's, see errors.go), or is
// made here of the package's own errors alone. A returned error may be:
// nil; apiError(…); fmt.Errorf whose %w operands are the package's Err
// variables, or errors.New; a call of a function of this package whose own
// returns follow these rules; or a variable set only from those. Unwrap
// methods, which return the chain, are not API paths.
func TestErrorsLeaveThroughAPIError(t *testing.T) {
	fset, files := rootFiles(t, 0)
	funcs := map[string][]*ast.FuncDecl{}
	imports := map[string]bool{}
	for _, f := range files {
		for _, imp := range f.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			name := path[strings.LastIndex(path, "/")+1:]
			if imp.Name != nil {
				name = imp.Name.Name
			}
			imports[name] = true
		}
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				funcs[fd.Name.Name] = append(funcs[fd.Name.Name], fd)
			}
		}
	}
	c := &errPaths{funcs: funcs, imports: imports, clean: map[*ast.FuncDecl]bool{}}
	for _, fds := range funcs {
		for _, fd := range fds {
			if !fd.Name.IsExported() || fd.Name.Name == "Unwrap" || !exportedRecvType(fd) || errResult(fd) < 0 {
				continue
			}
			for _, bad := range c.badReturns(fd) {
				t.Errorf("%s: %s returns an error that does not come through apiError: %s", fset.Position(bad.Pos()), fd.Name.Name, exprString(bad))
			}
		}
	}
}

type errPaths struct {
	funcs   map[string][]*ast.FuncDecl
	imports map[string]bool
	clean   map[*ast.FuncDecl]bool // done, and whether its returns follow the rules
}

// badReturns returns the error results of fd's returns that break the
// rules.
func (c *errPaths) badReturns(fd *ast.FuncDecl) []ast.Expr {
	idx := errResult(fd)
	var bad []ast.Expr
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		if _, ok := n.(*ast.FuncLit); ok {
			return false
		}
		r, ok := n.(*ast.ReturnStmt)
		if !ok || len(r.Results) == 0 {
			return true
		}
		e := r.Results[0] // a call returning all results
		if len(r.Results) > idx {
			e = r.Results[idx]
		}
		if !c.ok(fd, e) {
			bad = append(bad, e)
		}
		return true
	})
	return bad
}

var verb = regexp.MustCompile(`%[-+# 0-9.]*[a-zA-Z%]`)

// ok reports whether e, returned by fd, follows the rules.
func (c *errPaths) ok(fd *ast.FuncDecl, e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.Ident:
		if e.Name == "nil" {
			return true
		}
		return c.assignedOK(fd, e.Name)
	case *ast.CallExpr:
		switch fun := e.Fun.(type) {
		case *ast.Ident:
			return fun.Name == "apiError" || c.funcOK(fun.Name)
		case *ast.SelectorExpr:
			x, _ := fun.X.(*ast.Ident)
			switch {
			case x != nil && x.Name == "errors" && fun.Sel.Name == "New":
				return true
			case x != nil && x.Name == "fmt" && fun.Sel.Name == "Errorf":
				return wrapsOwn(e)
			case x != nil && c.imports[x.Name]:
				return false // another package's function
			}
			return c.funcOK(fun.Sel.Name) // a method of this package
		case *ast.IndexExpr: // a generic function
			if id, ok := fun.X.(*ast.Ident); ok {
				return c.funcOK(id.Name)
			}
		case *ast.IndexListExpr:
			if id, ok := fun.X.(*ast.Ident); ok {
				return c.funcOK(id.Name)
			}
		}
	}
	return false
}

// wrapsOwn reports whether every %w operand of fmt.Errorf call is one of
// the package's Err variables.
func wrapsOwn(call *ast.CallExpr) bool {
	lit, ok := call.Args[0].(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return false
	}
	format, err := strconv.Unquote(lit.Value)
	if err != nil {
		return false
	}
	arg := 1
	for _, v := range verb.FindAllString(format, -1) {
		if v == "%%" {
			continue
		}
		if strings.HasSuffix(v, "w") {
			if arg >= len(call.Args) {
				return false
			}
			id, ok := call.Args[arg].(*ast.Ident)
			if !ok || !strings.HasPrefix(id.Name, "Err") {
				return false
			}
		}
		arg++
	}
	return true
}

// funcOK reports whether every function or method of this package called
// name returns errors by the rules.
func (c *errPaths) funcOK(name string) bool {
	fds := c.funcs[name]
	if len(fds) == 0 {
		return false
	}
	for _, fd := range fds {
		if errResult(fd) < 0 {
			continue
		}
		clean, done := c.clean[fd]
		if !done {
			c.clean[fd] = true // a cycle: judged by its other paths
			clean = len(c.badReturns(fd)) == 0
			c.clean[fd] = clean
		}
		if !clean {
			return false
		}
	}
	return true
}

// assignedOK reports whether every value fd's body gives the variable
// name (outside function literals) follows the rules; a parameter or
// result that nothing sets does not.
func (c *errPaths) assignedOK(fd *ast.FuncDecl, name string) bool {
	set, ok := false, true
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		if _, lit := n.(*ast.FuncLit); lit {
			return false
		}
		as, isAssign := n.(*ast.AssignStmt)
		if !isAssign {
			return true
		}
		for i, l := range as.Lhs {
			if id, isID := l.(*ast.Ident); isID && id.Name == name {
				set = true
				rhs := as.Rhs[0] // a call with several results
				if len(as.Rhs) == len(as.Lhs) {
					rhs = as.Rhs[i]
				}
				if !c.ok(fd, rhs) {
					ok = false
				}
			}
		}
		return true
	})
	return set && ok
}

// errResult is the index of fd's error result, or -1.
func errResult(fd *ast.FuncDecl) int {
	if fd.Type.Results == nil {
		return -1
	}
	idx, i := -1, 0
	for _, r := range fd.Type.Results.List {
		n := max(1, len(r.Names))
		if id, ok := r.Type.(*ast.Ident); ok && id.Name == "error" {
			idx = i + n - 1
		}
		i += n
	}
	return idx
}

// exportedRecvType reports whether fd is a function, or a method of an
// exported type (generic ones included).
func exportedRecvType(fd *ast.FuncDecl) bool {
	if fd.Recv == nil {
		return true
	}
	t := fd.Recv.List[0].Type
	for {
		switch x := t.(type) {
		case *ast.StarExpr:
			t = x.X
		case *ast.IndexExpr:
			t = x.X
		case *ast.IndexListExpr:
			t = x.X
		case *ast.Ident:
			return x.IsExported()
		default:
			return false
		}
	}
}

// exprString shows a returned expression in a message.
func exprString(e ast.Expr) string {
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	if call, ok := e.(*ast.CallExpr); ok {
		switch fun := call.Fun.(type) {
		case *ast.Ident:
			return fun.Name + "(…)"
		case *ast.SelectorExpr:
			if x, ok := fun.X.(*ast.Ident); ok {
				return x.Name + "." + fun.Sel.Name + "(…)"
			}
			return "…." + fun.Sel.Name + "(…)"
		}
	}
	return "an expression"
}
