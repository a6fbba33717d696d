package offload

import (
	"errors"

	"github.com/goffload/offload/internal/core"
	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
)

// Errors returned by the runtime, wrapped with detail; compare with
// errors.Is.
var (
	// ErrNotStarted: a construct before Start or after Stop.
	ErrNotStarted = core.ErrNotStarted
	// ErrConfig: an environment variable or option that cannot be used.
	ErrConfig = core.ErrConfig
	// ErrNoDevice: a device number that does not exist.
	ErrNoDevice = core.ErrNoDevice
	// ErrMandatory: OMP_TARGET_OFFLOAD=MANDATORY and the device cannot run
	// the construct.
	ErrMandatory = core.ErrMandatory
	// ErrUnavailable: Info of a device that could not be opened, under an
	// offload policy that is not MANDATORY: its constructs run on the
	// initial device.
	ErrUnavailable = core.ErrUnavailable
	// ErrNotPresent: a present modifier on a buffer that is not mapped.
	ErrNotPresent = core.ErrNotPresent
	// ErrExtension: a section that partly overlaps a mapping. An explicit
	// map clause would extend the mapping (libomptarget: "explicit
	// extension not allowed"); the error of an implicit map (a slice passed
	// bare), a target update, a target exit data or Associate says which
	// it was ("update of a range that is only partly mapped", …).
	ErrExtension = core.ErrExtension
	// ErrBadMap: a map clause that the construct does not allow, or a value
	// that cannot be mapped.
	ErrBadMap = core.ErrBadMap
	// ErrBadArgument: a kernel argument or memory routine argument of the
	// wrong kind.
	ErrBadArgument = core.ErrBadArgument
	// ErrKernelSignature: a kernel function that cannot be offloaded, or a
	// duplicate kernel name.
	ErrKernelSignature = entries.ErrKernelSignature
	// ErrKernelFailed: a kernel that failed on its device (it panicked or
	// called runtime.Goexit); errors.As finds a *KernelPanic with the panic
	// value and stack.
	ErrKernelFailed = plugin.ErrKernelFailed
	// ErrDeviceLost: a device that stopped working.
	ErrDeviceLost = plugin.ErrDeviceLost
	// ErrBadPointer: a device pointer outside any live allocation.
	ErrBadPointer = plugin.ErrBadPointer
)

// MapError is the error of a map clause or data routine that cannot be
// done: it names the device, the buffer (host address, size and name) and
// what was expected. errors.As finds one in the error of the construct or
// routine (and in a task's error, and in the Err of a tool's TargetEvent);
// errors.Is matches its cause (ErrNotPresent, ErrExtension, …).
type MapError struct {
	// Device names the device: "device 0 (host)".
	Device string
	// Op is the construct or routine: "target", "target enter data",
	// "omp_target_associate_ptr", …
	Op string
	// Clause is the clause: "map(present, to)", "to(present: y)" (target
	// update); empty for a memory routine.
	Clause string
	// Name is the buffer's name; empty if it has none.
	Name string
	// Addr is the host address of the buffer.
	Addr uintptr
	// Size is its size in bytes.
	Size int64
	// Detail says what was expected and what was found.
	Detail string
	// Err is the cause: a sentinel error of this package (ErrNotPresent,
	// ErrExtension, ErrBadMap, ErrDeviceLost, …) or a device's error.
	Err error
}

// Error describes the failure with the device, the buffer and what was
// expected.
func (e *MapError) Error() string { return (*core.MapError)(e).Error() }

// Unwrap returns the cause, Err.
func (e *MapError) Unwrap() error { return e.Err }

// KernelPanic is the error of a kernel that panicked (or called
// runtime.Goexit) on its device, found with errors.As on any device: the
// initial device, host devices and device processes. Its text is one line —
// the kernel, where it panicked and the panic value; Stack holds the stack of
// the goroutine that panicked without the runtime's, reflect's and
// goffload's frames (the kernel's own and what they called). It wraps
// ErrKernelFailed, and the panic value where that is an error and the
// kernel ran in this process.
type KernelPanic struct {
	// Kernel is the kernel's name.
	Kernel string
	// Value is the panic value as fmt's %v prints it; empty for a Goexit.
	Value string
	// Goexit says the kernel called runtime.Goexit rather than panicking.
	Goexit bool
	// Chunk says it happened in a loop chunk (Ctx.For, Ctx.ForChunks)
	// rather than in the kernel's body itself.
	Chunk bool
	// At is where it happened: the innermost frame of the program's own
	// code, "file.go:123"; empty if there is none.
	At string
	// Stack is the goroutine's stack, as runtime/debug.Stack prints it,
	// without the runtime's, reflect's and goffload's own frames: the
	// kernel's frames and what they called. It is the whole stack where
	// that would leave nothing.
	Stack string

	// value is the recovered value, where the kernel ran in this process.
	value any
}

// Error is one line: `kernel failed: kernel "k" panicked at file.go:12:
// value`.
func (e *KernelPanic) Error() string {
	p := plugin.KernelPanic{Kernel: e.Kernel, Value: e.Value, Goexit: e.Goexit, Chunk: e.Chunk, At: e.At, Stack: e.Stack}
	return p.Error()
}

// Unwrap returns ErrKernelFailed, and the panic value if it is an error
// (see Recovered).
func (e *KernelPanic) Unwrap() []error {
	if err, ok := e.value.(error); ok {
		return []error{ErrKernelFailed, err}
	}
	return []error{ErrKernelFailed}
}

// Recovered returns the recovered panic value where the kernel ran in this
// process (the initial device, a host device), nil otherwise.
func (e *KernelPanic) Recovered() any { return e.value }

// apiError is how an error of the runtime leaves the package: every
// exported function passes through it the errors it gets from the runtime
// (constructs, tasks and their waits, memory routines, Start, Stop, a
// launch's clause check) and the Tool adapter the Err of a TargetEvent. An
// error that holds a *core.MapError or a *plugin.KernelPanic (the runtime's
// own types) is wrapped in a publicError, in which errors.As finds a
// *MapError or *KernelPanic; any other error, nil included, is returned as
// it is. The text, and what errors.Is matches, are unchanged.
func apiError(err error) error {
	if err == nil { // the common case, inlined
		return nil
	}
	return publish(err)
}

// publish is apiError of an error.
func publish(err error) error {
	if _, ok := err.(*publicError); ok {
		return err
	}
	var me *core.MapError
	var kp *plugin.KernelPanic
	if !errors.As(err, &me) && !errors.As(err, &kp) {
		return err
	}
	return &publicError{err}
}

// publicError is an error of the runtime as the package returns it: the
// same error, which errors.As also finds as this package's error types.
type publicError struct{ err error }

func (e *publicError) Error() string { return e.err.Error() }
func (e *publicError) Unwrap() error { return e.err }

// As sets *target to this package's copy of the runtime's *core.MapError
// or *plugin.KernelPanic in e's chain, where target is a **MapError or a
// **KernelPanic.
func (e *publicError) As(target any) bool {
	switch t := target.(type) {
	case **MapError:
		var me *core.MapError
		if !errors.As(e.err, &me) {
			return false
		}
		pub := MapError(*me)
		*t = &pub
		return true
	case **KernelPanic:
		var kp *plugin.KernelPanic
		if !errors.As(e.err, &kp) {
			return false
		}
		*t = &KernelPanic{Kernel: kp.Kernel, Value: kp.Value, Goexit: kp.Goexit, Chunk: kp.Chunk, At: kp.At, Stack: kp.Stack, value: kp.Recovered()}
		return true
	}
	return false
}
