package offload_test

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/goffload/offload"
	"github.com/goffload/offload/tool"
)

// TestNoTypeAliases: the package declares its own types, or aliases of
// types that public packages declare (offload.MapError is plugin.MapError,
// as os.PathError is fs.PathError): go doc shows their fields and methods
// there. An alias of an internal type would show "type T = core.T" and
// nothing else.
func TestNoTypeAliases(t *testing.T) {
	fset, files := rootFiles(t, parser.SkipObjectResolution)
	for _, f := range files {
		internal := map[string]bool{}
		for _, imp := range f.Imports {
			path := strings.Trim(imp.Path.Value, `"`)
			name := path[strings.LastIndex(path, "/")+1:]
			if imp.Name != nil {
				name = imp.Name.Name
			}
			internal[name] = strings.Contains(path, "/internal/")
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, s := range gd.Specs {
				ts := s.(*ast.TypeSpec)
				if ts.Assign == 0 {
					continue
				}
				sel, ok := ts.Type.(*ast.SelectorExpr)
				if pkg, _ := sel.X.(*ast.Ident); ok && pkg != nil && !internal[pkg.Name] {
					continue
				}
				t.Errorf("%s: type %s = %s is an alias of an internal type: declare a type of package offload, or alias a public package's",
					fset.Position(ts.Pos()), ts.Name.Name, types.ExprString(ts.Type))
			}
		}
	}
}

// errTool keeps the errors of the constructs that ended with one.
type errTool struct {
	mu   sync.Mutex
	errs []error
}

func (c *errTool) TargetBegin(tool.TargetEvent) {}
func (c *errTool) TargetEnd(e tool.TargetEvent) {
	if e.Err != nil {
		c.mu.Lock()
		c.errs = append(c.errs, e.Err)
		c.mu.Unlock()
	}
}
func (c *errTool) DataOp(tool.DataEvent)         {}
func (c *errTool) KernelLaunch(tool.KernelEvent) {}
func (c *errTool) Wait(tool.WaitEvent)           {}

// take returns the errors kept so far and forgets them.
func (c *errTool) take() []error {
	c.mu.Lock()
	defer c.mu.Unlock()
	errs := c.errs
	c.errs = nil
	return errs
}

var typedBoom = offload.MustKernel1("api.boom", func(ctx offload.Ctx, x []int32) {
	panic("typed boom")
})

// TestErrorsAsPublicTypes walks the ways the package returns a kernel's
// panic and a map error — constructs, typed kernels, tasks (Wait,
// Taskwait, Group.Wait, a dependent task's error), a data region's body,
// memory routines, a tool's TargetEnd — on the initial device, a host
// device and a device process, and checks that errors.As finds a
// *offload.KernelPanic or *offload.MapError with the fields filled in.
func TestErrorsAsPublicTypes(t *testing.T) {
	tool := &errTool{}
	start(t, offload.WithDevices("host,local:1"), offload.WithTool(tool))
	ctx := context.Background()
	for _, dev := range []offload.Device{offload.Initial(), offload.On(0), offload.On(1)} {
		process := dev.Num() != 1 // the kernel runs in this process
		x := filled(64, 3)
		boom := func() *offload.Task { return dev.Nowait().Run(Boom, int32(0), x) }
		var g offload.Group
		paths := []struct {
			what  string
			err   func() error
			value string
		}{
			{"Run", func() error { return dev.Run(Boom, int32(0), x) }, "boom in the body"},
			{"Run, a chunk", func() error { return dev.Run(Boom, int32(1), x) }, "boom in a chunk"},
			{"typed Run", func() error { return typedBoom.Run(dev, x) }, "typed boom"},
			{"Task.Wait", func() error { return boom().Wait() }, "boom in the body"},
			{"Taskwait", func() error { boom(); return offload.Taskwait(ctx) }, "boom in the body"},
			{"Group.Wait", func() error { dev.Nowait().In(&g).Run(Boom, int32(0), x); return g.Wait(ctx) }, "boom in the body"},
			{"a dependent task's Wait", func() error {
				a := dev.Nowait(offload.DependOut(x)).Run(Boom, int32(0), x)
				err := dev.Nowait(offload.DependIn(x)).Run(Nop).Wait()
				if !errors.Is(err, offload.ErrDependency) {
					t.Errorf("%v: a dependent task's error %v does not wrap ErrDependency", dev, err)
				}
				a.Wait()
				return err
			}, "boom in the body"},
			{"Data's body", func() error {
				return dev.Data(func() error { return dev.Run(Boom, int32(0), x) }, offload.To(filled(4, 0)))
			}, "boom in the body"},
		}
		for _, p := range paths {
			what := fmt.Sprintf("%v, %s", dev, p.what)
			err := p.err()
			var kp *offload.KernelPanic
			if !errors.As(err, &kp) {
				t.Errorf("%s: errors.As finds no *offload.KernelPanic in %v", what, err)
				continue
			}
			kernel := "test.boom"
			if p.what == "typed Run" {
				kernel = "api.boom"
			}
			if kp.Kernel != kernel || kp.Value != p.value || kp.Goexit || kp.Chunk != strings.HasSuffix(p.what, "chunk") ||
				!strings.Contains(kp.At, "_test.go:") || !strings.Contains(kp.Stack, "_test.go:") {
				t.Errorf("%s: %+v, want kernel %q, value %q, where it panicked and the stack", what, *kp, kernel, p.value)
			}
			if !errors.Is(kp, offload.ErrKernelFailed) || !strings.Contains(err.Error(), kp.Error()) {
				t.Errorf("%s: the KernelPanic %q does not wrap ErrKernelFailed, or is not in the error's text %q", what, kp, err)
			}
			if got, want := kp.Recovered() != nil, process; got != want {
				t.Errorf("%s: Recovered() = %v, want a value %v", what, kp.Recovered(), want)
			}
			errs := tool.take()
			if dev.IsInitial() {
				continue // the initial device runs constructs without tool events
			}
			if len(errs) == 0 || !errors.As(errs[len(errs)-1], new(*offload.KernelPanic)) {
				t.Errorf("%s: the tool's TargetEnd errors %v hold no *offload.KernelPanic", what, errs)
			}
		}
		// A panic value that is an error stays in the chain where the
		// kernel ran in this process.
		var kp *offload.KernelPanic
		if err := dev.Run(boomErr, make([]int32, 1)); !errors.As(err, &kp) || errors.Is(kp, errUserBoom) != process {
			t.Errorf("%v: panic with an error value: %v, want a *KernelPanic wrapping it: %v", dev, err, process)
		}
		tool.take()
	}

	for _, dev := range []offload.Device{offload.On(0), offload.On(1)} {
		y := filled(16, 1)
		addr, size := uintptr(unsafe.Pointer(&y[0])), int64(len(y))*4
		check := func(what string, err error, op, name string, cause error) {
			t.Helper()
			what = fmt.Sprintf("%v, %s", dev, what)
			var me *offload.MapError
			if !errors.As(err, &me) {
				t.Errorf("%s: errors.As finds no *offload.MapError in %v", what, err)
				return
			}
			if !strings.HasPrefix(me.Device, dev.String()+" (") || me.Op != op || me.Name != name || me.Addr != addr || me.Size != size || me.Detail == "" {
				t.Errorf("%s: %+v, want %s, op %q, buffer %q at %#x, %d bytes", what, *me, dev, op, name, addr, size)
			}
			if !errors.Is(me, cause) || !errors.Is(me.Err, cause) || !strings.Contains(err.Error(), strings.TrimPrefix(me.Error(), "goffload: ")) {
				t.Errorf("%s: %q does not wrap %v, or is not in the error's text %q", what, me, cause, err)
			}
			tool.take()
		}
		present := offload.To(y).Present().Named("y")
		check("EnterData", dev.EnterData(present), "target enter data", "y", offload.ErrNotPresent)
		check("ExitData", dev.ExitData(offload.From(y).Present().Named("y")), "target exit data", "y", offload.ErrNotPresent)
		check("Update", dev.Update(present), "target update", "y", offload.ErrNotPresent)
		check("Data", dev.Data(func() error { return nil }, present), "target data", "y", offload.ErrNotPresent)
		check("Run", dev.Run(AddTo, int32(1), present), "target test.addto", "y", offload.ErrNotPresent)
		check("Nowait EnterData", dev.Nowait().EnterData(present).Wait(), "target enter data", "y", offload.ErrNotPresent)
		check("Nowait Run", dev.Nowait().Run(AddTo, int32(1), present).Wait(), "target test.addto", "y", offload.ErrNotPresent)
		dev.Nowait().Update(present)
		check("Taskwait", offload.Taskwait(ctx), "target update", "y", offload.ErrNotPresent)
		check("MappedPtr", func() error { _, err := dev.MappedPtr(y); return err }(), "omp_get_mapped_ptr", "", offload.ErrNotPresent)
		check("Copy", offload.Copy(offload.Initial(), y, dev, y), "omp_get_mapped_ptr", "", offload.ErrNotPresent)
		check("Disassociate", dev.Disassociate(y), "omp_target_disassociate_ptr", "", offload.ErrNotPresent)
		if err := dev.EnterData(offload.To(y)); err != nil {
			t.Fatal(err)
		}
		p, err := dev.Alloc(size)
		if err != nil {
			t.Fatal(err)
		}
		check("Associate", dev.Associate(y, p, "y"), "omp_target_associate_ptr", "y", offload.ErrBadMap)
		if err := errors.Join(dev.ExitData(offload.Release(y)), offload.Free(p)); err != nil {
			t.Fatal(err)
		}
	}

	// The clause of a buffer that cannot be mapped is refused by the
	// launch that checks it, before a construct starts.
	bad := []string{"a"}
	for _, err := range []error{
		offload.On(0).Run(AddTo, int32(1), offload.To(bad).Named("bad")),
		offload.On(0).Nowait().Run(AddTo, int32(1), offload.To(bad).Named("bad")).Wait(),
	} {
		var me *offload.MapError
		if !errors.As(err, &me) || me.Name != "bad" || me.Op != "target" || !errors.Is(me, offload.ErrBadMap) {
			t.Errorf("a launch with an unmappable clause: %v, want a *offload.MapError wrapping ErrBadMap", err)
		}
	}
}
