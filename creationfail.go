package offload

import (
	"fmt"
	"sync"

	"github.com/goffload/offload/internal/core"
)

// A task that could not be created carries its error: its arguments were
// refused, a device was not there, or an Any-task's section was refused.
// Its Wait returns the error. Taskwait returns it too, once, unless a Wait
// or a Group's Wait reported it first. A program that waits only with
// Taskwait must not read results that a refused task never wrote.
// Only the first such failure since the last report is kept, with a count
// of the others. A program that never waits does not make the record grow.
var notCreated struct {
	mu     sync.Mutex
	rt     *core.Runtime // the runtime the record is of
	first  *Task         // the first task not created and not reported
	others int           // how many more since
}

// noteNotCreated records t, which rt could not create.
func noteNotCreated(rt *core.Runtime, t *Task) {
	nc := &notCreated
	nc.mu.Lock()
	defer nc.mu.Unlock()
	if nc.rt != rt || nc.first == nil {
		nc.rt, nc.first, nc.others = rt, t, 0
		return
	}
	nc.others++
}

// reportedNotCreated records that t's error was reported (its Wait, or a
// Group's Wait, returned it).
func reportedNotCreated(t *Task) {
	nc := &notCreated
	nc.mu.Lock()
	if nc.first == t {
		nc.first, nc.others = nil, 0
	}
	nc.mu.Unlock()
}

// takeNotCreated returns the error of the first task rt could not create
// that was not reported yet (nil if none) and forgets it, for Taskwait.
func takeNotCreated(rt *core.Runtime) error {
	nc := &notCreated
	nc.mu.Lock()
	defer nc.mu.Unlock()
	if nc.rt != rt || nc.first == nil {
		return nil
	}
	err := nc.first.err
	if nc.others > 0 {
		err = fmt.Errorf("%w (and %d more could not be created)", err, nc.others)
	}
	nc.first, nc.others = nil, 0
	return err
}
