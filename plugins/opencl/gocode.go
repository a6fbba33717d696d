package opencl

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/goffload/offload/internal/cldrv"
	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
)

// Generated code: OpenCL C that cmd/goffload-gen made from a kernel's Go
// body (plugin.DeviceCode.Generated). Its entry takes, after the kernel's
// parameters, each slice parameter's length as a long, the device's
// number as a long (ctx.Device()) and a fault record of four longs that a
// failed check writes (the first check to fail wins). The kind passes them and, for code with checks, reads the record
// when the launch is done: such a launch is synchronous on its queue's
// issuing goroutine, which waits for the kernel to read the record.

// genBuildOptions are added to the build options of generated code: Go's
// float32 division is correctly rounded.
const genBuildOptions = " -cl-fp32-correctly-rounded-divide-sqrt"

// faultWords is the size of the fault record in longs.
const faultWords = 4

// hiddenParams is how many parameters the entry of k's code takes after
// the kernel's own: 0 for hand-written code.
func hiddenParams(k plugin.Kernel, kf *kernelFn) int {
	if !kf.gen {
		return 0
	}
	n := 2 + 2*len(kf.globals) // the variables, the device number and the fault record
	for _, p := range k.Params() {
		if p.Kind == plugin.Slice {
			n++
		}
	}
	return n
}

// sliceLens are the lengths of args' slices, in order, for generated code.
func sliceLens(k plugin.Kernel, args []plugin.Arg) []int64 {
	var lens []int64
	for i, p := range k.Params() {
		if p.Kind == plugin.Slice {
			lens = append(lens, int64(args[i].Len))
		}
	}
	return lens
}

// faultBuffer returns q's fault record, made and zeroed on first use.
func (q *queue) faultBuffer() (cldrv.Mem, error) {
	if q.fault != 0 {
		return q.fault, nil
	}
	d := q.d
	m, err := d.lib.CreateBuffer(d.ctx, 8*faultWords)
	if err != nil {
		return 0, err
	}
	zero := make([]byte, 8*faultWords)
	if err := d.lib.WriteBuffer(q.cq, m, true, 0, int64(len(zero)), unsafe.Pointer(&zero[0]), nil, nil); err != nil {
		d.lib.ReleaseMem(m)
		return 0, err
	}
	q.fault = m
	return m, nil
}

// setHidden sets the parameters of generated code after the kernel's:
// the slice lengths, the declare target variables (gvals, glens), the
// device number and q's fault record; under kf.mu.
func (q *queue) setHidden(kf *kernelFn, first int, lens []int64, gvals []argVal, glens []int64) error {
	d := q.d
	for j, n := range lens {
		if err := d.lib.SetKernelArg(kf.k, first+j, unsafe.Sizeof(n), unsafe.Pointer(&n)); err != nil {
			return fmt.Errorf("argument %d (the length of slice %d): %w", first+j, j, err)
		}
	}
	first += len(lens)
	for j, v := range gvals {
		if err := d.setArg(kf, first, v); err != nil {
			return fmt.Errorf("argument %d (declare target %s): %w", first, kf.globals[j].Describe(), err)
		}
		if err := d.lib.SetKernelArg(kf.k, first+1, unsafe.Sizeof(glens[j]), unsafe.Pointer(&glens[j])); err != nil {
			return fmt.Errorf("argument %d (the length of declare target %s): %w", first+1, kf.globals[j].Describe(), err)
		}
		first += 2
	}
	dev := int64(kf.dev)
	if err := d.lib.SetKernelArg(kf.k, first, unsafe.Sizeof(dev), unsafe.Pointer(&dev)); err != nil {
		return fmt.Errorf("argument %d (the device number): %w", first, err)
	}
	m, err := q.faultBuffer()
	if err != nil {
		return fmt.Errorf("the fault record: %w", err)
	}
	if err := d.lib.SetKernelArg(kf.k, first+1, unsafe.Sizeof(m), unsafe.Pointer(&m)); err != nil {
		return fmt.Errorf("argument %d (the fault record): %w", first+1, err)
	}
	return nil
}

// checkFault waits for the launch of o, reads q's fault record and, where
// a check failed, zeroes it and returns the kernel's panic: the Go file and
// line of the check, and the value Go's panic would have had.
func (q *queue) checkFault(o *op) error {
	d := q.d
	rec := make([]byte, 8*faultWords)
	if err := d.lib.ReadBuffer(q.cq, q.fault, true, 0, int64(len(rec)), unsafe.Pointer(&rec[0]), nil, nil); err != nil {
		return fmt.Errorf("%s: kernel %q: reading its fault record: %w", d.label(), o.k.Name(), d.lose(err))
	}
	var w [faultWords]int64
	for i := range w {
		w[i] = int64(binary.LittleEndian.Uint64(rec[8*i:]))
	}
	if w[0] == 0 {
		return nil
	}
	clear(rec)
	if err := d.lib.WriteBuffer(q.cq, q.fault, true, 0, int64(len(rec)), unsafe.Pointer(&rec[0]), nil, nil); err != nil {
		return fmt.Errorf("%s: kernel %q: zeroing its fault record: %w", d.label(), o.k.Name(), d.lose(err))
	}
	return fmt.Errorf("%s: %w", d.label(), faultPanic(o.k.Name(), o.kf.sites, w))
}

// faultPanic is the KernelPanic of fault record w of a kernel whose checks
// are sites ("file.go:12: index").
func faultPanic(kernel string, sites []string, w [faultWords]int64) *plugin.KernelPanic {
	site := "?: ?"
	if w[0] >= 1 && w[0] <= int64(len(sites)) {
		site = sites[w[0]-1]
	}
	at, what, _ := strings.Cut(site, ": ")
	var v string
	switch what {
	case "index":
		v = fmt.Sprintf("runtime error: index out of range [%d] with length %d", w[1], w[2])
	case "divide":
		v = "runtime error: integer divide by zero"
	case "slice high":
		v = fmt.Sprintf("runtime error: slice bounds out of range [:%d] with capacity %d", w[1], w[2])
	case "slice low":
		v = fmt.Sprintf("runtime error: slice bounds out of range [%d:%d]", w[1], w[2])
	case "shift":
		v = "runtime error: negative shift amount"
	case "panic":
		v = "panic (its value is not evaluated on an OpenCL device)"
	default:
		v = fmt.Sprintf("check %q failed (%d, %d)", what, w[1], w[2])
	}
	e := plugin.NewKernelPanic(kernel, v, false, w[3]&1 != 0, nil)
	e.At = at
	e.Stack = at + " (generated OpenCL C: no stack)\n"
	return e
}

// Declare target variables in generated code (plugin.DeviceCode.Globals):
// a GPU kind runs no bind kernel (gpukind.Kernel.Bind), so the kind keeps
// what the binds it is given say, by variable, and passes each variable's
// device copy and length to the code that uses it.

// globalBind is where a declare target variable's copy is on the device.
type globalBind struct {
	gen  uint64
	ptr  plugin.Ptr
	size int64 // bytes; 0: unbound (a link variable not mapped)
}

// globals are a device's bindings, by variable index.
type globals struct {
	mu sync.Mutex
	m  map[int]globalBind
}

// bind records a launch of the bind kernel (entries.BindArgs's arguments).
func (d *device) bind(args []plugin.Arg) {
	if len(args) != 5 {
		return
	}
	op, _ := args[0].Scalar.(int)
	idx, _ := args[1].Scalar.(int)
	gen, _ := args[2].Scalar.(uint64)
	b := globalBind{gen: gen}
	if op == entries.BindOp {
		b.ptr, b.size = args[4].Ptr, int64(args[4].Len)
	}
	d.globals.mu.Lock()
	defer d.globals.mu.Unlock()
	if d.globals.m == nil {
		d.globals.m = map[int]globalBind{}
	}
	if cur, ok := d.globals.m[idx]; ok && cur.gen > gen {
		return // a later bind came first
	}
	d.globals.m[idx] = b
}

// globalIndexes returns the indexes of the declare target variables
// names, or an error naming one that is not declared.
func globalIndexes(names []string) ([]*entries.Global, error) {
	all, _ := entries.Globals()
	var gs []*entries.Global
	for _, n := range names {
		i := slices.IndexFunc(all, func(g *entries.Global) bool { return g.Name == n })
		if i < 0 {
			return nil, fmt.Errorf("its generated OpenCL C uses declare target variable %q, which the program does not declare", n)
		}
		gs = append(gs, all[i])
	}
	return gs, nil
}

// globalArgs are the arguments of kf's declare target variables on d, and
// their lengths, or an error naming the variable that has no copy there.
func (d *device) globalArgs(k plugin.Kernel, kf *kernelFn) ([]argVal, []int64, error) {
	var vals []argVal
	var lens []int64
	for _, g := range kf.globals {
		d.globals.mu.Lock()
		b := d.globals.m[g.Index]
		d.globals.mu.Unlock()
		if b.size == 0 {
			return nil, nil, fmt.Errorf("%w: kernel %q: declare target %s is not mapped on the device: map its host slice there (EnterData, Data or a map clause) before the kernel runs", plugin.ErrKernelFailed, k.Name(), g.Describe())
		}
		al, off, err := d.mem.find(b.ptr, b.size)
		if err != nil {
			return nil, nil, fmt.Errorf("kernel %q: declare target %s at %#x: %w", k.Name(), g.Describe(), uint64(b.ptr), err)
		}
		v := argVal{ptr: true}
		if al.buf == 0 {
			v.svm = uintptr(b.ptr)
		} else if v.buf, err = d.mem.argBuffer(d, al, off); err != nil {
			return nil, nil, fmt.Errorf("%w: kernel %q: declare target %s: %w", plugin.ErrBadKernel, k.Name(), g.Describe(), err)
		}
		vals = append(vals, v)
		lens = append(lens, int64(g.Len))
	}
	return vals, lens, nil
}
