package offload

import (
	"github.com/goffload/offload/internal/config"
	"github.com/goffload/offload/internal/core"
	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
)

// Errors returned by the runtime, wrapped with detail; compare with
// errors.Is. Each is the value the runtime's packages and the device kinds
// wrap, so an error from any of them matches. A message says "goffload: "
// once, at its start, also where it quotes another of the runtime's errors.
var (
	// ErrNotStarted: a construct before Start or after Stop.
	ErrNotStarted = core.ErrNotStarted
	// ErrConfig: an environment variable or option that cannot be used.
	ErrConfig = config.ErrConfig
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
// done. It names the device, the buffer and what was expected.
// errors.As finds one in the error of the construct or routine, in a task's
// error, and in the Err of a tool.TargetEvent. errors.Is matches its cause.
// Package plugin declares it, beside the errors it wraps.
type MapError = plugin.MapError

// KernelPanic is the error of a kernel that panicked, or called
// runtime.Goexit, on its device: the initial device, a host device or a
// device process. errors.As finds one.
// Its text is one line: the kernel, where it panicked and the panic value.
// Its Stack field holds the stack of the goroutine that panicked, without
// the runtime's, reflect's and goffload's frames.
// It wraps ErrKernelFailed. Where the kernel ran in this process and the
// panic value is an error, it wraps that value too; Recovered returns the
// value.
type KernelPanic = plugin.KernelPanic

// nilCtx is the error of a call given a nil context.Context: every call
// that takes a context returns it (wrapping ErrBadArgument), as net/http's
// NewRequestWithContext does, instead of panicking or taking nil for "no
// context" (issue 34).
func nilCtx(call string) error {
	return core.Errorf("goffload: %s: %w: nil context.Context (use context.Background() or context.TODO())", call, ErrBadArgument)
}
