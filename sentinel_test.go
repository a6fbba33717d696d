package offload_test

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/token"
	"strconv"
	"testing"

	"github.com/goffload/offload"
)

// publicErrors are the package's sentinel errors by name.
var publicErrors = map[string]error{
	"ErrNotStarted":      offload.ErrNotStarted,
	"ErrConfig":          offload.ErrConfig,
	"ErrNoDevice":        offload.ErrNoDevice,
	"ErrMandatory":       offload.ErrMandatory,
	"ErrUnavailable":     offload.ErrUnavailable,
	"ErrNotPresent":      offload.ErrNotPresent,
	"ErrExtension":       offload.ErrExtension,
	"ErrBadMap":          offload.ErrBadMap,
	"ErrBadArgument":     offload.ErrBadArgument,
	"ErrKernelSignature": offload.ErrKernelSignature,
	"ErrKernelFailed":    offload.ErrKernelFailed,
	"ErrDeviceLost":      offload.ErrDeviceLost,
	"ErrBadPointer":      offload.ErrBadPointer,
	"ErrOutOfMemory":     offload.ErrOutOfMemory,
	"ErrDependency":      offload.ErrDependency,
	"ErrInTask":          offload.ErrInTask,
	"ErrDeclareTarget":   offload.ErrDeclareTarget,
}

// TestSentinelsDeclaredHere: every exported Err variable of the package is
// its own value, declared as go doc shows it — errors.New("…"), or
// fmt.Errorf("…", …) of this package's errors (ErrInTask wraps
// ErrBadArgument) — never a reference to another package's error; each
// stands for one runtime error with the same text (errors.go's table),
// and an error that wraps the runtime's matches it once it leaves the
// package (apiError).
func TestSentinelsDeclaredHere(t *testing.T) {
	_, files := rootFiles(t, 0)
	declared := map[string]bool{}
	for name, f := range files {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, id := range vs.Names {
					if !id.IsExported() || len(id.Name) < 4 || id.Name[:3] != "Err" {
						continue
					}
					declared[id.Name] = true
					if i >= len(vs.Values) || !ownError(vs.Values[i]) {
						t.Errorf("%s: %s is not declared as errors.New(\"…\") (or fmt.Errorf of this package's errors)", name, id.Name)
					}
				}
			}
		}
	}
	for name := range declared {
		if publicErrors[name] == nil {
			t.Errorf("%s is not in this test's list", name)
		}
	}
	pairs := offload.Sentinels()
	covered := map[error]bool{}
	for _, p := range pairs {
		pub, internal := p[0], p[1]
		covered[pub] = true
		if pub == internal {
			t.Errorf("%v: the package's error is the runtime's value", pub)
		}
		if pub.Error() != internal.Error() {
			t.Errorf("the package's error says %q, the runtime's %q", pub, internal)
		}
		wrapped := offload.APIError(fmt.Errorf("goffload: device 0: %w", internal))
		if !errors.Is(wrapped, pub) {
			t.Errorf("an error wrapping the runtime's %q does not match the package's", internal)
		}
		for _, q := range pairs {
			if q[0] != pub && errors.Is(wrapped, q[0]) && !errors.Is(internal, q[1]) {
				t.Errorf("an error wrapping the runtime's %q matches the package's %q", internal, q[0])
			}
		}
	}
	for name, err := range publicErrors {
		if !declared[name] {
			t.Errorf("%s is not declared in the package's files", name)
		}
		if !covered[err] {
			t.Errorf("%s stands for no runtime error (errors.go's sentinels)", name)
		}
	}
}

// ownError reports whether e is errors.New of a string literal, or
// fmt.Errorf of a string literal and identifiers of this package.
func ownError(e ast.Expr) bool {
	call, ok := e.(*ast.CallExpr)
	if !ok || len(call.Args) == 0 {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	if !ok {
		return false
	}
	if lit, ok := call.Args[0].(*ast.BasicLit); !ok || lit.Kind != token.STRING {
		return false
	} else if _, err := strconv.Unquote(lit.Value); err != nil {
		return false
	}
	switch {
	case pkg.Name == "errors" && sel.Sel.Name == "New":
		return len(call.Args) == 1
	case pkg.Name == "fmt" && sel.Sel.Name == "Errorf":
		for _, a := range call.Args[1:] {
			if _, ok := a.(*ast.Ident); !ok {
				return false
			}
		}
		return true
	}
	return false
}

// TestSentinelsMatchRealErrors provokes an error of each kind through the
// package's functions and checks that errors.Is matches it with the
// package's error. (ErrDeviceLost's real errors, which take a device
// process that dies, are checked by TestLostDevice, TestInfoAfterKill and
// the engine's tests.)
func TestSentinelsMatchRealErrors(t *testing.T) {
	check := func(what string, err, want error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Errorf("%s: %v, want an error wrapping %q", what, err, want)
		}
	}
	ctx := context.Background()
	check("Run before Start", offload.Run(Nop), offload.ErrNotStarted)
	_, err := offload.NewKernel("sentinel.bad", func(s string) {})
	check("NewKernel of a string parameter", err, offload.ErrKernelSignature)
	_, err = offload.NewDeclareTarget("sentinel.empty", []float64{})
	check("NewDeclareTarget of an empty variable", err, offload.ErrDeclareTarget)
	err = offload.Start(offload.WithOffload("sometimes"))
	if err == nil {
		offload.Stop()
	}
	check("Start with an unknown policy", err, offload.ErrConfig)
	err = offload.Start(offload.WithDevices("host,broken:x"), offload.WithOffload("MANDATORY"))
	if err == nil {
		offload.Stop()
	}
	check("Start with a broken device under MANDATORY", err, offload.ErrMandatory)

	start(t, offload.WithDevices("host,broken:x"), offload.WithOffload("DEFAULT"))
	dev := offload.On(0)
	_, err = offload.On(1).Info()
	check("Info of a broken device", err, offload.ErrUnavailable)
	_, err = offload.On(7).Info()
	check("Info of device 7", err, offload.ErrNoDevice)
	x := filled(64, 1)
	err = dev.Update(offload.To(x).Present())
	check("Update(present) of an unmapped buffer", err, offload.ErrNotPresent)
	if me := (*offload.MapError)(nil); !errors.As(err, &me) || me.Err != offload.ErrNotPresent {
		t.Errorf("Update(present) of an unmapped buffer: %v, want a *MapError whose Err is ErrNotPresent", err)
	}
	check("EnterData(from)", dev.EnterData(offload.From(x)), offload.ErrBadMap)
	if err := dev.EnterData(offload.To(x[:32])); err != nil {
		t.Fatal(err)
	}
	check("EnterData of a section that extends a mapping", dev.EnterData(offload.To(x[16:48])), offload.ErrExtension)
	if err := dev.ExitData(offload.Release(x[:32])); err != nil {
		t.Fatal(err)
	}
	check("Run of a kernel that panics", dev.Run(Boom, int32(0), x), offload.ErrKernelFailed)
	_, err = dev.Alloc(1 << 60)
	check("Alloc of an exabyte", err, offload.ErrOutOfMemory)
	p, err := dev.Alloc(64)
	if err != nil {
		t.Fatal(err)
	}
	if err := offload.Free(p); err != nil {
		t.Fatal(err)
	}
	err = offload.Free(p)
	check("Free twice", err, offload.ErrBadPointer)
	check("Free twice", err, offload.ErrBadArgument)
	tag := new(int32)
	failed := dev.Nowait(offload.DependOut(tag)).Run(Boom, int32(0), x)
	check("a task after a failed one", dev.Nowait(offload.DependIn(tag)).Run(Nop).Wait(), offload.ErrDependency)
	failed.Wait()
	inTask := dev.Nowait().Go("sentinel.taskwait", func() error { return offload.Taskwait(ctx) })
	err = inTask.Wait()
	check("Taskwait in a task", err, offload.ErrInTask)
	check("Taskwait in a task", err, offload.ErrBadArgument)
	offload.Taskwait(ctx)
}
