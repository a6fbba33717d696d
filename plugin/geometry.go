package plugin

import "fmt"

// Geometry is the shape a program asks a kernel launch to have.
// Teams is the number of teams (a GPU's grid of thread blocks), and Threads
// the threads of each team (a block). OpenMP's num_teams and thread_limit
// clauses give them. They have up to three dimensions, as in the ompx_bare
// extension.
//
// A zero Teams (all three zero) means the program left the number of teams
// to the kind, which chooses it from the trip count. So it is for Threads.
// A set value has every dimension at least 1.
type Geometry struct {
	Teams   [3]int
	Threads [3]int
}

// IsZero reports whether g asks for nothing: the kind chooses both.
func (g Geometry) IsZero() bool { return g == Geometry{} }

// String is the geometry as OpenMP clauses, for messages:
// "num_teams(4) thread_limit(128)", "num_teams(4,2,1)", or "" when zero.
func (g Geometry) String() string {
	s := ""
	if g.Teams != ([3]int{}) {
		s = "num_teams(" + dimString(g.Teams) + ")"
	}
	if g.Threads != ([3]int{}) {
		if s != "" {
			s += " "
		}
		s += "thread_limit(" + dimString(g.Threads) + ")"
	}
	return s
}

func dimString(d [3]int) string {
	if d[1] == 1 && d[2] == 1 {
		return fmt.Sprint(d[0])
	}
	return fmt.Sprintf("%d,%d,%d", d[0], d[1], d[2])
}

// GeometryLauncher is implemented by a [Queue] whose launches take a
// geometry (a GPU's grid and block). The core calls LaunchGeometry instead
// of Launch when the program gave num_teams or thread_limit.
// A kind without it gets Launch, and the geometry is a hint it does not
// need: OpenMP lets an implementation run fewer teams and threads than
// asked for.
//
// LaunchGeometry is Launch with g. A dimension of g that the device cannot
// run (beyond its maximum block size, say) is an error wrapping
// [ErrBadKernel] that names the kernel. The error comes when the launch is
// enqueued or at the next Synchronize.
type GeometryLauncher interface {
	LaunchGeometry(k Kernel, args []Arg, g Geometry) error
}
