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

// params is a launch's parameters packed as cuLaunchKernel takes them:
// each value at an offset aligned for its type in buf, and the pointers
// to them (kernelParams) made from offs when the launch is issued.
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

// paramLayout returns the size and alignment of parameter p's value as a
// PTX entry takes it: a slice is its device address (8 bytes); a scalar is
// its bytes in Go's layout.
func paramLayout(p plugin.Param) (size, align int) {
	if p.Kind == plugin.Slice {
		return 8, 8
	}
	return int(p.Type.Size()), p.Type.Align()
}

// pack lays out args, checked against k's parameters (plugin.CheckArgs),
// in parameter order. It does not check slices' memory.
func pack(k plugin.Kernel, args []plugin.Arg) (*params, error) {
	if err := plugin.CheckArgs(k, args); err != nil {
		return nil, err
	}
	p := &params{offs: make([]int, len(args)), size: make([]int, len(args))}
	off := 0
	for i, prm := range k.Params() {
		size, align := paramLayout(prm)
		if size == 0 {
			return nil, fmt.Errorf("%w: kernel %q parameter %d (%s) has size 0: a PTX entry has no parameter of size 0", plugin.ErrBadKernel, k.Name(), i, prm.Type)
		}
		off = (off + align - 1) &^ (align - 1)
		p.offs[i], p.size[i] = off, size
		off += size
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
	return p, nil
}

// putScalar writes v, which must be of type t, at at; it reports false if
// v is not of type t.
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
	// The value's bytes: copied into addressable memory of its type,
	// then out as bytes (Go's layout of plain data is C's).
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

// The limits of a launch's geometry on every NVIDIA GPU since compute
// capability 2.0: threads per block, and the block's and grid's
// dimensions.
var (
	maxBlockThreads = 1024
	maxBlock        = [3]int{1024, 1024, 64}
	maxGrid         = [3]int{1<<31 - 1, 65535, 65535}
)

// grid is a launch's grid and block: geo's where it sets them; else a
// block of blockSize threads, and one thread per element of the longest
// slice argument (the trip count) in blocks of the block's x dimension, at
// least one block. A geometry beyond the GPU's limits is an error naming
// the kernel.
func grid(k plugin.Kernel, args []plugin.Arg, geo plugin.Geometry) (g, b [3]uint32, err error) {
	block := [3]int{blockSize, 1, 1}
	if geo.Threads != ([3]int{}) {
		block = geo.Threads
	}
	teams := geo.Teams
	if teams == ([3]int{}) {
		n := gpukind.LongestSlice(k, args)
		teams = [3]int{int(min(max((int64(n)+int64(block[0])-1)/int64(block[0]), 1), int64(maxGrid[0]))), 1, 1}
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
