// The fake driver's modules (PTX parsed for its entries) and launches.

package cudafake

import (
	"fmt"
	"math"
	"unsafe"

	"github.com/goffload/offload/internal/cudadrv"
	"github.com/goffload/offload/internal/ptx"
)

// ParsePTX returns the parameter lists of the .entry functions of a PTX
// image, and the compute capability of its .target (90 for sm_90): what
// internal/ptx reads, which the real driver would refuse if it cannot.
func ParsePTX(image []byte) (entries map[string][]Param, target int, err error) {
	target, err = ptx.Target(image)
	if err != nil {
		return nil, 0, err
	}
	es, err := ptx.Entries(image)
	if err != nil {
		return nil, 0, err
	}
	if len(es) == 0 {
		return nil, 0, fmt.Errorf("no .entry")
	}
	entries = make(map[string][]Param, len(es))
	for name, ps := range es {
		var params []Param
		for _, p := range ps {
			params = append(params, Param{Size: p.Size, Align: p.Align})
		}
		entries[name] = params
	}
	return entries, target, nil
}

// ModuleLoadData is the fake cuModuleLoadData.
func (d *Driver) ModuleLoadData(image []byte) (cudadrv.Module, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	c, err := d.cur("cuModuleLoadData")
	if err != nil {
		return 0, err
	}
	entries, target, err := ParsePTX(image)
	if err != nil {
		return 0, cudadrv.NewError("cuModuleLoadData", cudadrv.ErrInvalidPTX, "fake driver: "+err.Error())
	}
	g := d.cfg.GPUs[c.gpu]
	if target > g.Major*10+g.Minor {
		return 0, cudadrv.NewError("cuModuleLoadData", cudadrv.ErrInvalidPTX, fmt.Sprintf("fake driver: .target sm_%d is higher than the GPU's sm_%d%d", target, g.Major, g.Minor))
	}
	h := cudadrv.Module(d.handle())
	d.modules[h] = &module{ctx: c, entries: entries}
	return h, nil
}

// ModuleUnload is the fake cuModuleUnload.
func (d *Driver) ModuleUnload(h cudadrv.Module) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.ready("cuModuleUnload"); err != nil {
		return err
	}
	if _, ok := d.modules[h]; !ok {
		return fail("cuModuleUnload", cudadrv.ErrInvalidHandle)
	}
	delete(d.modules, h)
	return nil
}

// ModuleGetFunction is the fake cuModuleGetFunction.
func (d *Driver) ModuleGetFunction(h cudadrv.Module, name string) (cudadrv.Function, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.ready("cuModuleGetFunction"); err != nil {
		return 0, err
	}
	m, ok := d.modules[h]
	if !ok {
		return 0, fail("cuModuleGetFunction", cudadrv.ErrInvalidHandle)
	}
	params, ok := m.entries[name]
	if !ok {
		return 0, fail("cuModuleGetFunction", cudadrv.ErrNotFound)
	}
	f := cudadrv.Function(d.handle())
	d.funcs[f] = &function{ctx: m.ctx, entry: name, params: params}
	return f, nil
}

// Launch is a kernel launch as the fake runs it.
type Launch struct {
	Entry       string
	Grid, Block [3]uint32
	// Params holds each parameter's bytes, as the PTX entry declares it.
	Params [][]byte
	d      *Driver
}

// Threads is the number of threads along x: grid times block.
func (l *Launch) Threads() int64 { return int64(l.Grid[0]) * int64(l.Block[0]) }

func (l *Launch) word(i, size int) uint64 {
	b := l.Params[i]
	if len(b) != size {
		panic(fmt.Sprintf("cudafake: %s: parameter %d has %d bytes, read as %d", l.Entry, i, len(b), size))
	}
	var v uint64
	for j := size - 1; j >= 0; j-- {
		v = v<<8 | uint64(b[j])
	}
	return v
}

// Uint32 reads parameter i, whose size must be the type's.
func (l *Launch) Uint32(i int) uint32 { return uint32(l.word(i, 4)) }

// Uint64 reads parameter i, whose size must be the type's.
func (l *Launch) Uint64(i int) uint64 { return l.word(i, 8) }

// Int64 reads parameter i, whose size must be the type's.
func (l *Launch) Int64(i int) int64 { return int64(l.word(i, 8)) }

// Float32 reads parameter i, whose size must be the type's.
func (l *Launch) Float32(i int) float32 { return math.Float32frombits(uint32(l.word(i, 4))) }

// Float64 reads parameter i, whose size must be the type's.
func (l *Launch) Float64(i int) float64 { return math.Float64frombits(l.word(i, 8)) }

// Ptr reads parameter i, whose size must be the type's.
func (l *Launch) Ptr(i int) cudadrv.DevPtr { return cudadrv.DevPtr(l.word(i, 8)) }

// Slice returns the n elements of type T at the device address that
// parameter i of l holds, or an error if they are not inside one
// allocation (the kernel would fault): a kernel's view of a pointer
// argument.
func Slice[T any](l *Launch, i int, n int64) ([]T, error) {
	b, err := l.Mem(l.Ptr(i), int64(unsafe.Sizeof(*new(T)))*n)
	if err != nil {
		return nil, err
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n), nil
}

// Mem returns the n bytes of device memory at p, or an error if they are
// not inside one allocation (the kernel would fault).
func (l *Launch) Mem(p cudadrv.DevPtr, n int64) ([]byte, error) {
	l.d.mu.Lock()
	defer l.d.mu.Unlock()
	a := l.d.find(p)
	if a == nil || n < 0 || int64(p-a.base)+n > a.size {
		return nil, fmt.Errorf("illegal address %#x (+%d bytes)", uint64(p), n)
	}
	off := int64(p - a.base)
	return a.data[off : off+n : a.size], nil
}

// LaunchKernel is the fake cuLaunchKernel.
func (d *Driver) LaunchKernel(fh cudadrv.Function, grid, block [3]uint32, sharedMem uint32, sh cudadrv.Stream, params unsafe.Pointer) error {
	const fn = "cuLaunchKernel"
	d.mu.Lock()
	if err := d.ready(fn); err != nil {
		d.mu.Unlock()
		return err
	}
	f, s := d.funcs[fh], d.streams[sh]
	if f == nil || s == nil {
		d.mu.Unlock()
		return fail(fn, cudadrv.ErrInvalidHandle)
	}
	if f.ctx != s.ctx {
		d.mu.Unlock()
		return fail(fn, cudadrv.ErrInvalidContext)
	}
	if f.ctx.sticky != 0 {
		d.mu.Unlock()
		return fail(fn, f.ctx.sticky)
	}
	impl := d.kernels[f.entry]
	d.mu.Unlock()
	threads := uint64(block[0]) * uint64(block[1]) * uint64(block[2])
	if threads == 0 || threads > 1024 || grid[0] == 0 || grid[1] == 0 || grid[2] == 0 ||
		grid[0] > math.MaxInt32 || grid[1] > 65535 || grid[2] > 65535 || block[2] > 64 {
		return fail(fn, cudadrv.ErrInvalidValue)
	}
	l := &Launch{Entry: f.entry, Grid: grid, Block: block, d: d}
	if len(f.params) > 0 {
		if params == nil {
			return fail(fn, cudadrv.ErrInvalidValue)
		}
		ptrs := unsafe.Slice((*unsafe.Pointer)(params), len(f.params))
		for i, p := range f.params {
			if ptrs[i] == nil {
				return fail(fn, cudadrv.ErrInvalidValue)
			}
			l.Params = append(l.Params, append([]byte(nil), unsafe.Slice((*byte)(ptrs[i]), p.Size)...))
		}
	}
	c := f.ctx
	s.enqueue(d, func() {
		d.mu.Lock()
		d.launches[f.entry]++
		faulted := c.sticky != 0
		d.mu.Unlock()
		if impl == nil || faulted {
			return
		}
		if err := impl(l); err != nil {
			d.mu.Lock()
			c.sticky = cudadrv.ErrIllegalAddress
			d.mu.Unlock()
		}
	})
	return nil
}
