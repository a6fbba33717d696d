package plugin

import (
	"fmt"
	"path"
	"strings"
)

// KernelPanic is the error of a kernel that panicked on its device, or
// called runtime.Goexit. It holds the kernel, the panic value and the stack
// of the goroutine that panicked, trimmed to the program's own frames.
// Its text is one line: the kernel, where it panicked and the value.
// The stack is in Stack. It wraps ErrKernelFailed. Where the kernel ran in
// this process and the panic value is an error, it wraps that value too.
// A device process sends its fields to the host, so errors.As finds a
// KernelPanic whatever device ran the kernel.
type KernelPanic struct {
	// Kernel is the kernel's name.
	Kernel string
	// Value is the panic value as fmt's %v prints it, without a leading
	// "goffload: "; empty for a Goexit.
	Value string
	// Goexit says the kernel called runtime.Goexit rather than panicking.
	Goexit bool
	// Chunk says it happened in a loop chunk (ctx.For) rather than in the
	// kernel's body itself.
	Chunk bool
	// At is where it happened: the innermost frame of the program's own
	// code, "file.go:123"; empty if there is none.
	At string
	// Stack is the goroutine's stack, as runtime/debug.Stack prints it,
	// without the runtime's, reflect's and goffload's own frames. What is
	// left is the kernel's frames and what they called. It is the whole
	// stack where that would leave nothing.
	Stack string

	// value is the recovered value, where the kernel ran in this process.
	value any
}

// NewKernelPanic is the error of kernel k's panic with value v, nil for a
// runtime.Goexit. stack is the stack of the goroutine that panicked, as
// runtime/debug.Stack returned it.
func NewKernelPanic(kernel string, v any, goexit, chunk bool, stack []byte) *KernelPanic {
	e := &KernelPanic{Kernel: kernel, Goexit: goexit, Chunk: chunk, value: v}
	if !goexit {
		// A runtime error's "goffload: " is said once, by the error
		// that quotes the panic.
		e.Value = strings.TrimPrefix(fmt.Sprint(v), "goffload: ")
	}
	e.Stack, e.At = trimStack(string(stack))
	return e
}

// Error is one line: "kernel failed: kernel "k" panicked at file.go:12:
// value".
func (e *KernelPanic) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v: kernel %q ", ErrKernelFailed, e.Kernel)
	if e.Goexit {
		b.WriteString("called runtime.Goexit")
	} else {
		b.WriteString("panicked")
	}
	if e.Chunk {
		b.WriteString(" in a loop chunk")
	}
	if e.At != "" {
		b.WriteString(" at " + e.At)
	}
	if e.Goexit {
		b.WriteString(" (a kernel must return; report failures by panicking or through its buffers)")
	} else {
		b.WriteString(": " + e.Value)
	}
	return b.String()
}

// Unwrap returns ErrKernelFailed, and the panic value if it is an error.
func (e *KernelPanic) Unwrap() []error {
	if err, ok := e.value.(error); ok {
		return []error{ErrKernelFailed, err}
	}
	return []error{ErrKernelFailed}
}

// Recovered returns the recovered panic value where the kernel ran in this
// process (the initial device, a host device), nil otherwise.
func (e *KernelPanic) Recovered() any { return e.value }

// internalFrame reports whether a stack frame's function is the runtime's,
// reflect's or goffload's own (not a program's, nor goffload's examples and
// commands).
func internalFrame(fn string) bool {
	const mod = "github.com/goffload/offload"
	switch {
	case fn == "panic" || strings.HasPrefix(fn, "panic("),
		strings.HasPrefix(fn, "runtime.") || strings.HasPrefix(fn, "runtime/"),
		strings.HasPrefix(fn, "reflect."),
		strings.HasPrefix(fn, "created by "):
		return true
	case strings.HasPrefix(fn, mod+"."), // package offload
		strings.HasPrefix(fn, mod+"/internal/"),
		strings.HasPrefix(fn, mod+"/plugin."), // the plugin contract
		strings.HasPrefix(fn, mod+"/plugin/"), // what kinds share: opqueue runs a device process's short kernels on its reader
		strings.HasPrefix(fn, mod+"/plugins/"):
		return true
	}
	return false
}

// trimStack drops, from a stack as runtime/debug.Stack prints it, the
// goroutine header and the frames of the runtime, reflect and goffload
// itself, and returns what is left and the file:line of its first frame.
// Where nothing is left it returns the stack as it is.
func trimStack(stack string) (trimmed, at string) {
	lines := strings.Split(strings.TrimRight(stack, "\n"), "\n")
	var keep []string
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(l, "goroutine ") || strings.HasPrefix(l, "\t") || l == "" {
			continue // the header, or the file of a frame dropped
		}
		fn := l
		if j := strings.LastIndexByte(fn, '('); j > 0 && !strings.HasPrefix(fn, "created by ") {
			fn = fn[:j]
		}
		file := ""
		if i+1 < len(lines) && strings.HasPrefix(lines[i+1], "\t") {
			file = lines[i+1]
			i++
		}
		if internalFrame(fn) || strings.HasPrefix(l, "panic(") {
			continue
		}
		if at == "" && file != "" {
			at = frameFile(file)
		}
		keep = append(keep, l)
		if file != "" {
			keep = append(keep, file)
		}
	}
	if len(keep) == 0 {
		return stack, ""
	}
	return strings.Join(keep, "\n") + "\n", at
}

// frameFile turns a frame's file line ("\t/dir/file.go:12 +0x1d") into
// "file.go:12".
func frameFile(l string) string {
	l = strings.TrimSpace(l)
	if i := strings.LastIndex(l, " +0x"); i > 0 {
		l = l[:i]
	}
	return path.Base(l)
}
