//go:build !race

package offload_test

// raceAllocs is what the race detector adds to a task's heap allocations:
// nothing, without it.
const raceAllocs = 0

// raceNodeAllocs is what it adds to a replayed node's.
const raceNodeAllocs = 0
