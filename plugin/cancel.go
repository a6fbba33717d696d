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
}

// NewStopSignal returns a signal that has not stopped.
func NewStopSignal() *StopSignal { return &StopSignal{ch: make(chan struct{})} }

// Stop closes the signal's channel; later calls do nothing.
func (s *StopSignal) Stop() { s.once.Do(func() { close(s.ch) }) }

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

// Done returns a channel that is closed when the kernel should stop (the
// runtime is stopping; see Canceler), or nil if nothing will ask it to.
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
// stop: CancelKernels closes the Done channel of their contexts (on the
// device, in its process). The runtime calls it when Stop begins. It must
// not block.
type Canceler interface {
	CancelKernels()
}

// Killer is implemented by devices whose work can be ended by force: a
// device process, which Kill kills (or whose link it cuts, for a process
// of another machine), so that every operation pending on the device fails
// with an error wrapping ErrDeviceLost that says why. The runtime calls it
// at Stop for a device whose work did not end within the grace period
// after its kernels were cancelled. It must not block for long.
type Killer interface {
	Kill(why error)
}
