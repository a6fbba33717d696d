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
	"sync/atomic"
	"syscall"
	"time"
)

// crowded is set when this machine runs more of the program's processes
// than it has cores (the host and its local device processes): see Pause.
var crowded atomic.Bool

// SetCrowded says whether this process shares the machine's cores with
// more of the program's processes than there are cores: the host sets it
// when it starts its local devices, and tells them.
func SetCrowded(on bool) { crowded.Store(on) }

// Crowded reports what SetCrowded said.
func Crowded() bool { return crowded.Load() }

// Pause is a poller's yield between polls, poll being the count of its
// polls so far: it yields the processor (runtime.Gosched) to the
// process's other goroutines and, where the machine is crowded, every
// eighth poll the core itself to the operating system (sched_yield). With
// more processes than cores, a process that polls holds a core that the
// process it waits for may need: that process's thread, woken, waits for
// the poller's time slice to end (a 16-byte copy between two local devices
// on a 2-core machine, three processes polling: about 320 µs; with the
// pollers yielding the core, about 50 µs). Where every process has a core,
// the yield would only hand the core to other programs, and it is left out.
func Pause(poll int) {
	if poll%8 == 0 && crowded.Load() {
		syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
		return
	}
	runtime.Gosched()
}

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
	Pause(1)
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
				Pause(i)
			}
		}
		if yieldEvery == 0 {
			Pause(i)
		}
	}
}

// preempted is how long eight polls must have taken for the poller to
// count as preempted (they take a few microseconds when it runs).
const preempted = 100 * time.Microsecond
