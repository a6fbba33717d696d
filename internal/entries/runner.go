// How a kernel body is called: on runner goroutines, so that a body's
// runtime.Goexit ends a runner, not the caller; panics become
// *plugin.KernelPanic errors.

package entries

import (
	"reflect"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/goffload/offload/internal/waitpoll"
	"github.com/goffload/offload/internal/workpool"
	"github.com/goffload/offload/plugin"
)

// Call runs k with ctx and args, which must match k's parameters.
// A slice argument is a reflect slice value of the element type, made with
// reflect.SliceAt over device memory. A scalar is a value of the
// parameter's type. A panic in the body or in its loop chunks is returned
// as an error wrapping ErrKernelFailed, with the panic value and stack.
// So is a call to runtime.Goexit, which cannot end the caller's goroutine:
// the body runs on a runner goroutine (see runner).
func (k *Kernel) Call(ctx *plugin.KernelCtx, args []reflect.Value) error {
	return k.onRunner(job{k: k, in: k.callValues(ctx, args)})
}

// callValues are the values of a call of the body with ctx and args (as
// Call takes them): struct parameters assembled, the context first.
func (k *Kernel) callValues(ctx *plugin.KernelCtx, args []reflect.Value) []reflect.Value {
	args = k.Assemble(args)
	if !k.hasCtx {
		return args
	}
	in := make([]reflect.Value, 0, len(args)+1)
	in = append(in, k.ctxValue(ctx))
	return append(in, args...)
}

// onRunner runs j on a runner and returns what became of it. The caller
// polls for the runner's answer before it parks (waitpoll.Recv): a kernel's
// end is then noticed within a poll, where waking a parked caller cost its
// runner a thread's wake-up first (8–15 µs on a 2-core VM, for any kernel
// long enough that the caller's thread went to sleep).
func (k *Kernel) onRunner(j job) error {
	r := getRunner()
	spins := 0
	if r.polling.Load() {
		// It takes the job on another processor at once: a short
		// kernel's answer comes within a microsecond.
		spins = answerSpins
	}
	r.jobs <- j // never blocks: an idle runner's channel is empty
	budget := time.Duration(0)
	if k.long.Load() {
		// The kernel ran long last time: poll. Yielding after every
		// poll: the runner may wait in this goroutine's processor to
		// run, and a kernel's loop hands its chunks on by yielding too.
		// A short kernel's caller parks, as the threads are awake then
		// and the hand-off on one processor costs least.
		budget = waitpoll.Budget
	}
	res, _ := waitpoll.Recv(r.done, budget, 0, spins)
	if !res.exited {
		putRunner(r)
	}
	return res.err
}

// A runner is a goroutine that runs kernel bodies. A body calling
// runtime.Goexit, which nothing can stop, then ends the runner, not the
// caller. The caller is the host's goroutine on the initial device, or a
// device queue's. Idle runners wait for work, which costs less than a
// goroutine per call. One that a Goexit ends is not reused.
type runner struct {
	jobs    chan job
	done    chan result
	polling atomic.Bool // it polls jobs, not parked
}

// lingerAfter is how long a kernel must have run for its runner to poll
// for the next job afterwards. It is long enough for an idle thread to
// have gone to sleep, which the next job's hand-off to a parked runner
// would wake.
const lingerAfter = 20 * time.Microsecond

// answerSpins is how many polls a caller makes, without yielding, for the
// answer of a runner that polls for its job.
const answerSpins = 256

type job struct {
	k  *Kernel
	in []reflect.Value // a call through reflection
	// direct says the call is the kernel's DirectFunc's, of ctx, args and
	// mem; in is unused then.
	direct bool
	ctx    *plugin.KernelCtx
	args   []plugin.Arg
	mem    plugin.Mem
}

type result struct {
	err    error
	exited bool // the runner ended (runtime.Goexit)
}

// maxIdleRunners bounds the runners kept waiting; more end when they finish.
const maxIdleRunners = 64

var runners struct {
	sync.Mutex
	idle []*runner
}

func getRunner() *runner {
	runners.Lock()
	if n := len(runners.idle); n > 0 {
		r := runners.idle[n-1]
		runners.idle[n-1] = nil
		runners.idle = runners.idle[:n-1]
		runners.Unlock()
		return r
	}
	runners.Unlock()
	r := &runner{jobs: make(chan job, 1), done: make(chan result, 1)}
	go r.loop()
	return r
}

func putRunner(r *runner) {
	runners.Lock()
	if len(runners.idle) < maxIdleRunners {
		runners.idle = append(runners.idle, r)
		runners.Unlock()
		return
	}
	runners.Unlock()
	close(r.jobs)
}

// ReleaseIdleRunners ends the runners that wait for work. The runtime's
// Stop calls it: a program that stopped offloading keeps no goroutine of
// the pool. Runners are made again on demand.
func ReleaseIdleRunners() {
	runners.Lock()
	idle := runners.idle
	runners.idle = nil
	runners.Unlock()
	for _, r := range idle {
		close(r.jobs)
	}
}

func (r *runner) loop() {
	for j, ok := <-r.jobs; ok; {
		start := time.Now()
		j.k.run(j, nil, r.done)
		long := time.Since(start) >= lingerAfter
		if j.k.long.Load() != long {
			j.k.long.Store(long)
		}
		if !long {
			// The threads are awake: handing the next job over wakes
			// none, and on the caller's own processor it costs less
			// than between two.
			j, ok = <-r.jobs
			continue
		}
		// Polling for the next job, yielding seldom: the caller runs
		// elsewhere, and a yield with a processor idle wakes a thread.
		r.polling.Store(true)
		j, ok = waitpoll.Recv(r.jobs, waitpoll.Linger, 20*time.Microsecond, 0)
		r.polling.Store(false)
	}
}

// run calls the body and says what became of it: nil, or an error for a
// panic or a runtime.Goexit (which a deferred function sees as a return with
// nothing to recover). It sends it on done, or stores it in res where done is
// nil (a call on the caller's goroutine: no channel to make).
func (k *Kernel) run(j job, res *result, done chan<- result) {
	returned := false
	var err error // the DirectFunc's: its arguments' memory was wrong
	defer func() {
		var out result
		if returned {
			out.err = err
		} else {
			// A *KernelPanic: one line of text, the trimmed stack in its Stack.
			r := recover()
			switch pe, _ := r.(*workpool.PanicError); {
			case r == nil: // the stack still holds the frame that called Goexit
				out = result{exited: true, err: plugin.NewKernelPanic(k.name, nil, true, false, debug.Stack())}
			case pe != nil:
				out.err = plugin.NewKernelPanic(k.name, pe.Value, pe.Goexit, true, pe.Stack)
			default:
				out.err = plugin.NewKernelPanic(k.name, r, false, false, debug.Stack())
			}
		}
		if done == nil {
			*res = out
			return
		}
		done <- out
	}()
	if j.direct {
		err = k.direct(j.ctx, j.args, j.mem)
	} else {
		k.fn.Call(j.in)
	}
	returned = true
}

// BodyFrames names the functions below which a kernel body runs on a
// goroutine's stack (a runner's loop, LaunchHere's caller): the core's
// InTask looks for them. They are taken from the functions themselves, so
// a rename cannot leave InTask looking for a name that is gone.
func BodyFrames() []string {
	return []string{funcName((*runner).loop), funcName((*Kernel).LaunchHere)}
}

func funcName(f any) string { return runtime.FuncForPC(reflect.ValueOf(f).Pointer()).Name() }
