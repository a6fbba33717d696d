package offload_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

// docOf returns the doc comment of the function or method name (or the
// interface method Type.name) declared in file.
func docOf(t *testing.T, file, name string) string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	typ, method, isMethod := strings.Cut(name, ".")
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !isMethod && d.Name.Name == name {
				return d.Doc.Text()
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				ts, ok := s.(*ast.TypeSpec)
				if !ok || !isMethod || ts.Name.Name != typ {
					continue
				}
				if it, ok := ts.Type.(*ast.InterfaceType); ok {
					for _, m := range it.Methods.List {
						if len(m.Names) == 1 && m.Names[0].Name == method {
							return m.Doc.Text()
						}
					}
				}
			}
		}
	}
	t.Fatalf("%s: no %s", file, name)
	return ""
}

// TestDocsSayWhatHappens (issue 34): WithContext's doc says the kernel is
// asked to stop when ctx ends (docs/tasks.md's word, and what happens),
// not that it runs to its end; Ctx.Done's names shared memory, the
// default link of local devices, among the kinds that close it.
func TestDocsSayWhatHappens(t *testing.T) {
	with := strings.Join(strings.Fields(docOf(t, "target.go", "WithContext")), " ")
	if strings.Contains(with, "runs to its end") || !strings.Contains(with, "asked to stop") {
		t.Errorf("WithContext's doc:\n%s\nwant it to say the kernel is asked to stop, not that it runs to its end", with)
	}
	done := strings.Join(strings.Fields(docOf(t, "kernel.go", "Ctx.Done")), " ")
	if !strings.Contains(done, "shared memory") {
		t.Errorf("Ctx.Done's doc:\n%s\nwant it to name shared memory among the links", done)
	}
}
