package offload

import (
	"fmt"
	"reflect"

	"github.com/goffload/offload/internal/mapping"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
)

// Ctx is the optional first parameter of a kernel. It tells where the kernel
// runs and splits loops over that device's cores.
//
// A loop over [0, n) is split as OpenMP's schedule(static) splits it.
// It makes Chunks(n) = min(n, Cores()) contiguous chunks, none when n <= 0.
// They are in order: chunk i starts where chunk i-1 ends. With k chunks, the
// first n mod k have n/k + 1 elements and the others n/k.
// So a chunk's number and range depend only on n and Cores(), never on
// which goroutine runs it or when. A kernel can keep per-chunk results in a
// slice of Chunks(n) elements, written without a lock and combined in chunk
// order afterwards (Reduce does that).
// The chunks run concurrently, each exactly once, and the loop returns when
// all are done. A loop in a chunk is split again.
type Ctx interface {
	// Device is the number of the device the kernel runs on.
	Device() int
	// Cores is the number of cores the device splits loops over.
	Cores() int
	// For runs body over [0, n) in contiguous chunks [lo, hi), one per
	// core (see Ctx), and returns when all are done.
	For(n int, body func(lo, hi int))
	// Chunks is how many chunks For(n, ...) and ForChunks(n, ...) make:
	// min(n, Cores()), or 0 when n <= 0.
	Chunks(n int) int
	// ForChunks is For with the chunk's number. It runs body once for
	// each chunk c of [0, n), over [c.Lo, c.Hi), and returns when all are
	// done. c.Index goes from 0 to c.Count-1 = Chunks(n)-1.
	ForChunks(n int, body func(c Chunk))
	// Done is closed when the kernel should stop early: the context of
	// its construct ended (Device.WithContext), or Stop has begun.
	// The CPU kinds close it: host, the initial device, and device
	// processes over shared memory (the default link of local devices),
	// over sockets and over MPI. Done is nil where nothing will ask, as in
	// a GPU's CPU stand-in.
	// A kernel that can run long checks Done, or Err, in its loops and
	// returns. Nothing forces it; see Stop for what happens to one that
	// does not.
	Done() <-chan struct{}
	// Err is context.Canceled once Done is closed, nil before.
	Err() error
}

// A Kernel is a Go function registered for offloading: an entry of the
// offload entries table.
type Kernel struct {
	k *entries.Kernel
	// dirs holds, per parameter after the Ctx, the map clause a bare slice
	// argument gets. It is the declared direction of an In, Out, InOut or
	// Scratch parameter, or an implicit tofrom.
	dirs []paramMap
	// names are the flattened parameters' default buffer names:
	// "kernel.argI", "kernel.argI.Field" for a struct's field.
	names []string
	// once: an Any-task of it is not run again when its device is lost
	// (Once).
	once bool
}

// Once returns a copy of k whose Any-tasks are never run again.
// When the device running one is lost, the task fails with an error
// wrapping ErrDeviceLost, as a task placed by hand does.
// By default the runtime re-runs a lost device's Any-tasks elsewhere
// (see Any). It takes their kernels to compute their outputs from their
// inputs alone. A kernel with effects beyond its buffers (it counts, it
// sends) should be Once.
func (k *Kernel) Once() *Kernel {
	c := *k
	c.once = true
	return &c
}

// paramMap is how a bare slice argument is mapped.
type paramMap struct {
	typ      mapping.MapType
	clause   string
	declared bool // an In, Out, InOut or Scratch parameter
}

// NewKernel registers fn as the kernel called name. Call it at package init
// (in a package-level var), so that every process of the program registers
// the same kernels in the same order.
//
// fn must return nothing. Its first parameter may be a Ctx.
// Every other parameter is a scalar, passed by value, or a slice of
// scalars, which is a device buffer. A scalar is a bool, an integer, float
// or complex type, or an array or struct made only of those.
// A string, map, pointer, channel, function or interface parameter is
// refused, as is a name registered twice. The error names the kernel and
// the parameter, and wraps ErrKernelSignature.
func NewKernel(name string, fn any) (*Kernel, error) {
	k, err := newKernel(name, fn)
	return k, err
}

func newKernel(name string, fn any) (*Kernel, error) {
	if err := checkTags(name, fn); err != nil {
		return nil, err
	}
	useKernelCtx()
	k, err := entries.RegisterKernel(name, fn)
	if err != nil {
		return nil, err
	}
	if body, ok := fn.(func(Ctx)); ok && k.Directable() {
		// No parameters: called without reflection, as a typed kernel is.
		k.SetDirect(func(ctx *plugin.KernelCtx, _ []plugin.Arg, _ plugin.Mem) error {
			body(kernelCtx{ctx})
			return nil
		})
	}
	t := reflect.TypeOf(fn)
	first := 0
	if k.HasCtx() {
		first = 1
	}
	dirs := make([]paramMap, len(k.Params()))
	for i, p := range k.Params() {
		dirs[i] = paramMap{typ: mapping.MapTo | mapping.MapFrom | mapping.MapImplicit, clause: "tofrom"}
		pt := t.In(first + p.Top)
		if p.Field >= 0 {
			f := pt.Field(p.Field)
			pt = f.Type
			if tag, ok := f.Tag.Lookup("offload"); ok && p.Kind == plugin.Slice {
				mt, _ := tagDir(tag) // checked by checkTags
				dirs[i] = paramMap{typ: mt, clause: tag, declared: true}
				continue
			}
		}
		if mt, clause, ok := paramDir(pt); ok {
			dirs[i] = paramMap{typ: mt, clause: clause, declared: true}
		}
	}
	names := make([]string, len(k.Params()))
	for i, p := range k.Params() {
		names[i] = fmt.Sprintf("%s.arg%d", name, p.Top)
		if p.Field >= 0 {
			names[i] += "." + t.In(first+p.Top).Field(p.Field).Name
		}
	}
	return &Kernel{k: k, dirs: dirs, names: names}, nil
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
func (k *Kernel) Name() string { return k.k.Name() }

// String describes the kernel: its name and parameter list.
func (k *Kernel) String() string { return k.k.Name() + k.k.Describe() }

// checkPlain reports why t cannot be copied to a device as bytes.
func checkPlain(t reflect.Type) error {
	return entries.PlainData(t)
}

// tagDir is the map type an `offload:"…"` tag on a slice field declares.
func tagDir(tag string) (mapping.MapType, error) {
	switch tag {
	case "to":
		return mapping.MapTo, nil
	case "from":
		return mapping.MapFrom, nil
	case "tofrom":
		return mapping.MapTo | mapping.MapFrom, nil
	case "alloc":
		return 0, nil
	}
	return 0, fmt.Errorf(`tag offload:%q: want offload:"to", "from", "tofrom" or "alloc"`, tag)
}

// checkTags checks the offload tags of fn's struct parameters.
func checkTags(name string, fn any) error {
	t := reflect.TypeOf(fn)
	if t == nil || t.Kind() != reflect.Func {
		return nil // RegisterKernel says why
	}
	for i := 0; i < t.NumIn(); i++ {
		pt := t.In(i)
		if pt.Kind() != reflect.Struct {
			continue
		}
		for j := 0; j < pt.NumField(); j++ {
			f := pt.Field(j)
			tag, ok := f.Tag.Lookup("offload")
			if !ok {
				continue
			}
			if f.Type.Kind() != reflect.Slice {
				return fmt.Errorf("%w: kernel %q: parameter %d (%s): field %s (%s): an offload tag is for slice fields (scalars are passed by value)", ErrKernelSignature, name, i, pt, f.Name, f.Type)
			}
			if _, err := tagDir(tag); err != nil {
				return fmt.Errorf("%w: kernel %q: parameter %d (%s): field %s: %v", ErrKernelSignature, name, i, pt, f.Name, err)
			}
		}
	}
	return nil
}

// OpenCL gives the kernel device code for OpenCL devices: OpenCL C source
// and the name of its kernel function. The function takes the kernel's
// parameters after the Ctx, in order:
//   - a slice as a __global pointer to its element type;
//   - a scalar by value (Go's int is OpenCL C's long, bool is uchar);
//   - a struct by value, as a struct of the same layout.
//
// Pass lengths as scalar parameters.
// An OpenCL device builds the source when it loads the program, and runs
// it instead of the Go body. CPU devices keep running the Go body.
// A kernel may have PTX too.
// Call OpenCL at package init, with the registration. It panics if the
// runtime is started or the source is empty. See docs/opencl.md.
//
//	//go:embed saxpy.cl
//	var saxpyCL []byte
//	var Saxpy = offload.MustKernel4("saxpy", saxpyGo).OpenCL(saxpyCL, "saxpy")
func (k *Kernel) OpenCL(src []byte, entry string) *Kernel {
	if err := k.k.SetCode(plugin.DeviceCode{Format: "opencl", Image: src, Entry: entry}); err != nil {
		panic(err)
	}
	return k
}

// GeneratedOpenCL gives the kernel OpenCL C that cmd/goffload-gen made
// from its Go body; the generated file calls it at package init, and a
// program does not. sites are the code's Go checks ("main.go:12: index"):
// where there are any, its entry takes the slice lengths and a fault
// record after the kernel's parameters, and a failed check fails the
// launch as the Go body's panic would (see docs/kernels.md). globals are
// the declare target variables its body uses (X.On(ctx)), by name. It
// panics as OpenCL does.
func (k *Kernel) GeneratedOpenCL(src []byte, entry string, sites []string, globals ...string) *Kernel {
	if err := k.k.SetCode(plugin.DeviceCode{Format: "opencl", Image: src, Entry: entry, Generated: true, Sites: sites, Globals: globals}); err != nil {
		panic(err)
	}
	return k
}

// GeneratedPTX gives the kernel PTX that cmd/goffload-gen had clang make
// of the OpenCL C it generated from the kernel's Go body: its entry takes
// the parameters GeneratedOpenCL's does, and a CUDA device passes them
// and reads the fault record as an OpenCL device does. The generated file
// calls it at package init, and a program does not. It panics as PTX
// does.
func (k *Kernel) GeneratedPTX(image []byte, entry string, sites []string, globals ...string) *Kernel {
	if err := k.k.SetCode(plugin.DeviceCode{Format: "ptx", Image: image, Entry: entry, Generated: true, Sites: sites, Globals: globals}); err != nil {
		panic(err)
	}
	return k
}

// PTX gives the kernel device code for NVIDIA GPUs: a PTX image and the
// name of its entry point. The entry point takes the kernel's parameters
// after the Ctx, in order: scalars by value, slices as device pointers.
// Pass lengths as scalar parameters.
// A CUDA device launches it instead of the Go body, which the other
// devices keep running.
// Call PTX at package init, with the registration. It panics if the
// runtime is started or the code is empty.
//
//	//go:embed saxpy.ptx
//	var saxpyPTX []byte
//	var Saxpy = offload.MustKernel4("saxpy", saxpyGo).PTX(saxpyPTX, "saxpy")
func (k *Kernel) PTX(image []byte, entry string) *Kernel {
	if err := k.k.SetCode(plugin.DeviceCode{Format: "ptx", Image: image, Entry: entry}); err != nil {
		panic(err)
	}
	return k
}
