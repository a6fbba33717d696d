package opqueue

import "testing"

// TestRunHereExitDrain: with drain reporting true, the caller that ran an
// operation here runs those enqueued meanwhile too, in order, before it
// returns, and the queue is idle after; with drain false, they go to the
// queue's goroutine as RunHereExit's do.
func TestRunHereExitDrain(t *testing.T) {
	for _, drain := range []bool{true, false} {
		q := New()
		me := goid()
		var order []int
		var where []uint64
		asked := false
		ran, err := q.RunHereExitDrain(func() error {
			q.Do(func() error { order, where = append(order, 2), append(where, goid()); return nil })
			q.Mark(true, func(error) error { order, where = append(order, 3), append(where, goid()); return nil })
			order = append(order, 1)
			return nil
		}, nil, nil, func() bool { asked = true; return drain })
		if !ran || err != nil || !asked {
			t.Fatalf("drain %v: RunHereExitDrain = %v, %v (drain asked: %v); want true, nil, asked", drain, ran, err, asked)
		}
		if drain {
			if len(order) != 3 || order[1] != 2 || order[2] != 3 || where[0] != me || where[1] != me {
				t.Errorf("drain: ran %v on goroutines %v (caller %d); want 1 2 3, all on the caller before it returned", order, where, me)
			}
			if idle, err := q.Query(); !idle || err != nil {
				t.Errorf("drain: the queue after = idle %v, %v; want idle", idle, err)
			}
		}
		if err := q.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if len(order) != 3 || order[1] != 2 || order[2] != 3 {
			t.Errorf("drain %v: order %v, want 1 2 3", drain, order)
		}
		if !drain && (where[0] == me || where[1] == me) {
			t.Errorf("no drain: the operations behind ran on the caller %d: %v", me, where)
		}
	}
}
