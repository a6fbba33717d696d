// Kernels as a kind sees them: read-only handles in an Image, their
// parameters, their device code, and how a CPU kind runs one.

package plugin

import (
	"fmt"
	"reflect"
	"strings"
)

// Kernel is one kernel of the program's image: a Go function that every
// process of the program registers under the same name at the same index.
// The runtime makes kernels. A kind receives them in the Image that Load
// gets and in Queue.Launch, and only reads them. Its methods are safe for
// concurrent use.
type Kernel interface {
	// Index is the kernel's place in the Image, the same in every process
	// of the program.
	Index() int
	// Name is the name the kernel was registered under.
	Name() string
	// Params are the kernel's parameters after the context, a struct
	// parameter holding slices given field by field. The caller must not
	// modify the slice.
	Params() []Param
	// Code returns the kernel's device code for format ("ptx"), for kinds
	// that cannot run Go; false if it has none.
	Code(format string) (DeviceCode, bool)
	// Launch runs the kernel's Go body with ctx and args over the device's
	// memory mem, and returns when it is done. It returns one of:
	//   - nil;
	//   - an error wrapping ErrBadKernel or ErrBadPointer for arguments that
	//     do not match Params (nothing ran);
	//   - a *KernelPanic (wrapping ErrKernelFailed) if the body panicked or
	//     called runtime.Goexit.
	//
	// The body runs on a goroutine of the runtime's, so a Goexit does not
	// end the caller's.
	Launch(ctx *KernelCtx, args []Arg, mem Mem) error
	// LaunchHere is Launch with the body called on the calling goroutine,
	// not handed to another. A hand-off costs, and on a machine with few
	// cores it often wakes a thread. LaunchHere is for a device's reader
	// that runs short kernels to completion.
	// A panic is returned as Launch returns it. But runtime.Goexit in the
	// body cannot be stopped: the calling goroutine ends, after every
	// deferred call on its stack has run. So the caller must clean up in
	// deferred calls (its queue's state, its role). It learns the kernel's
	// error from exited. LaunchHere calls exited from a deferred call,
	// before the goroutine unwinds past it.
	LaunchHere(ctx *KernelCtx, args []Arg, mem Mem, exited func(error)) error
}

// CheckArgs checks a launch's arguments against k's parameters.
// A kind that decodes them itself must call it; Kernel.Launch checks them
// too. There must be one argument per parameter, each as CheckArg says.
// Its error wraps ErrBadKernel and names the kernel and the argument.
func CheckArgs(k Kernel, args []Arg) error {
	ps := k.Params()
	if len(args) != len(ps) {
		return fmt.Errorf("%w: kernel %q takes %d arguments, got %d", ErrBadKernel, k.Name(), len(ps), len(args))
	}
	for i := range ps {
		if err := CheckArg(k, i, args[i]); err != nil {
			return err
		}
	}
	return nil
}

// CheckArg checks argument a of k's parameter i (which must exist): a
// scalar of the parameter's type, or a slice whose length is not negative.
// It does not look at the slice's memory. Its error wraps ErrBadKernel and
// names the kernel and the argument.
func CheckArg(k Kernel, i int, a Arg) error {
	p := k.Params()[i]
	switch {
	case p.Kind == Slice && a.Len < 0:
		return fmt.Errorf("%w: kernel %q argument %d: negative length %d", ErrBadKernel, k.Name(), i, a.Len)
	case p.Kind == Scalar && reflect.TypeOf(a.Scalar) != p.Type:
		return fmt.Errorf("%w: kernel %q argument %d: got %T, want %s", ErrBadKernel, k.Name(), i, a.Scalar, p.Type)
	}
	return nil
}

// Mem returns the bytes of device range [p, p+size), or an error if the
// range is not inside a live allocation. It is how a device lends its
// memory to kernel arguments.
type Mem func(p Ptr, size int64) ([]byte, error)

// Image is the kernel table as loaded on devices, with its digest. The
// runtime makes it; kinds read it.
type Image struct {
	// Kernels are the program's kernels; Kernels[i].Index() == i.
	Kernels []Kernel
	// Digest identifies the table (names and signatures in order); a host
	// and a device process agree on kernels only if their digests match.
	Digest string
}

// Has returns nil if k is one of the image's kernels. Otherwise it returns
// an error wrapping ErrBadKernel that says why. A nil image is one that was
// not loaded. The device kinds check a launch's kernel with Has.
func (img *Image) Has(k Kernel) error {
	switch {
	case k == nil:
		return fmt.Errorf("%w: nil kernel", ErrBadKernel)
	case img == nil:
		return fmt.Errorf("%w: no image loaded", ErrBadKernel)
	case k.Index() < 0 || k.Index() >= len(img.Kernels) || img.Kernels[k.Index()] != k:
		return fmt.Errorf("%w: kernel %q is not in the loaded image (register kernels at package init, before Start)", ErrBadKernel, k.Name())
	}
	return nil
}

// ParamKind says how a kernel parameter is passed.
type ParamKind int

const (
	// Scalar parameters are passed by value (OpenMP's firstprivate).
	Scalar ParamKind = iota
	// Slice parameters are device buffers.
	Slice
)

// Param describes one kernel parameter (the context parameter excluded).
// A struct parameter whose fields are scalars and slices is passed field by
// field. Each field is a Param of its own (Field ≥ 0), and its slices are
// device buffers. The kernel gets the struct rebuilt with its slices
// attached to device memory (OpenMP's pointer attachment).
type Param struct {
	Kind ParamKind
	// Type is the scalar's type, or the slice's element type.
	Type reflect.Type
	// Top is the function parameter (counted after the context) that the
	// parameter is, or is a field of. Field is the field's index in that
	// struct parameter, or -1 for a parameter that is not a field.
	Top, Field int
	// SliceType is a slice parameter's own type ([]T, or a named slice
	// type such as offload.In[T]).
	SliceType reflect.Type
	// Struct is the type of the struct parameter a field parameter
	// belongs to (nil for a parameter that is not a field).
	Struct reflect.Type
}

// ReadOnly reports whether the parameter is a slice the kernel only reads:
// its type is offload.In[T]. Some devices copy a kernel's buffers back
// after running it, as the cuda kind's emulation does. They need not copy
// these, and must not where other kernels may read the same buffer at
// once.
func (p Param) ReadOnly() bool {
	t := p.SliceType
	return p.Kind == Slice && t != nil && t.PkgPath() == "github.com/goffload/offload" && strings.HasPrefix(t.Name(), "In[")
}

// DeviceCode is a kernel's code for one kind of device: an image in a
// format the device loads (PTX text for "ptx"), and the name of the entry
// point in it. The entry takes the kernel's parameters in order: a scalar
// by value, a slice as a device pointer. A slice's length is not passed:
// give it as a scalar parameter.
type DeviceCode struct {
	Format string
	Image  []byte
	Entry  string
	// Generated says the code is OpenCL C that cmd/goffload-gen made from the
	// kernel's Go body, or PTX that clang made of that OpenCL C (format
	// "ptx"). Its entry then takes more parameters after the kernel's. First
	// comes the length of each slice parameter, in order, as a long. For each
	// of Globals come its device copy (a global pointer) and its length (a
	// long). Then comes the device's number as a long (ctx.Device()). Last is
	// a fault record (a global long *, four words).
	Generated bool
	// Globals are the declare target variables generated code uses, by
	// the names they were declared with.
	Globals []string
	// Sites are generated code's Go checks: "file.go:12: index" (or
	// "divide", "shift"). A failed check writes the fault record: word 0
	// is its site, i+1 for Sites[i], words 1 and 2 the index and the
	// length, word 3 is 1 inside a ctx.For chunk. The kind reads the
	// record after a launch of code with sites and fails the launch with a
	// KernelPanic naming the site, as the Go body's panic would.
	Sites []string
}
