package core

import (
	"slices"
	"testing"
)

// sealed seals a graph of nodes on d with deps, as plain state: no
// device is touched while the nodes share one.
func sealed(t *testing.T, d *Device, deps ...[]Dep) *Graph {
	t.Helper()
	g := &Graph{}
	for _, ds := range deps {
		g.nodes = append(g.nodes, gnode{dev: d, name: "n", deps: ds})
	}
	if err := g.Seal(); err != nil {
		t.Fatal(err)
	}
	return g
}

func dep(k DepKind, addr uintptr) []Dep { return []Dep{{Kind: k, Addr: addr, Size: 8}} }

// TestGraphLanes: a chain stays on one lane with no waits; independent
// nodes spread over maxLanes lanes, then share them oldest first; a join
// waits for the predecessors on other lanes, which signal.
func TestGraphLanes(t *testing.T) {
	d := &Device{}
	chain := sealed(t, d, dep(DepOut, 8), dep(DepInOut, 8), dep(DepIn, 8))
	for i, n := range chain.nodes {
		if n.lane != 0 || len(n.waits) != 0 || n.signal {
			t.Errorf("chain node %d: lane %d, waits %v, signal %v; want lane 0 and no waits", i, n.lane, n.waits, n.signal)
		}
	}
	var free [][]Dep
	for i := range maxLanes + 2 {
		free = append(free, dep(DepOut, uintptr(8*(i+1))))
	}
	indep := sealed(t, d, free...)
	var lanes []int
	for _, n := range indep.nodes {
		lanes = append(lanes, n.lane)
		if len(n.waits) != 0 {
			t.Errorf("independent nodes wait: %v", n.waits)
		}
	}
	if want := []int{0, 1, 2, 3, 0, 1}; !slices.Equal(lanes, want) {
		t.Errorf("independent nodes' lanes %v, want %v", lanes, want)
	}
	// Two writers on lanes 0 and 1, then a reader of both: on one of
	// their lanes, waiting for the other.
	join := sealed(t, d, dep(DepOut, 8), dep(DepOut, 16), append(dep(DepIn, 8), dep(DepIn, 16)...))
	n := join.nodes[2]
	other := 1 - n.lane
	if n.lane > 1 || !slices.Equal(n.waits, []int{other}) || !join.nodes[other].signal {
		t.Errorf("join: lane %d, waits %v, node %d signals %v; want a writer's lane, waiting for the other", n.lane, n.waits, other, join.nodes[other].signal)
	}
	// A wait the lane knows is done is left out: n4 (after n3 on n2's
	// lane) needs n1, which n2 waited for.
	ds := func(ds ...[]Dep) []Dep { return slices.Concat(ds...) }
	implied := sealed(t, d, dep(DepOut, 8), dep(DepOut, 16), ds(dep(DepIn, 8), dep(DepIn, 16), dep(DepOut, 24)),
		ds(dep(DepIn, 24), dep(DepOut, 32)), ds(dep(DepIn, 32), dep(DepIn, 16), dep(DepOut, 40)))
	if n2, n4 := implied.nodes[2], implied.nodes[4]; n4.lane != n2.lane || !slices.Equal(n2.waits, []int{1}) || len(n4.waits) != 0 {
		t.Errorf("implied: n2 on lane %d waits %v, n4 on lane %d waits %v; want n4 on n2's lane, waiting for none", n2.lane, n2.waits, n4.lane, n4.waits)
	}
	if len(join.deps) != 4 {
		t.Errorf("join's clauses %v, want the 4 distinct ones", join.deps)
	}
}
