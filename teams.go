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
// extension's). Without the clause, a GPU runs one thread per element of
// the longest slice argument, in blocks of its default size.
// CPU devices take the clause as the hint OpenMP allows it to be: their
// kernels split loops over their cores.
//
//	Saxpy.Run(offload.On(0).NumTeams(n/128).ThreadLimit(128), n, a, x, y)
//
// A dimension below 1 or above 2³¹−1, or more than three of them, fails
// the launch with ErrBadArgument.
func (d Device) NumTeams(dims ...int) Device {
	d.geo.Teams, d.geoErr = dims3("num_teams", dims, d.geoErr)
	return d
}

// ThreadLimit returns d with OpenMP's thread_limit clause: each team of
// the kernels it launches has dims threads. On a GPU, a team is the thread
// block, in one to three dimensions. A GPU refuses a block larger than it
// can run (1024 threads on NVIDIA GPUs), naming the kernel. CPU devices
// take the clause as a hint. Bad dimensions fail the launch as NumTeams's
// do.
func (d Device) ThreadLimit(dims ...int) Device {
	d.geo.Threads, d.geoErr = dims3("thread_limit", dims, d.geoErr)
	return d
}

// dims3 is the 3-D form of a clause's dims, or the first error (prev, or
// one for dims).
func dims3(clause string, dims []int, prev error) ([3]int, error) {
	if prev != nil {
		return [3]int{}, prev
	}
	what := fmt.Sprintf("%s(%s)", clause, strings.Join(strings.Fields(strings.Trim(fmt.Sprint(dims), "[]")), ","))
	if len(dims) < 1 || len(dims) > 3 {
		return [3]int{}, fmt.Errorf("%s: %w: %d dimensions, want 1 to 3", what, ErrBadArgument, len(dims))
	}
	out := [3]int{1, 1, 1}
	for i, v := range dims {
		if v < 1 || v > maxDim {
			return [3]int{}, fmt.Errorf("%s: %w: dimension %d is %d, want 1 to %d", what, ErrBadArgument, i, v, maxDim)
		}
		out[i] = v
	}
	return out, nil
}

// geometry is the launch geometry d's clauses ask for, or their error.
func (d Device) geometry() (plugin.Geometry, error) { return d.geo, d.geoErr }
