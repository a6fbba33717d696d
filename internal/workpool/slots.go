package workpool

// Task slots: a bound on how many kernels of a device run at once
// (GOFFLOAD_DEVICE_TASKS, offload.WithDeviceTasks; issue 34).

// SetKernelLimit bounds how many kernels hold a slot of the pool at once
// (KernelSlot); n <= 0 means no bound. Set it before kernels run.
func (p *Pool) SetKernelLimit(n int) {
	if n <= 0 {
		p.slots.Store(nil)
		return
	}
	ch := make(chan struct{}, n)
	p.slots.Store(&ch)
}

// KernelLimit is the bound SetKernelLimit set, 0 for none.
func (p *Pool) KernelLimit() int {
	if s := p.slots.Load(); s != nil {
		return cap(*s)
	}
	return 0
}

// KernelSlot waits for one of the pool's kernel slots, or for stop to
// close (then ok is false and nothing is held), and returns what gives it
// back. Without a bound it returns at once.
func (p *Pool) KernelSlot(stop <-chan struct{}) (release func(), ok bool) {
	s := p.slots.Load()
	if s == nil {
		return func() {}, true
	}
	select {
	case *s <- struct{}{}:
		return func() { <-*s }, true
	default:
	}
	select {
	case *s <- struct{}{}:
		return func() { <-*s }, true
	case <-stop:
		return nil, false
	}
}
