package offload_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRootCallsNoKind: the public package imports the device kinds only to
// register them (blank imports); what a kind does for the whole process it
// gives the runtime as hooks of its Kind (plugin.Kind.ServeIfDevice,
// Serving, Finish), so that no kind's function is called from here.
func TestRootCallsNoKind(t *testing.T) {
	_, files := rootFiles(t, parser.ImportsOnly)
	for name, f := range files {
		for _, imp := range f.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			if strings.HasPrefix(path, "github.com/goffload/offload/plugins/") && (imp.Name == nil || imp.Name.Name != "_") {
				t.Errorf("%s imports the kind %s by name: a kind is imported for its registration only (import _)", name, path)
			}
		}
	}
}

// rootFiles parses the public package's non-test files with mode, by name.
func rootFiles(t *testing.T, mode parser.Mode) (*token.FileSet, map[string]*ast.File) {
	t.Helper()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	files := map[string]*ast.File{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, mode)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = f
	}
	return fset, files
}

// TestInternalImportsNoRoot: nothing under internal/ (tests aside) is built
// on the public package: internal packages sit under it, and the workloads
// that use the public API live with the examples (examples/apps).
func TestInternalImportsNoRoot(t *testing.T) {
	fset := token.NewFileSet()
	err := filepath.WalkDir("internal", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.Contains(path, "testdata") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			if strings.Trim(imp.Path.Value, `"`) == "github.com/goffload/offload" {
				t.Errorf("%s imports the public package", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
