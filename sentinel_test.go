package offload_test

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/token"
	"strings"
	"testing"

	"github.com/goffload/offload"
	"github.com/goffload/offload/internal/config"
	"github.com/goffload/offload/internal/core"
	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
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
	"ErrGraphChanged":    offload.ErrGraphChanged,
}

// TestSentinelsAreTheRuntimes (issue 46): each of the package's errors is
// the value the runtime's package that returns it declares, not a twin:
// an error from the core, the entries table or a device kind matches it
// without a translation.
func TestSentinelsAreTheRuntimes(t *testing.T) {
	runtime := map[string]error{
		"ErrNotStarted":      core.ErrNotStarted,
		"ErrConfig":          config.ErrConfig,
		"ErrNoDevice":        core.ErrNoDevice,
		"ErrMandatory":       core.ErrMandatory,
		"ErrUnavailable":     core.ErrUnavailable,
		"ErrNotPresent":      core.ErrNotPresent,
		"ErrExtension":       core.ErrExtension,
		"ErrBadMap":          core.ErrBadMap,
		"ErrBadArgument":     core.ErrBadArgument,
		"ErrKernelSignature": entries.ErrKernelSignature,
		"ErrKernelFailed":    plugin.ErrKernelFailed,
		"ErrDeviceLost":      plugin.ErrDeviceLost,
		"ErrBadPointer":      plugin.ErrBadPointer,
		"ErrOutOfMemory":     plugin.ErrOutOfMemory,
		"ErrDependency":      core.ErrDependency,
		"ErrInTask":          core.ErrInTask,
		"ErrDeclareTarget":   entries.ErrDeclareTarget,
		"ErrGraphChanged":    core.ErrGraphChanged,
	}
	_, files := rootFiles(t, 0)
	for name, f := range files {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				for _, id := range spec.(*ast.ValueSpec).Names {
					if id.IsExported() && strings.HasPrefix(id.Name, "Err") && publicErrors[id.Name] == nil {
						t.Errorf("%s: %s is not in this test's list", name, id.Name)
					}
				}
			}
		}
	}
	for name, pub := range publicErrors {
		if pub != runtime[name] {
			t.Errorf("%s is not the runtime's error of that name", name)
		}
		if !errors.Is(fmt.Errorf("goffload: device 0: %w", runtime[name]), pub) {
			t.Errorf("an error wrapping the runtime's %s does not match it", name)
		}
	}
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
	err = declErr(func() { offload.DeclareTarget("sentinel.empty", []float64{}) })
	check("DeclareTarget of an empty variable (its panic)", err, offload.ErrDeclareTarget)
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
