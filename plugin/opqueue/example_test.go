package opqueue_test

import (
	"errors"
	"fmt"

	"github.com/goffload/offload/plugin/opqueue"
)

// Two queues and an event: b's work waits for a's, and a's failure reaches
// the event and b, until each queue's Synchronize clears its error state.
func Example() {
	a, b := opqueue.New(), opqueue.New()
	defer a.Close()
	defer b.Close()
	ev := opqueue.NewEvent()

	a.Do(func() error { fmt.Println("a: copy in"); return nil })
	a.Do(func() error { return errors.New("kernel failed") })
	a.Do(func() error { fmt.Println("a: skipped"); return nil })
	a.Record(ev) // fires with a's error
	b.Wait(ev)
	b.Do(func() error { fmt.Println("b: skipped too"); return nil })

	fmt.Println("event:", ev.Synchronize())
	fmt.Println("a:", a.Synchronize())
	fmt.Println("b:", b.Synchronize())

	// The error states are clear again.
	b.Do(func() error { fmt.Println("b: runs"); return nil })
	fmt.Println("b:", b.Synchronize())
	// Output:
	// a: copy in
	// event: kernel failed
	// a: kernel failed
	// b: waited-for event failed: kernel failed
	// b: runs
	// b: <nil>
}
