package gpukind

import (
	"fmt"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/devstate"
)

// Kernel is a kernel as a device launches it. It holds the driver's function
// Fn (a CUDA function, a kernel object). Else it holds how the kernel runs,
// or why it cannot.
type Kernel[F comparable] struct {
	Fn      F
	Err     error // why the kernel cannot be launched, unless Fn, Emulate or Bind
	Emulate bool  // run the Go body on the host (the emulate mode: Emulate)
	// Bind marks the declare target bind kernel, which a GPU takes as done. A
	// variable's device copy is present memory that device code is given as
	// an argument. No Go kernel runs on a GPU.
	Bind bool
}

// Kernels is a device's loaded image. It holds each kernel as the device
// launches it, by index. It holds the emulate mode's worker pool and kernel
// context too. The kind guards it with its device's lock.
type Kernels[F comparable] struct {
	Num int // the device's number, from Load
	img *plugin.Image
	fns []Kernel[F]
	// Ctx is the context that emulated Go bodies run with. It is nil unless
	// StartEmulation ran.
	Ctx  *plugin.KernelCtx
	pool *plugin.Pool
}

// Load takes img as the device's image, and num as its number, for the kind's
// plugin.Device.Load. It fails if the device is closed or has an image. The
// kind then sets each kernel with Set.
func (t *Kernels[F]) Load(st *devstate.State, img *plugin.Image, num int) error {
	if st.Closed() {
		return fmt.Errorf("%s: %w: device is closed", st.Label(), plugin.ErrBadHandle)
	}
	if t.img != nil {
		return fmt.Errorf("%s: %w: the image is loaded already", st.Label(), plugin.ErrBadKernel)
	}
	t.Num, t.img = num, img
	t.fns = make([]Kernel[F], len(img.Kernels))
	return nil
}

// StartEmulation makes the worker pool of cores workers and the kernel
// context that emulated Go bodies run with. The context is stopped by stop
// (nil: never). It returns the pool's workers, which emulated loops split
// over.
func (t *Kernels[F]) StartEmulation(cores int, stop *plugin.StopSignal) int {
	t.pool = plugin.NewPool(cores)
	t.Ctx = plugin.NewKernelCtx(t.Num, t.pool)
	if stop != nil {
		t.Ctx = t.Ctx.WithStop(stop)
	}
	return t.pool.Workers()
}

// Set sets kernel i.
func (t *Kernels[F]) Set(i int, k Kernel[F]) { t.fns[i] = k }

// Lookup returns how the device launches k, or why it cannot. It cannot if k
// is not of the device's image. Else the reason is the kernel's Err.
func (t *Kernels[F]) Lookup(st *devstate.State, k plugin.Kernel) (Kernel[F], error) {
	var zero F
	if err := t.img.Has(k); err != nil {
		return Kernel[F]{}, fmt.Errorf("%s: %w", st.Label(), err)
	}
	if k.Index() >= len(t.fns) {
		return Kernel[F]{}, fmt.Errorf("%s: %w: device is closed", st.Label(), plugin.ErrBadHandle)
	}
	kf := t.fns[k.Index()]
	if kf.Fn == zero && !kf.Emulate && !kf.Bind {
		return kf, kf.Err
	}
	return kf, nil
}

// Close empties the table for the device's Close, under the kind's lock. It
// returns the kernels' functions that were set, for the kind to release. It
// returns the emulate mode's pool too (nil if none). The kind closes it
// outside its lock, which ends the declare target variables' bindings too.
func (t *Kernels[F]) Close() ([]F, *plugin.Pool) {
	var zero F
	var fns []F
	for _, k := range t.fns {
		if k.Fn != zero {
			fns = append(fns, k.Fn)
		}
	}
	t.fns = nil
	return fns, t.pool
}

// CheckSlices checks each slice argument of a launch of k, checked against
// k's parameters already. Its length must fit in memory, and it must lie in
// the device's memory. in returns an error unless [p, p+size) lies inside a
// live allocation. An error names the kernel and the argument, not the
// device.
func CheckSlices(k plugin.Kernel, args []plugin.Arg, in func(p plugin.Ptr, size int64) error) error {
	for i, p := range k.Params() {
		a := args[i]
		if p.Kind != plugin.Slice {
			continue
		}
		if a.Len < 0 {
			return fmt.Errorf("%w: kernel %q argument %d: negative length %d", plugin.ErrBadKernel, k.Name(), i, a.Len)
		}
		if a.Len == 0 {
			continue
		}
		size := int64(a.Len) * int64(p.Type.Size())
		if size/int64(a.Len) != int64(p.Type.Size()) {
			return fmt.Errorf("%w: kernel %q argument %d: %d elements of %s do not fit in memory", plugin.ErrBadPointer, k.Name(), i, a.Len, p.Type)
		}
		if err := in(a.Ptr, size); err != nil {
			return fmt.Errorf("kernel %q argument %d ([]%s, %d elements at %#x): %w", k.Name(), i, p.Type, a.Len, uint64(a.Ptr), err)
		}
	}
	return nil
}

// Extent is the number of work-items a launch of k with args runs when the
// program gives neither a global size nor num_teams. It is one per element of
// the longest slice argument k may write (any but offload.In). If k writes
// none, it is its longest slice. It is at least 1. A kernel's inputs (lookup
// tables, grids) are often longer than the work. XSBench's kernel got 52
// million work-items for 2 million lookups when the longest slice set the
// size.
func Extent(k plugin.Kernel, args []plugin.Arg) int {
	written, any := 0, 0
	for i, p := range k.Params() {
		if p.Kind != plugin.Slice || i >= len(args) {
			continue
		}
		any = max(any, args[i].Len)
		if !p.ReadOnly() {
			written = max(written, args[i].Len)
		}
	}
	if written > 0 {
		return written
	}
	return max(any, 1)
}

// Work is the global size of a launch of k with args in geometry g, in
// work-items per dimension. It is g's Size, else g's Teams times local. Else
// it is Extent in the first dimension. local is the work-group (block) the
// launch runs in: g's Threads, or the kind's. A size that is not a multiple
// of it is rounded up. The kernel checks its index against its length. A zero
// local (the driver's choice) rounds nothing.
func Work(k plugin.Kernel, args []plugin.Arg, g plugin.Geometry, local [3]int) [3]int {
	var n [3]int
	switch {
	case g.Size != [3]int{}:
		n = g.Size
	case g.Teams != [3]int{}:
		for i := range 3 {
			n[i] = g.Teams[i] * max(local[i], 1)
		}
		return n
	default:
		n = [3]int{Extent(k, args), 1, 1}
	}
	for i := range 3 {
		if l := local[i]; l > 1 && n[i]%l != 0 {
			n[i] += l - n[i]%l
		}
	}
	return n
}
