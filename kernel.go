package offload

import (
	"fmt"
	"reflect"
	"sync"
	"unsafe"

	"github.com/goffload/offload/internal/core"
	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/internal/mapping"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/reduction"
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

// kernelCtx is the Ctx a kernel body gets: the device kind's context,
// with ForChunks's chunks as this package's Chunk. It holds one pointer,
// so making a Ctx of it allocates nothing.
type kernelCtx struct{ c *plugin.KernelCtx }

// useKernelCtx makes kernel bodies get a kernelCtx: at init, and again
// (once for all) from NewKernel in case a package-level kernel of this
// package is registered before init runs.
func useKernelCtx() {
	setCtx.Do(func() {
		entries.SetContext(reflect.TypeFor[kernelCtx](), func(c *plugin.KernelCtx) reflect.Value {
			return reflect.ValueOf(kernelCtx{c})
		})
	})
}

var setCtx sync.Once

func init() { useKernelCtx() }

func (k kernelCtx) Device() int                      { return k.c.Device() }
func (k kernelCtx) Cores() int                       { return k.c.Cores() }
func (k kernelCtx) For(n int, body func(lo, hi int)) { k.c.For(n, body) }
func (k kernelCtx) Chunks(n int) int                 { return k.c.Chunks(n) }
func (k kernelCtx) Done() <-chan struct{}            { return k.c.Done() }
func (k kernelCtx) Err() error                       { return k.c.Err() }

// ForChunks runs body over the kind's chunks, each as a Chunk.
func (k kernelCtx) ForChunks(n int, body func(Chunk)) {
	k.c.ForChunks(n, func(c plugin.Chunk) { body(Chunk(c)) })
}

// kindCtx is the kind's context behind a kernel's ctx, or nil if ctx is
// not one a kernel received.
func kindCtx(ctx Ctx) *plugin.KernelCtx {
	if c, ok := ctx.(kernelCtx); ok {
		return c.c
	}
	return nil
}

// Chunk is one chunk of a loop that Ctx.ForChunks splits: chunk number
// Index of the Count chunks of [0, n), over [Lo, Hi). See Ctx for how a
// loop is split.
type Chunk struct {
	// Index is the chunk's number, from 0 to Count-1, in the order of the
	// ranges.
	Index, Count int
	// Lo and Hi bound the chunk's range [Lo, Hi) of [0, n).
	Lo, Hi int
}

// Reduce is a parallel loop with OpenMP's reduction clause, for a kernel.
// It splits [0, n) as ctx.For does and calls body(lo, hi, op.Identity) once
// per chunk. body returns the chunk's partial result: acc combined with the
// values of [lo, hi). Reduce returns the chunks' results combined in chunk
// order with op.Combine, or op.Identity when n <= 0. Each chunk writes its
// result to its own slot, so neither body nor Reduce takes a lock.
//
// The result depends only on n, ctx.Cores() and the values: it is the same
// on every run. With a floating-point reduction.Sum it is the sum in the chunks'
// grouping. That may differ in the last bits from a sequential loop's, or
// from a device's with another number of cores.
//
// A kernel shares no variables with the host, so it writes the result to
// an output slice. OpenMP's reduction(+:sum) also combines the result with
// sum's value before the construct. With the slice mapped ToFrom,
// out[0] = op.Combine(out[0], r) does the same. With it mapped From,
// out[0] = r overwrites it:
//
//	var Total = offload.MustKernel("total", func(ctx offload.Ctx, x []float64, out []float64) {
//		op := reduction.Sum[float64]()
//		r := offload.Reduce(ctx, len(x), op, func(lo, hi int, acc float64) float64 {
//			for _, v := range x[lo:hi] {
//				acc += v
//			}
//			return acc
//		})
//		out[0] = op.Combine(out[0], r)
//	})
//
//	err := offload.Run(Total, offload.To(x), offload.ToFrom(sum[:]))
//
// Several reductions in one loop are one reduction.Op over a struct of them (see
// the argmax example). op.Combine must not be nil.
func Reduce[T any](ctx Ctx, n int, op reduction.Op[T], body func(lo, hi int, acc T) T) T {
	if op.Combine == nil {
		panic("offload.Reduce: the Op's Combine is nil")
	}
	k := ctx.Chunks(n)
	if k <= 0 {
		return op.Identity
	}
	parts := make([]T, k)
	ctx.ForChunks(n, func(c Chunk) { parts[c.Index] = body(c.Lo, c.Hi, op.Identity) })
	r := parts[0]
	for _, p := range parts[1:] {
		r = op.Combine(r, p)
	}
	return r
}

//go:generate go run ./internal/gen/typed

// In is a kernel parameter that is a buffer the kernel only reads.
// A slice passed to it is mapped to the device (map(to:)), unless it is
// present already or a clause given with the kernel's With says otherwise.
// It is a slice: index it, range over it and take len as usual.
// A []T converts to In[T] implicitly, so a launch passes plain slices.
type In[T any] []T

// Out is a kernel parameter that is a buffer the kernel only writes.
// A slice passed to it is mapped from the device (map(from:)).
// Its device memory starts uninitialized when the mapping is created.
type Out[T any] []T

// InOut is a kernel parameter that is a buffer the kernel reads and writes.
// A slice passed to it is mapped tofrom (map(tofrom:)).
// A plain []T parameter is mapped the same way, but as an implicit map
// (see Device.Run). InOut says it outright.
type InOut[T any] []T

// Scratch is a kernel parameter that is device work space.
// A slice passed to it is mapped without copies either way (map(alloc:)).
type Scratch[T any] []T

// mapDir is implemented by the direction types; it gives the map type of
// the parameter.
type mapDir interface {
	mapDir() (mapping.MapType, string)
}

func (In[T]) mapDir() (mapping.MapType, string)      { return mapping.MapTo, "to" }
func (Out[T]) mapDir() (mapping.MapType, string)     { return mapping.MapFrom, "from" }
func (InOut[T]) mapDir() (mapping.MapType, string)   { return mapping.MapTo | mapping.MapFrom, "tofrom" }
func (Scratch[T]) mapDir() (mapping.MapType, string) { return 0, "alloc" }

var mapDirType = reflect.TypeFor[mapDir]()

// paramDir is the declared map direction of a parameter of type t: ok is
// false for a plain slice (implicit tofrom) and for scalars.
func paramDir(t reflect.Type) (mt mapping.MapType, clause string, ok bool) {
	if t.Kind() != reflect.Slice || !t.Implements(mapDirType) {
		return 0, "", false
	}
	mt, clause = reflect.Zero(t).Interface().(mapDir).mapDir()
	return mt, clause, true
}

// launch runs k on dev with args checked by the compiler and the clauses
// of with replacing the declared directions.
func (k *Kernel) launch(dev Device, o launchOpts, args ...any) error {
	return dev.launch(k, o, args)
}

// launchNowait is launch as a task.
func (k *Kernel) launchNowait(nw Async, o launchOpts, args ...any) *Task {
	return nw.run(k, o, args)
}

// launchOpts are what a typed kernel adds to its launches.
type launchOpts struct {
	with  []Map    // clauses that replace the declared maps (With)
	names []string // the parameters' names (Named)
	// kargs, if its capacity is enough, is where the lowered arguments
	// go (kernelArgs): a task's own room (launchTask).
	kargs []core.KernelArg
	// pargs is room for the arguments lowered for the launch itself
	// (core.Op.ArgRoom), in the same records.
	pargs []plugin.Arg
	// refs has bit i set where argument i is a pointer to the launch's
	// slice argument, kept in the task's records by a typed kernel's
	// Nowait, so that the slice is not boxed in an interface (a heap
	// allocation) on its way in (argRef).
	refs uint16
}

// argRef is how a typed kernel's Nowait passes argument i, at p in the
// task's records: a slice by reference (refs gets bit i), anything else
// by value.
func argRef[T any](p *T, i int, refs uint16) (any, uint16) {
	if reflect.TypeFor[T]().Kind() == reflect.Slice {
		return p, refs | 1<<i
	}
	return *p, refs
}

// argOf decodes argument a of parameter i of k, of type A, for a typed
// kernel's direct call: a scalar of type A, or a slice (A is a slice type)
// over device memory, as entries.Kernel.ArgValues makes it.
func argOf[A any](k *entries.Kernel, i int, a plugin.Arg, mem plugin.Mem) (A, error) {
	var v A
	if k.Params()[i].Kind == plugin.Scalar {
		s, ok := a.Scalar.(A)
		if !ok {
			return v, plugin.CheckArg(k, i, a)
		}
		return s, nil
	}
	p, err := k.SliceArg(i, a, mem)
	if err != nil {
		return v, err
	}
	if p != nil {
		// A is a slice type (Directable): set its header. The data field
		// is an unsafe.Pointer, so the store has its write barrier.
		h := (*sliceHeader)(unsafe.Pointer(&v))
		h.data, h.len, h.cap = p, a.Len, a.Len
	}
	return v, nil
}

// sliceHeader is the layout of a slice.
type sliceHeader struct {
	data     unsafe.Pointer
	len, cap int
}

// checkWith checks the clauses of a kernel's With: they replace slice
// arguments, so they are to, from, tofrom or alloc clauses.
func checkWith(with []Map) ([]bool, error) {
	for i, m := range with {
		if m.err != nil {
			return nil, m.err
		}
		if !m.slice.IsValid() {
			return nil, fmt.Errorf("%w: With clause %d is empty: build clauses with To, From, ToFrom, Alloc", ErrBadMap, i)
		}
		if m.item.Exit || m.item.Type&mapping.MapDelete != 0 {
			return nil, fmt.Errorf("%w: With clause %d is map(%s), an exit clause: a kernel's clauses are to, from, tofrom or alloc", ErrBadMap, i, m.item.Kind())
		}
	}
	if len(with) == 0 {
		return nil, nil
	}
	return make([]bool, len(with)), nil
}

// match returns the clause of lf.with that names slice a (the same first
// element and length, and element type), or -1.
func (lf *leafer) match(a any) int { return lf.matchValue(reflect.ValueOf(a)) }

// matchValue is match of the slice in v.
func (lf *leafer) matchValue(v reflect.Value) int {
	if v.Kind() != reflect.Slice {
		return -1
	}
	for j, m := range lf.with {
		if v.Len() != m.slice.Len() || v.Type().Elem() != m.slice.Type().Elem() || v.UnsafePointer() != m.slice.UnsafePointer() {
			continue
		}
		if v.Len() == 0 && v.UnsafePointer() == nil {
			continue
		}
		return j
	}
	return -1
}
