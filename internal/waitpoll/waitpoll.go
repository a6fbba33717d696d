// Package waitpoll is how a goroutine that waits for an answer it needs
// next (a synchronous launch's caller, a kernel runner between kernels)
// waits for it: it polls, yielding its processor between polls, for a
// bounded time, and only then parks. Waking a parked goroutine costs its
// waker a wake-up of an idle thread (a futex system call that takes 10–15
// µs on a virtual machine whose other CPU sleeps) before the woken
// goroutine can run; a goroutine that polls is not woken: the answer waits
// for it in its channel, and it sees it within one poll. Polling yields
// (runtime.Gosched) so that it takes only a processor that nothing else
// of the process wants, and nothing polls when nothing is outstanding.
package waitpoll

import (
	"runtime"
	"time"
)

// Budget is how long a caller waiting for a kernel it launched
// synchronously polls before parking: longer than most kernels, so that
// their end is noticed within microseconds (OpenMP runtimes spin for as
// long or longer: libomp's KMP_BLOCKTIME is 200 ms), short enough that a
// long kernel's wait costs a processor for only a small part of it.
const Budget = 10 * time.Millisecond

// Linger is how long a goroutine that has just answered (a kernel runner)
// polls for its next work before parking: about the time a caller takes
// to come back with the next launch.
const Linger = 100 * time.Microsecond

// Recv receives from ch, polling it for up to budget (Until, with
// yieldEvery and spins) before it blocks. ok is false if ch was closed.
func Recv[T any](ch <-chan T, budget, yieldEvery time.Duration, spins int) (v T, ok bool) {
	if Until(budget, yieldEvery, spins, func() bool {
		select {
		case v, ok = <-ch:
			return true
		default:
			return false
		}
	}) {
		return v, ok
	}
	v, ok = <-ch
	return v, ok
}

// Until calls try until it reports true, for up to budget, and reports
// whether try did. It yields the processor (runtime.Gosched) after the
// first call (after the first spins calls, if the process has more than one
// processor: for an answer that a goroutine running elsewhere gives within
// a microsecond), and then after every call if yieldEvery is 0 or the
// process has one processor, else once every yieldEvery: a yield with another
// processor idle wakes that processor's thread (a futex system call of
// 10-15 µs on a virtual machine), so a goroutine that polls alone in its
// process yields seldom, while one that waits for a goroutine running on
// the other processors (a kernel runner) yields every time, for the loops'
// goroutines that it might hold up. A poll that finds it did not run for a
// while (preempted: the machine's cores are taken, by this process or
// others) gives up at once: polling helps only where it has a core to
// itself, and a parked goroutine's wake-up gets a core sooner on a busy
// machine than a runnable one's turn.
func Until(budget, yieldEvery time.Duration, spins int, try func() bool) bool {
	if try() {
		return true
	}
	if budget <= 0 {
		return false
	}
	if runtime.GOMAXPROCS(0) == 1 {
		yieldEvery, spins = 0, 0
	}
	for range spins {
		if try() {
			return true
		}
	}
	start := time.Now()
	last, yielded := start, start
	runtime.Gosched()
	for i := 1; ; i++ {
		if try() {
			return true
		}
		if i%8 == 0 { // the clock is read every 8th poll
			now := time.Now()
			if now.Sub(start) >= budget || now.Sub(last) >= preempted {
				return false
			}
			last = now
			if yieldEvery > 0 && now.Sub(yielded) >= yieldEvery {
				yielded = now
				runtime.Gosched()
			}
		}
		if yieldEvery == 0 {
			runtime.Gosched()
		}
	}
}

// preempted is how long eight polls must have taken for the poller to
// count as preempted (they take a few microseconds when it runs).
const preempted = 100 * time.Microsecond
