package offload

import (
	"fmt"
	"reflect"
	"unsafe"

	"github.com/goffload/offload/internal/core"
	"github.com/goffload/offload/internal/entries"
)

// ErrDeclareTarget is wrapped by the error that DeclareTarget and
// DeclareTargetLink panic with when a variable cannot be declared. Its name
// may be taken, or it is empty, or its elements are not plain data. Its
// host memory may be shared with another variable, or the runtime is
// started.
var ErrDeclareTarget = entries.ErrDeclareTarget

// A Global is a declare target variable: a slice of plain data that kernels
// use on every device without passing it as an argument. It is OpenMP's
// `#pragma omp declare target to(x)` and `declare target link(x)`.
// A scalar is a slice of length 1.
//
// Declare variables at package init, in package-level vars, as kernels are
// registered. Every process of the program declares the same variables in
// the same order, so a device process finds each by its index.
//
// A "to" variable (DeclareTarget) has its own copy on every device from
// Start on, holding the host value of then. The copy is a present-table
// entry with an infinite reference count, like libomptarget's global
// entries. Map clauses find it present; they never copy it nor free it.
// Update(To(g.Host())) and Update(From(g.Host())) copy it. A kernel reads
// and writes the copy of the device it runs on with g.On(ctx). The copies
// go with the devices at Stop. The next Start makes new ones from the host
// value.
//
// A "link" variable (DeclareTargetLink) has no device memory of its own.
// Through g.On(ctx), a kernel sees the device copy that the program mapped
// when the kernel was launched. The program maps it with EnterData, Data or
// a map clause of g.Host(), or of a slice that contains it.
// A kernel that calls On where the variable is not mapped fails with an
// error wrapping ErrKernelFailed. The error names the variable and the
// device. A task that uses a link variable while other constructs map or
// unmap it should depend on g.Host() (DependIn).
//
// On the initial device, g.On(ctx) is g.Host() for both kinds.
type Global[T any] struct {
	g    *entries.Global
	host []T
}

// DeclareTarget declares a "to" variable whose host copy is init.
// The program's slice is the host copy, not a copy of it.
// It is meant for a package-level variable, as MustKernel is:
//
//	var Coeffs = offload.DeclareTarget("coeffs", []float64{1, 2, 1})
//
// It panics if the variable cannot be declared, with an error that wraps
// ErrDeclareTarget and names the variable. That is so for a name declared
// already, an empty init, elements that are not plain data, or memory that
// another variable uses. It is so too for a declaration while the runtime
// is started (between Start and Stop).
func DeclareTarget[T any](name string, init []T) *Global[T] {
	return mustDeclare(name, init, false)
}

// DeclareTargetLink declares a "link" variable whose host copy is host.
// It panics as DeclareTarget does if the variable cannot be declared.
func DeclareTargetLink[T any](name string, host []T) *Global[T] {
	return mustDeclare(name, host, true)
}

func mustDeclare[T any](name string, host []T, link bool) *Global[T] {
	g, err := declare(name, host, link)
	if err != nil {
		panic(err)
	}
	return g
}

func declare[T any](name string, host []T, link bool) (*Global[T], error) {
	g, err := entries.RegisterGlobal(name, reflect.TypeFor[T](), unsafe.Pointer(unsafe.SliceData(host)), len(host), link)
	if err != nil {
		return nil, core.Errorf("goffload: %w", err)
	}
	return &Global[T]{g: g, host: host}, nil
}

// Name is the name the variable was declared with.
func (g *Global[T]) Name() string { return g.g.Name }

// IsLink reports whether the variable was declared link.
func (g *Global[T]) IsLink() bool { return g.g.Link }

// Host is the host copy: the slice the variable was declared with. Map it
// (link), or copy it with Update (both kinds), like any mapped slice.
func (g *Global[T]) Host() []T { return g.host }

// String describes the variable: `declare target to variable "x" ([]float64, 4 elements)`.
func (g *Global[T]) String() string { return "declare target " + g.g.Describe() }

// On returns the variable's copy on the device the kernel with ctx runs on.
// On the initial device it is g.Host(). On is for kernel bodies.
// Where the variable has no copy (a link variable not mapped on the
// device), it panics. That fails the kernel with an error wrapping
// ErrKernelFailed that names the variable and the device.
func (g *Global[T]) On(ctx Ctx) []T {
	kc := kindCtx(ctx)
	if kc == nil {
		panic(fmt.Sprintf("goffload: %s: On needs the context a kernel receives, not a %T", g, ctx))
	}
	p, err := entries.GlobalOn(kc, g.g)
	if err != nil {
		panic(err)
	}
	return unsafe.Slice((*T)(p), len(g.host))
}
