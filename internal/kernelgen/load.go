// Package kernelgen translates Go kernel bodies to OpenCL C: the work of
// cmd/goffload-gen, which go generate runs in a package. It reads the
// package with go/types, finds its package-level kernels (offload's
// MustKernelN and NewKernelN with a function literal or a package-level
// function), translates each whose body lies in the subset that
// docs/kernels.md lists, and writes a Go file that attaches the code to
// the kernels. A kernel outside the subset is reported with the file, the
// line and the construct, and stays CPU-only.
package kernelgen

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// offloadPath is the import path of package offload.
const offloadPath = "github.com/goffload/offload"

// reductionPath is the import path of package reduction, whose identifiers
// (reduction.Sum, …) offload.Reduce takes.
const reductionPath = offloadPath + "/reduction"

// pkg is a loaded, type-checked package.
type pkg struct {
	dir   string
	name  string
	fset  *token.FileSet
	files []*ast.File
	types *types.Package
	info  *types.Info
	funcs map[*types.Func]*ast.FuncDecl // the package's functions
}

// load reads and type-checks the package in dir, without the file skip
// (the generated file, which a stale run may have left wrong). The
// package's dependencies come from their export data (go list -export).
func load(dir, skip string) (*pkg, error) {
	cmd := exec.Command("go", "list", "-e", "-export", "-deps", "-f",
		`{{if .DepOnly}}D {{.ImportPath}} {{.Export}}{{else}}P {{.Name}} {{join .GoFiles " "}}{{end}}`, ".")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list in %s: %w: %s", dir, err, strings.TrimSpace(stderr.String()))
	}
	exports := map[string]string{}
	p := &pkg{dir: dir, fset: token.NewFileSet(), funcs: map[*types.Func]*ast.FuncDecl{}}
	var files []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && f[0] == "P":
			p.name = f[1]
			files = f[2:]
		case len(f) == 3 && f[0] == "D":
			exports[f[1]] = f[2]
		}
	}
	if p.name == "" {
		return nil, fmt.Errorf("go list in %s: no package", dir)
	}
	for _, name := range files {
		if name == skip {
			continue
		}
		f, err := parser.ParseFile(p.fset, filepath.Join(dir, name), nil, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		p.files = append(p.files, f)
	}
	lookup := func(path string) (io.ReadCloser, error) {
		e, ok := exports[path]
		if !ok || e == "" {
			return nil, fmt.Errorf("no export data for %s (go list -export)", path)
		}
		return os.Open(e)
	}
	p.info = &types.Info{
		Types:      map[ast.Expr]types.TypeAndValue{},
		Defs:       map[*ast.Ident]types.Object{},
		Uses:       map[*ast.Ident]types.Object{},
		Selections: map[*ast.SelectorExpr]*types.Selection{},
		Implicits:  map[ast.Node]types.Object{},
	}
	conf := types.Config{Importer: importer.ForCompiler(p.fset, "gc", lookup)}
	p.types, err = conf.Check(p.name, p.fset, p.files, p.info)
	if err != nil {
		return nil, fmt.Errorf("type-checking %s: %w", dir, err)
	}
	for _, f := range p.files {
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil {
				if fn, ok := p.info.Defs[fd.Name].(*types.Func); ok {
					p.funcs[fn] = fd
				}
			}
		}
	}
	return p, nil
}

// kernelDecl is a package-level kernel the package registers.
type kernelDecl struct {
	varName string    // the variable that holds it
	name    string    // the name it is registered under
	typed   bool      // a KernelN (attach through .Kernel()), not a *Kernel
	fn      ast.Node  // *ast.FuncLit or *ast.FuncDecl
	pos     token.Pos // the registering call
	handCL  bool      // it has hand-written OpenCL C (.OpenCL) already
	fnType  *types.Signature
	fnBody  *ast.BlockStmt
}

// kernels finds the package-level kernels of p, in source order.
func (p *pkg) kernels() ([]*kernelDecl, []error) {
	var ks []*kernelDecl
	var errs []error
	for _, f := range p.files {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, s := range gd.Specs {
				vs := s.(*ast.ValueSpec)
				if len(vs.Values) != 1 || len(vs.Names) == 0 {
					continue
				}
				k, err := p.kernelOf(vs.Names[0].Name, vs.Values[0])
				if err != nil {
					errs = append(errs, err)
				}
				if k != nil {
					ks = append(ks, k)
				}
			}
		}
	}
	return ks, errs
}

// kernelOf returns the kernel that e registers (a chain of method calls
// on offload.MustKernelN(name, fn)), nil if it registers none.
func (p *pkg) kernelOf(varName string, e ast.Expr) (*kernelDecl, error) {
	handCL := false
	for {
		call, ok := ast.Unparen(e).(*ast.CallExpr)
		if !ok {
			return nil, nil
		}
		fun := ast.Unparen(call.Fun)
		if ix, ok := fun.(*ast.IndexListExpr); ok {
			fun = ix.X
		} else if ix, ok := fun.(*ast.IndexExpr); ok {
			fun = ix.X
		}
		sel, ok := fun.(*ast.SelectorExpr)
		if !ok {
			return nil, nil
		}
		if obj, ok := p.info.Uses[sel.Sel].(*types.Func); ok && obj.Pkg() != nil && obj.Pkg().Path() == offloadPath && obj.Type().(*types.Signature).Recv() == nil {
			n := obj.Name()
			if !(strings.HasPrefix(n, "MustKernel") || strings.HasPrefix(n, "NewKernel")) || len(call.Args) != 2 {
				return nil, nil
			}
			k := &kernelDecl{varName: varName, pos: call.Pos(), handCL: handCL, typed: n != "MustKernel" && n != "NewKernel"}
			tv := p.info.Types[call.Args[0]]
			if tv.Value == nil {
				return nil, p.errorf(call.Args[0], "kernel variable %s: its name is not a constant string", varName)
			}
			k.name = strings.Trim(tv.Value.ExactString(), `"`)
			switch fn := ast.Unparen(call.Args[1]).(type) {
			case *ast.FuncLit:
				k.fn, k.fnBody = fn, fn.Body
				k.fnType = p.info.TypeOf(fn).(*types.Signature)
			case *ast.Ident:
				obj, _ := p.info.Uses[fn].(*types.Func)
				fd := p.funcs[obj]
				if fd == nil {
					return nil, p.errorf(fn, "kernel %q: its function %s is not a function of this package", k.name, fn.Name)
				}
				k.fn, k.fnBody = fd, fd.Body
				k.fnType = obj.Type().(*types.Signature)
			default:
				return nil, p.errorf(call.Args[1], "kernel %q: its function is neither a function literal nor a package-level function", k.name)
			}
			return k, nil
		}
		if sel.Sel.Name == "OpenCL" {
			handCL = true
		}
		e = sel.X
	}
}

// A Refusal says why a kernel cannot be translated: the construct outside
// the subset and where it is.
type Refusal struct {
	Pos  token.Position
	What string
}

// Error is "file.go:line:col: construct".
func (r *Refusal) Error() string {
	return fmt.Sprintf("%s:%d:%d: %s", filepath.Base(r.Pos.Filename), r.Pos.Line, r.Pos.Column, r.What)
}

func (p *pkg) errorf(n ast.Node, format string, args ...any) *Refusal {
	return &Refusal{Pos: p.fset.Position(n.Pos()), What: fmt.Sprintf(format, args...)}
}
