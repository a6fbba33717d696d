package offload

import (
	"errors"
	"fmt"
	"strings"

	"github.com/goffload/offload/internal/core"
	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
)

// Errors returned by the runtime, wrapped with detail; compare with
// errors.Is. They are this package's own values: an error that the runtime
// (the packages under it, a device kind) returns matches them where it
// wraps the runtime's error of the same text (see apiError). A message
// says "goffload: " once, at its start, also where it quotes another of
// the runtime's errors.
var (
	// ErrNotStarted: a construct before Start or after Stop.
	ErrNotStarted = errors.New("runtime not started")
	// ErrConfig: an environment variable or option that cannot be used.
	ErrConfig = errors.New("invalid configuration")
	// ErrNoDevice: a device number that does not exist.
	ErrNoDevice = errors.New("no such device")
	// ErrMandatory: OMP_TARGET_OFFLOAD=MANDATORY and the device cannot run
	// the construct.
	ErrMandatory = errors.New("offload is mandatory and the device is unavailable")
	// ErrUnavailable: Info of a device that could not be opened, under an
	// offload policy that is not MANDATORY: its constructs run on the
	// initial device.
	ErrUnavailable = errors.New("the device is unavailable; OMP_TARGET_OFFLOAD is not MANDATORY, so its work runs on the initial device")
	// ErrNotPresent: a present modifier on a buffer that is not mapped.
	ErrNotPresent = errors.New("not present on the device")
	// ErrExtension: a section that partly overlaps a mapping. An explicit
	// map clause would extend the mapping (libomptarget: "explicit
	// extension not allowed"); the error of an implicit map (a slice passed
	// bare), a target update, a target exit data or Associate says which
	// it was ("update of a range that is only partly mapped", …).
	ErrExtension = errors.New("explicit extension not allowed")
	// ErrBadMap: a map clause that the construct does not allow, or a value
	// that cannot be mapped.
	ErrBadMap = errors.New("invalid map clause")
	// ErrBadArgument: a kernel argument or memory routine argument of the
	// wrong kind.
	ErrBadArgument = errors.New("invalid argument")
	// ErrKernelSignature: a kernel function that cannot be offloaded, or a
	// duplicate kernel name.
	ErrKernelSignature = errors.New("invalid kernel")
	// ErrKernelFailed: a kernel that failed on its device (it panicked or
	// called runtime.Goexit); errors.As finds a *KernelPanic with the panic
	// value and stack.
	ErrKernelFailed = errors.New("kernel failed")
	// ErrDeviceLost: a device that stopped working.
	ErrDeviceLost = errors.New("device lost")
	// ErrBadPointer: a device pointer outside any live allocation.
	ErrBadPointer = errors.New("invalid device pointer")
)

// sentinels pairs each of the package's errors with the runtime's error it
// stands for: the runtime's packages and the device kinds wrap theirs
// (plugin's errors are the contract kinds keep), and an error that leaves
// the package through apiError matches the package's error (errors.Is)
// where it wraps the runtime's. Each pair has the same text.
var sentinels = [...]struct{ pub, internal error }{
	{ErrNotStarted, core.ErrNotStarted},
	{ErrConfig, core.ErrConfig},
	{ErrNoDevice, core.ErrNoDevice},
	{ErrMandatory, core.ErrMandatory},
	{ErrUnavailable, core.ErrUnavailable},
	{ErrNotPresent, core.ErrNotPresent},
	{ErrExtension, core.ErrExtension},
	{ErrBadMap, core.ErrBadMap},
	{ErrBadArgument, core.ErrBadArgument},
	{ErrKernelSignature, entries.ErrKernelSignature},
	{ErrKernelFailed, plugin.ErrKernelFailed},
	{ErrDeviceLost, plugin.ErrDeviceLost},
	{ErrBadPointer, plugin.ErrBadPointer},
	{ErrOutOfMemory, plugin.ErrOutOfMemory},
	{ErrDependency, core.ErrDependency},
	{ErrInTask, core.ErrInTask},
	{ErrDeclareTarget, entries.ErrDeclareTarget},
}

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
	// without the runtime's, reflect's and goffload's own frames, on every
	// kind (a device process's reader that runs a kernel itself adds
	// none): the kernel's frames and what they called. It is the whole
	// stack where that would leave nothing.
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
		return []error{ErrKernelFailed, apiError(err)}
	}
	return []error{ErrKernelFailed}
}

// Recovered returns the recovered panic value where the kernel ran in this
// process (the initial device, a host device), nil otherwise.
func (e *KernelPanic) Recovered() any { return e.value }

// apiError is how an error leaves the package: every exported function
// passes through it the errors it returns that may hold the runtime's
// (constructs, tasks and their waits, memory routines, Start, Stop, kernel
// and declare target registration, a launch's clause check, Info) and the
// Tool adapter the Err of a TargetEvent. An error that wraps one of the
// runtime's errors that this package's stand for (sentinels), or holds a
// *core.MapError or a *plugin.KernelPanic (the runtime's own types), is
// wrapped in a publicError, which errors.Is matches with the package's
// errors and in which errors.As finds a *MapError or *KernelPanic; any
// other error, nil included, is returned as it is. The text is unchanged.
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
	if errors.As(err, &me) || errors.As(err, &kp) || holdsInternal(err) || strings.Count(err.Error(), errPrefix) > 1 {
		return &publicError{err}
	}
	return err
}

// errPrefix starts the runtime's error messages.
const errPrefix = "goffload: "

// onePrefix keeps the first "goffload: " of msg and drops the others: an
// error that quotes another of the runtime's (a dependent task's quotes
// its failed predecessor's) says where it comes from once (issue 34).
func onePrefix(msg string) string {
	i := strings.Index(msg, errPrefix)
	if i < 0 {
		return msg
	}
	j := i + len(errPrefix)
	return msg[:j] + strings.ReplaceAll(msg[j:], errPrefix, "")
}

// holdsInternal reports whether err wraps one of the runtime's errors that
// the package's errors stand for.
func holdsInternal(err error) bool {
	for _, s := range sentinels {
		if errors.Is(err, s.internal) {
			return true
		}
	}
	return false
}

// publicError is an error of the runtime as the package returns it: the
// same error, which errors.Is also matches with this package's errors and
// errors.As finds as this package's error types.
type publicError struct{ err error }

func (e *publicError) Error() string { return onePrefix(e.err.Error()) }
func (e *publicError) Unwrap() error { return e.err }

// Is reports whether target is one of this package's errors and e wraps
// the runtime's error it stands for.
func (e *publicError) Is(target error) bool {
	for _, s := range sentinels {
		if s.pub == target {
			return errors.Is(e.err, s.internal)
		}
	}
	return false
}

// publicCause is a MapError's cause as the package shows it: the package's
// error where the cause is the runtime's error it stands for (so that Err
// == ErrNotPresent holds), otherwise the cause through apiError.
func publicCause(err error) error {
	for _, s := range sentinels {
		if err == s.internal {
			return s.pub
		}
	}
	return apiError(err)
}

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
		pub.Err = publicCause(me.Err)
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

// nilCtx is the error of a call given a nil context.Context: every call
// that takes a context returns it (wrapping ErrBadArgument), as net/http's
// NewRequestWithContext does, instead of panicking or taking nil for "no
// context" (issue 34).
func nilCtx(call string) error {
	return fmt.Errorf("goffload: %s: %w: nil context.Context (use context.Background() or context.TODO())", call, ErrBadArgument)
}
