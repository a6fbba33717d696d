package engine

import (
	"os"
	"sync"
	"time"
)

// The device side runs to completion. The goroutine that reads a frame does
// the work it asks for when that work is short and its queue is idle. Such
// work is a launch, a small copy, a record or a sync mark. It writes the
// answer itself (link.sendSoon). So a synchronous launch crosses no goroutine
// hand-off in the device process.
//
// A kernel may run long, though, and while the reader runs it nothing else is
// read. Other queues' frames, peers' notices and the host's pings would wait
// behind it. So a reader that runs work arms a standby timer first. If the
// work is still running when it fires, a new goroutine takes the reader's
// role over. The old one, once its work is done, ends instead of reading
// again.

// standbyAfter is how long a reader may run work before another goroutine
// takes over reading. Tests shorten it (GOFFLOAD_TEST_STANDBY, a duration),
// so that every kernel a reader runs is taken over.
var standbyAfter = func() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("GOFFLOAD_TEST_STANDBY")); err == nil && d > 0 {
		return d
	}
	return 200 * time.Microsecond
}()

// readerRole is the reader's role of a link's one reading side. It says which
// goroutine holds it (by generation). It says whether that goroutine is
// running work instead of reading.
type readerRole struct {
	mu    sync.Mutex
	gen   uint64      // bumped when a standby takes the role over
	busy  bool        // the holder runs work (see run)
	t     *time.Timer // fires takeOver; stopped while the holder reads
	start func(gen uint64)
}

// init makes the role's timer. start(gen) starts a new holder of generation
// gen, on a goroutine of its own.
func (r *readerRole) init(start func(gen uint64)) {
	r.start = start
	r.t = time.AfterFunc(time.Hour, r.takeOver)
	r.t.Stop()
}

// arm starts the standby timer: the holder is about to run work. It has
// already put the work in its queue's order. So a standby that takes over
// then reads later frames, whose operations go behind it.
func (r *readerRole) arm() {
	r.mu.Lock()
	r.busy = true
	r.t.Reset(standbyAfter)
	r.mu.Unlock()
}

// disarm stops the standby timer once the work that arm announced is done.
// The goroutine of generation gen, which armed it, calls it. If a standby
// took over meanwhile, it leaves the timer to the new holder.
func (r *readerRole) disarm(gen uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gen == gen {
		r.busy = false
		r.t.Stop()
	}
}

// holds reports whether generation gen still holds the role.
func (r *readerRole) holds(gen uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.gen == gen
}

// takeOver gives the role to a new goroutine if the holder is running work. A
// timer that fires late, after the work, does nothing.
func (r *readerRole) takeOver() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.busy {
		return
	}
	r.busy = false
	r.gen++
	go r.start(r.gen)
}

// exited gives the role to a new goroutine, unless a standby took over
// already. The holder of generation gen ends: a kernel it ran called
// runtime.Goexit.
func (r *readerRole) exited(gen uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gen != gen {
		return
	}
	r.busy = false
	r.t.Stop()
	r.gen++
	go r.start(r.gen)
}

// stop stops the timer for good.
func (r *readerRole) stop() {
	r.mu.Lock()
	r.busy = false
	r.t.Stop()
	r.mu.Unlock()
}
