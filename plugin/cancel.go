package plugin

import (
	"context"
	"sync"
)

// A StopSignal tells kernels that they should stop: it closes the Done
// channel of every KernelCtx made with it (KernelCtx.WithStop). A CPU kind
// keeps one per device and gives it to its kernels' contexts; its
// Canceler.CancelKernels calls Stop. Kernels watch ctx.Done() or
// ctx.Err() in their loops and return early; nothing forces them.
type StopSignal struct {
	once sync.Once
	ch   chan struct{}

	mu   sync.Mutex
	next int
	then map[int]func() // run when it stops (OnStop)
}

// NewStopSignal returns a signal that has not stopped.
func NewStopSignal() *StopSignal { return &StopSignal{ch: make(chan struct{})} }

// Stop closes the signal's channel, and stops the signals that stop with
// it; later calls do nothing.
func (s *StopSignal) Stop() {
	s.once.Do(func() {
		s.mu.Lock()
		close(s.ch)
		then := s.then
		s.then = nil
		s.mu.Unlock()
		for _, f := range then {
			f()
		}
	})
}

// OnStop runs f when s stops (at once, on the caller, if it has), on the
// goroutine that stops it, until release is called. f must not block.
func (s *StopSignal) OnStop(f func()) (release func()) {
	s.mu.Lock()
	if s.Stopped() {
		s.mu.Unlock()
		f()
		return func() {}
	}
	if s.then == nil {
		s.then = map[int]func(){}
	}
	s.next++
	id := s.next
	s.then[id] = f
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.then, id)
		s.mu.Unlock()
	}
}

// StopWith makes s stop when any of parents stops, until release is called.
// If one has stopped already, s stops at once. Nil parents are ignored.
// So a launch's signal stops with its device's and with its own caller's.
func (s *StopSignal) StopWith(parents ...*StopSignal) (release func()) {
	var rels []func()
	for _, p := range parents {
		if p != nil {
			rels = append(rels, p.OnStop(s.Stop))
		}
	}
	return func() {
		for _, r := range rels {
			r()
		}
	}
}

// Stopped reports whether Stop was called.
func (s *StopSignal) Stopped() bool {
	select {
	case <-s.ch:
		return true
	default:
		return false
	}
}

// WithStop returns a copy of c whose Done channel is s's.
func (c *KernelCtx) WithStop(s *StopSignal) *KernelCtx {
	c2 := *c
	c2.stop = s
	return &c2
}

// Done returns a channel that is closed when the kernel should stop, as
// when the runtime is stopping (see Canceler). It returns nil if nothing
// will ask the kernel to stop.
func (c *KernelCtx) Done() <-chan struct{} {
	if c.stop == nil {
		return nil
	}
	return c.stop.ch
}

// Err returns context.Canceled once Done is closed, and nil before.
func (c *KernelCtx) Err() error {
	if c.stop != nil && c.stop.Stopped() {
		return context.Canceled
	}
	return nil
}

// Canceler is implemented by devices whose running kernels can be asked to
// stop. CancelKernels closes the Done channel of their contexts, on the
// device, in its process. The runtime calls it when Stop begins.
// It must not block.
type Canceler interface {
	CancelKernels()
}

// StopLauncher is implemented by queues whose kernels can be asked to stop
// one launch at a time. LaunchStop is Launch whose kernel's Ctx.Done also
// closes when stop stops. The runtime stops it when the construct's context
// ends. A queue without it launches with Launch, and its kernels stop only
// with their device's (Canceler).
type StopLauncher interface {
	LaunchStop(k Kernel, args []Arg, stop *StopSignal) error
}

// AddrResolver is implemented by devices whose Ptrs are not the addresses
// their kernels see. A device process's memory, for one, is named by
// numbers the host assigns, so that allocating never waits for the device.
// DeviceAddr returns the address in the device's process of the byte at p,
// as its kernels see it.
type AddrResolver interface {
	DeviceAddr(p Ptr) (uintptr, error)
}

// Killer is implemented by devices whose work can be ended by force, such
// as a device process. Kill kills the process, or cuts its link for a
// process of another machine. Every operation pending on the device then
// fails with an error wrapping ErrDeviceLost that says why.
// The runtime calls Kill at Stop for a device whose work did not end within
// the grace period after its kernels were cancelled. It must not block for
// long.
type Killer interface {
	Kill(why error)
}

// TaskLimiter is implemented by devices that can bound how many of their
// kernels run at once (GOFFLOAD_DEVICE_TASKS, offload.WithDeviceTasks).
// LimitTasks(n) makes a launch wait, on its queue, until fewer than n
// kernels of the device run. Pool.SetKernelLimit does it for a CPU kind's
// pool. The runtime calls LimitTasks after Load, with n >= 1.
type TaskLimiter interface {
	LimitTasks(n int)
}

// Abandoner is implemented by devices whose running kernels cannot be
// ended by force, as they run on goroutines of this process (the host
// kind). Abandon makes the device's operations fail with why, which wraps
// ErrDeviceLost, instead of running. That holds for every operation of the
// device's queues that has not begun, and every operation enqueued later.
// So once Abandon returns, no copy of the device writes into host memory.
// A kernel running goes on, on its device memory only. The device keeps
// that memory until the kernel returns.
// The runtime calls Abandon at Stop for a device whose work it gives up on.
// It must not block.
type Abandoner interface {
	Abandon(why error)
}
