//go:build race

package offload_test

// raceAllocs is what the race detector adds to a task's heap allocations
// (its instrumentation allocates): the allocation tests allow for it.
const raceAllocs = 3

// raceNodeAllocs is what it adds to a replayed node's (none without it).
const raceNodeAllocs = 0.5
