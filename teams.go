package offload

import (
	"fmt"
	"strings"

	"github.com/goffload/offload/plugin"
)

// maxDim is the largest dimension of num_teams and thread_limit: a CUDA
// grid's x dimension (2³¹−1). A device checks its own limits beyond it.
const maxDim = 1<<31 - 1

// NumTeams returns d with OpenMP's num_teams clause: the kernels it
// launches run as dims teams. On a GPU, the teams are the grid of thread
// blocks, in one to three dimensions (the 3-D form is the ompx_bare
// extension's). Without the clause (or GlobalSize), a GPU runs one thread
// per element of the longest slice argument the kernel may write, in
// blocks of its default size.
// CPU devices take the clause as the hint OpenMP allows it to be: their
// kernels split loops over their cores.
//
//	Saxpy.Run(offload.On(0).NumTeams(n/128).ThreadLimit(128), n, a, x, y)
//
// A dimension below 1 or above 2³¹−1, or more than three of them, fails
// the launch with ErrBadArgument.
func (d Device) NumTeams(dims ...int) Device {
	d.geo.Teams, d.clauseErr = dims3("num_teams", dims, d.clauseErr)
	return d
}

// ThreadLimit returns d with OpenMP's thread_limit clause: each team of
// the kernels it launches has dims threads. On a GPU, a team is the thread
// block, in one to three dimensions. A GPU refuses a block larger than it
// can run (1024 threads on NVIDIA GPUs), naming the kernel. CPU devices
// take the clause as a hint. Bad dimensions fail the launch as NumTeams's
// do.
func (d Device) ThreadLimit(dims ...int) Device {
	d.geo.Threads, d.clauseErr = dims3("thread_limit", dims, d.clauseErr)
	return d
}

// GlobalSize returns d with the global size of the kernels it launches in
// device code (OpenCL C's global_work_size): dims work-items, or threads,
// in one to three dimensions. Without it (and without NumTeams) a GPU runs
// one work-item per element of the longest slice argument the kernel may
// write (its Out, InOut and plain slices), or of its longest slice if it
// writes none. A GPU rounds the size up to a multiple of its block
// (ThreadLimit, or its default): the kernel checks its index against its
// length. CPU devices, whose Go bodies have no work-items, ignore it.
// Giving NumTeams too fails the launch with ErrBadArgument.
//
//	Lookup.Run(offload.On(0).GlobalSize(lookups), …)
func (d Device) GlobalSize(dims ...int) Device {
	d.geo.Size, d.clauseErr = dims3("global_size", dims, d.clauseErr)
	return d
}

// GlobalOffset returns d with the global offset of the kernels it
// launches in device code: their work-items are numbered from dims, in
// one to three dimensions, so that a kernel that numbers its work from
// get_global_id(0) can run a part of it (OpenCL C's global_work_offset;
// a PTX entry takes the offset as an extra parameter, see docs/gpu.md).
// CPU devices ignore it. A dimension below 0 fails the launch with
// ErrBadArgument.
func (d Device) GlobalOffset(dims ...int) Device {
	d.geo.Offset, d.clauseErr = dimsFrom("global_offset", dims, 0, d.clauseErr)
	return d
}

// dims3 is the 3-D form of a clause's dims, or the first error (prev, or
// one for dims).
func dims3(clause string, dims []int, prev error) ([3]int, error) {
	return dimsFrom(clause, dims, 1, prev)
}

// dimsFrom is dims3 with dimensions from least up: the dimensions not
// given are least too.
func dimsFrom(clause string, dims []int, least int, prev error) ([3]int, error) {
	if prev != nil {
		return [3]int{}, prev
	}
	what := fmt.Sprintf("%s(%s)", clause, strings.Join(strings.Fields(strings.Trim(fmt.Sprint(dims), "[]")), ","))
	if len(dims) < 1 || len(dims) > 3 {
		return [3]int{}, fmt.Errorf("%s: %w: %d dimensions, want 1 to 3", what, ErrBadArgument, len(dims))
	}
	out := [3]int{least, least, least}
	for i, v := range dims {
		if v < least || v > maxDim {
			return [3]int{}, fmt.Errorf("%s: %w: dimension %d is %d, want %d to %d", what, ErrBadArgument, i, v, least, maxDim)
		}
		out[i] = v
	}
	return out, nil
}

// geometry is the launch geometry d's clauses ask for, or their error.
func (d Device) geometry() (plugin.Geometry, error) {
	if d.clauseErr == nil && d.geo.Teams != ([3]int{}) && d.geo.Size != ([3]int{}) {
		return d.geo, fmt.Errorf("%s: %w: num_teams and global_size both give the number of work-items: give one", d.geo, ErrBadArgument)
	}
	return d.geo, d.clauseErr
}
