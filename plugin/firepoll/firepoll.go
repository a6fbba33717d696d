// Package firepoll fires the functions given to a driver event's OnFire
// (plugin.FireNotifier). It is for device kinds whose driver can only be
// asked whether an event is complete. Examples are CUDA's cuEventQuery and
// OpenCL's clGetEventInfo. One goroutine per device polls the watched events
// while there are any. So the core needs no goroutine per task, and no OS
// thread blocked in the driver.
package firepoll

import (
	"runtime"
	"sync"
	"time"
)

// A Poller fires the functions given to Add. The zero value is ready for
// use.
type Poller struct {
	mu      sync.Mutex
	watch   []watch
	running bool
}

type watch struct {
	fired func() bool
	f     func()
}

// Add runs f once fired reports true, on the poller's goroutine. It starts
// that goroutine if none runs. fired must not block. It is called until it
// reports true, and f once after that.
func (p *Poller) Add(fired func() bool, f func()) {
	p.mu.Lock()
	p.watch = append(p.watch, watch{fired, f})
	if !p.running {
		p.running = true
		go p.loop()
	}
	p.mu.Unlock()
}

// loop polls the watched events until none is left. After a round that fired
// one, it polls again right away. After rounds that did not, it yields for a
// while, then sleeps briefly between rounds.
func (p *Poller) loop() {
	idle := 0
	for {
		p.mu.Lock()
		ws := p.watch
		p.watch = nil
		p.mu.Unlock()
		var keep []watch
		fired := false
		for _, w := range ws {
			if w.fired() {
				w.f()
				fired = true
			} else {
				keep = append(keep, w)
			}
		}
		p.mu.Lock()
		p.watch = append(keep, p.watch...)
		if len(p.watch) == 0 {
			p.running = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		switch {
		case fired:
			idle = 0
		case idle < 64:
			idle++
			runtime.Gosched()
		default:
			time.Sleep(20 * time.Microsecond)
		}
	}
}
