package plugintest

import (
	"encoding/binary"
	"runtime"
	"testing"

	"github.com/goffload/offload/plugin"
)

// testInlineHandOver checks a queue that issues operations on the caller when
// it is idle (plugin.InlineQueue). Another goroutine enqueues an operation
// while the caller issues one. That operation is done after it, not lost or
// run ahead: the queue's goroutine takes over when the caller returns. (A
// queue that marks itself idle when its caller returns leaves it behind.)
func (e *env) testInlineHandOver(t *testing.T) {
	d := e.devs[0]
	q := newQueue(t, d)
	iq, ok := q.(plugin.InlineQueue)
	if !ok {
		t.Skip("the kind's queues are not plugin.InlineQueue")
	}
	iq.SetInline(true)
	x := alloc(t, d, 8)
	for _, ms := range []int64{20, 100, 500} {
		put(t, q, x, make([]byte, 8))
		mustSync(t, q)
		// A: a kernel that holds the queue, enqueued on the idle queue
		// (issued on A's goroutine, which a kind may block meanwhile).
		a := make(chan error, 1)
		go func() { a <- q.Launch(kSleep, []plugin.Arg{scalar(ms)}) }()
		// B, once A's kernel holds the queue.
		var aErr error
		aDone, held := false, false
		for !held && !aDone {
			select {
			case aErr = <-a:
				aDone = true
			default:
				runtime.Gosched()
			}
			done, err := q.Query()
			if err != nil {
				t.Fatalf("Query: %v", err)
			}
			held = !done
		}
		launch(t, q, kAddInt64, slice(x, 1), scalar(int64(1)))
		if !aDone {
			aErr = within(t, "an inline Launch", func() error { return <-a })
		}
		if aErr != nil {
			t.Fatalf("Launch(%s): %v", kSleep.Name(), aErr)
		}
		if got := int64(binary.LittleEndian.Uint64(get(t, q, x, 8))); got != 1 {
			t.Fatalf("x = %d after a launch that added 1 to 0, enqueued while an inline launch held the queue: it was lost or overtaken", got)
		}
		if held {
			return
		}
	}
	t.Log("no launch was seen holding the queue: the hand-over was not exercised")
}
