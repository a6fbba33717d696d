package plugin

import "fmt"

// Geometry is the shape a program asks a kernel launch to have.
// Teams is the number of teams (a GPU's grid of thread blocks), and Threads
// the threads of each team (a block). OpenMP's num_teams and thread_limit
// clauses give them. They have up to three dimensions, as in the ompx_bare
// extension.
//
// Size and Offset are the global size and offset of kernels in device
// code (OpenCL C's global_work_size and global_work_offset): Size work-items
// (threads) in each dimension, numbered from Offset. A GPU kind runs at
// least Size work-items, in teams of Threads (so Size is rounded up to a
// multiple of it); a CPU kind's Go bodies have no work-items, and take
// neither.
//
// A zero Teams (all three zero) means the program left the number of teams
// to the kind, which chooses it from the trip count. So it is for Threads
// and Size. A set Teams, Threads or Size has every dimension at least 1.
// An Offset's dimensions are at least 0. The program does not set both
// Teams and Size.
type Geometry struct {
	Teams   [3]int
	Threads [3]int
	Size    [3]int
	Offset  [3]int
}

// IsZero reports whether g asks for nothing: the kind chooses everything.
func (g Geometry) IsZero() bool { return g == Geometry{} }

// String is the geometry as OpenMP clauses, for messages:
// "num_teams(4) thread_limit(128)", "num_teams(4,2,1)",
// "global_size(1000) global_offset(500)", or "" when zero.
func (g Geometry) String() string {
	s := ""
	if g.Teams != ([3]int{}) {
		s = "num_teams(" + dimString(g.Teams) + ")"
	}
	for _, c := range []struct {
		name string
		dims [3]int
	}{{"thread_limit", g.Threads}, {"global_size", g.Size}, {"global_offset", g.Offset}} {
		if c.dims != ([3]int{}) {
			if s != "" {
				s += " "
			}
			s += c.name + "(" + dimString(c.dims) + ")"
		}
	}
	return s
}

func dimString(d [3]int) string {
	if d[1] == d[2] && (d[1] == 1 || d[1] == 0) { // one dimension: 1s for sizes, 0s for offsets
		return fmt.Sprint(d[0])
	}
	return fmt.Sprintf("%d,%d,%d", d[0], d[1], d[2])
}

// GeometryLauncher is implemented by a [Queue] whose launches take a
// geometry (a GPU's grid and block). The core calls LaunchGeometry instead
// of Launch when the program gave num_teams, thread_limit, a global size
// or an offset. A kind without it gets Launch, and the geometry is a hint
// it does not need: OpenMP lets an implementation run fewer teams and
// threads than asked for.
//
// LaunchGeometry is Launch with g. A dimension of g that the device cannot
// run (beyond its maximum block size, say) is an error wrapping
// [ErrBadKernel] that names the kernel. The error comes when the launch is
// enqueued or at the next Synchronize.
type GeometryLauncher interface {
	LaunchGeometry(k Kernel, args []Arg, g Geometry) error
}
