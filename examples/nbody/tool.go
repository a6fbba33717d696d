package main

import (
	"sync"

	"github.com/goffload/offload"
)

// counter counts the kernel launches per device: an offload.Tool.
type counter struct {
	mu sync.Mutex
	n  map[int]int
}

func (c *counter) count(d int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[d]
}

func (*counter) TargetBegin(offload.TargetEvent) {}
func (*counter) TargetEnd(offload.TargetEvent)   {}
func (*counter) DataOp(offload.DataEvent)        {}
func (*counter) Wait(offload.WaitEvent)          {}

func (c *counter) KernelLaunch(e offload.KernelEvent) {
	c.mu.Lock()
	if c.n == nil {
		c.n = map[int]int{}
	}
	c.n[e.Device]++
	c.mu.Unlock()
}
