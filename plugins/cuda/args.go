package cuda

import (
	"fmt"
	"reflect"
	"unsafe"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/gpukind"
)

// blockSize is the threads per block of a launch.
const blockSize = 256

// params is a launch's parameters packed as cuLaunchKernel takes them. Each
// value is at an offset aligned for its type in buf. The pointers to them
// (kernelParams) are made from offs when the launch is issued.
type params struct {
	buf  []uint64 // 8-byte aligned storage
	offs []int    // byte offset of each parameter's value
	size []int    // its size
}

// bytes returns the packed values.
func (p *params) bytes() []byte {
	if len(p.buf) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&p.buf[0])), 8*len(p.buf))
}

// paramLayout returns the size and alignment of parameter p's value as a PTX
// entry takes it. A slice is its device address (8 bytes). A scalar is its
// bytes in Go's layout.
func paramLayout(p plugin.Param) (size, align int) {
	if p.Kind == plugin.Slice {
		return 8, 8
	}
	return int(p.Type.Size()), p.Type.Align()
}

// pack lays out args, checked against k's parameters (plugin.CheckArgs), in
// parameter order. Then it lays out extra: 64-bit values after the Go
// parameters, the global offsets of an entry that takes them. It does not
// check slices' memory.
func pack(k plugin.Kernel, args []plugin.Arg, extra []uint64) (*params, error) {
	if err := plugin.CheckArgs(k, args); err != nil {
		return nil, err
	}
	n := len(args) + len(extra)
	p := &params{offs: make([]int, n), size: make([]int, n)}
	off := 0
	for i, prm := range k.Params() {
		size, align := paramLayout(prm)
		if size == 0 {
			return nil, fmt.Errorf("%w: kernel %q: the Go parameter %s has size 0, and a PTX entry has no parameter of size 0: leave it out", plugin.ErrBadKernel, k.Name(), gpukind.GoParam(k, i))
		}
		off = (off + align - 1) &^ (align - 1)
		p.offs[i], p.size[i] = off, size
		off += size
	}
	for i := range extra {
		off = (off + 7) &^ 7
		p.offs[len(args)+i], p.size[len(args)+i] = off, 8
		off += 8
	}
	p.buf = make([]uint64, (off+7)/8)
	if len(p.buf) == 0 {
		return p, nil
	}
	base := unsafe.Pointer(&p.buf[0])
	for i, prm := range k.Params() {
		a, at := args[i], unsafe.Add(base, p.offs[i])
		if prm.Kind == plugin.Slice {
			*(*uint64)(at) = uint64(a.Ptr)
			continue
		}
		if !putScalar(at, prm.Type, a.Scalar) {
			return nil, plugin.CheckArg(k, i, a)
		}
	}
	for i, v := range extra {
		*(*uint64)(unsafe.Add(base, p.offs[len(args)+i])) = v
	}
	return p, nil
}

// putScalar writes v, which must be of type t, at at. It reports false if v
// is not of type t.
func putScalar(at unsafe.Pointer, t reflect.Type, v any) bool {
	switch x := v.(type) { // the common types without reflection
	case float32:
		if t == typeFloat32 {
			*(*float32)(at) = x
			return true
		}
	case float64:
		if t == typeFloat64 {
			*(*float64)(at) = x
			return true
		}
	case int:
		if t == typeInt {
			*(*int)(at) = x
			return true
		}
	case int32:
		if t == typeInt32 {
			*(*int32)(at) = x
			return true
		}
	case int64:
		if t == typeInt64 {
			*(*int64)(at) = x
			return true
		}
	case uint32:
		if t == typeUint32 {
			*(*uint32)(at) = x
			return true
		}
	case uint64:
		if t == typeUint64 {
			*(*uint64)(at) = x
			return true
		}
	}
	rv := reflect.ValueOf(v)
	if !rv.IsValid() || rv.Type() != t {
		return false
	}
	// The value's bytes are copied into addressable memory of its type, then
	// out as bytes. (Go's layout of plain data is C's.)
	c := reflect.New(t)
	c.Elem().Set(rv)
	copy(unsafe.Slice((*byte)(at), t.Size()), unsafe.Slice((*byte)(c.UnsafePointer()), t.Size()))
	return true
}

var (
	typeFloat32 = reflect.TypeFor[float32]()
	typeFloat64 = reflect.TypeFor[float64]()
	typeInt     = reflect.TypeFor[int]()
	typeInt32   = reflect.TypeFor[int32]()
	typeInt64   = reflect.TypeFor[int64]()
	typeUint32  = reflect.TypeFor[uint32]()
	typeUint64  = reflect.TypeFor[uint64]()
)

// These are the limits of a launch's geometry on every NVIDIA GPU since
// compute capability 2.0. They are the threads per block, and the block's and
// grid's dimensions.
var (
	maxBlockThreads = 1024
	maxBlock        = [3]int{1024, 1024, 64}
	maxGrid         = [3]int{1<<31 - 1, 65535, 65535}
)

// grid is a launch's grid and block. The block is geo's (thread_limit), else
// blockSize threads. The grid is geo's teams. Else it is as many blocks as
// the global size needs, at least one. The global size is geo's, else
// gpukind.Extent: one thread per element of the longest slice the kernel may
// write. A geometry beyond the GPU's limits is an error naming the kernel.
func grid(k plugin.Kernel, args []plugin.Arg, geo plugin.Geometry) (g, b [3]uint32, err error) {
	block := [3]int{blockSize, 1, 1}
	if geo.Threads != ([3]int{}) {
		block = geo.Threads
	}
	teams := geo.Teams
	if teams == ([3]int{}) {
		n := gpukind.Work(k, args, geo, block)
		for i := range 3 {
			teams[i] = max(n[i]/max(block[i], 1), 1) // n is a multiple of block
		}
	}
	threads := 1
	for i := range 3 {
		if block[i] < 1 || block[i] > maxBlock[i] || teams[i] < 1 || teams[i] > maxGrid[i] {
			return g, b, fmt.Errorf("%w: kernel %q: %s: a CUDA launch takes blocks of at most %v threads and grids of at most %v blocks", plugin.ErrBadKernel, k.Name(), plugin.Geometry{Teams: teams, Threads: block}, maxBlock, maxGrid)
		}
		threads *= block[i]
		g[i], b[i] = uint32(teams[i]), uint32(block[i])
	}
	if threads > maxBlockThreads {
		return g, b, fmt.Errorf("%w: kernel %q: thread_limit(%d,%d,%d) is %d threads per block, more than the %d a CUDA block has", plugin.ErrBadKernel, k.Name(), block[0], block[1], block[2], threads, maxBlockThreads)
	}
	return g, b, nil
}

// offsets is what a launch of k in geo passes an entry that takes global
// offsets (ptxFn.offsets), after its Go parameters. It is geo's offset: x, or
// x, y and z. An offset for an entry that takes none, or takes x only, is an
// error naming the kernel. CUDA has no global offset of its own.
func offsets(k plugin.Kernel, f *ptxFn, geo plugin.Geometry) ([]uint64, error) {
	o := geo.Offset
	switch {
	case f.offsets == 3:
		return []uint64{uint64(o[0]), uint64(o[1]), uint64(o[2])}, nil
	case f.offsets == 1 && o[1] == 0 && o[2] == 0:
		return []uint64{uint64(o[0])}, nil
	case o == [3]int{}:
		return nil, nil
	}
	what := "no global offset"
	if f.offsets == 1 {
		what = "the x offset only"
	}
	return nil, fmt.Errorf("%w: kernel %q: %s: its PTX entry %s takes %s: declare one long long after the Go parameters for x, or three for x, y and z, and add them to the thread's index", plugin.ErrBadKernel, k.Name(), plugin.Geometry{Offset: o}, f.entry, what)
}
