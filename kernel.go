package offload

import (
	"reflect"

	"github.com/goffload/offload/internal/core"
	"github.com/goffload/offload/internal/plugin"
)

// Ctx is the optional first parameter of a kernel. It tells where the kernel
// runs and splits loops over that device's cores.
type Ctx interface {
	// Device is the number of the device the kernel runs on.
	Device() int
	// Cores is the number of cores the device splits loops over.
	Cores() int
	// For runs body over [0, n) in contiguous chunks [lo, hi) spread over
	// the device's cores, and returns when all are done.
	For(n int, body func(lo, hi int))
}

// A Kernel is a Go function registered for offloading: an entry of the
// offload entries table.
type Kernel struct {
	k *plugin.Kernel
	// dirs holds, per parameter after the Ctx, the map clause a bare slice
	// argument gets: the declared direction of an In, Out, InOut or
	// Scratch parameter, or an implicit tofrom.
	dirs []paramMap
}

// paramMap is how a bare slice argument is mapped.
type paramMap struct {
	typ      core.MapType
	clause   string
	declared bool // an In, Out, InOut or Scratch parameter
}

// NewKernel registers fn as the kernel called name. Call it at package init
// (in a package-level var), so that every process of the program registers
// the same kernels in the same order.
//
// fn must return nothing. Its first parameter may be a Ctx. Every other
// parameter is a scalar — bool, an integer, float or complex type, or an
// array or struct made only of those — passed by value, or a slice of such
// elements, which is a device buffer. A string, map, pointer, channel,
// function or interface parameter is refused with an error naming the kernel
// and the parameter, as is a name registered twice; the error wraps
// ErrKernelSignature.
func NewKernel(name string, fn any) (*Kernel, error) {
	k, err := plugin.RegisterKernel(name, fn)
	if err != nil {
		return nil, err
	}
	t := reflect.TypeOf(fn)
	first := 0
	if k.HasCtx {
		first = 1
	}
	dirs := make([]paramMap, len(k.Params))
	for i := range dirs {
		dirs[i] = paramMap{typ: core.MapTo | core.MapFrom | core.MapImplicit, clause: "tofrom"}
		if mt, clause, ok := paramDir(t.In(first + i)); ok {
			dirs[i] = paramMap{typ: mt, clause: clause, declared: true}
		}
	}
	return &Kernel{k: k, dirs: dirs}, nil
}

// MustKernel is like NewKernel but panics if fn cannot be a kernel. It is
// meant for package-level variables, like regexp.MustCompile.
func MustKernel(name string, fn any) *Kernel {
	k, err := NewKernel(name, fn)
	if err != nil {
		panic(err)
	}
	return k
}

// Name is the name the kernel was registered under.
func (k *Kernel) Name() string { return k.k.Name }

// String describes the kernel: its name and parameter list.
func (k *Kernel) String() string { return k.k.Name + k.k.Describe() }

// checkPlain reports why t cannot be copied to a device as bytes.
func checkPlain(t reflect.Type) error {
	return plugin.PlainData(t)
}
