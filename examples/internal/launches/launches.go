// Package launches counts an example's kernel launches per device, to
// print where the runtime placed Any-tasks (offload.Any).
package launches

import (
	"fmt"
	"io"
	"sync"

	"github.com/goffload/offload"
	"github.com/goffload/offload/tool"
)

// Counter counts the kernel launches per device: an tool.Tool, given
// to offload.Start with offload.WithTool.
type Counter struct {
	mu sync.Mutex
	n  map[int]int
}

// Count returns how many kernels device d (offload.On(d)'s number) ran.
func (c *Counter) Count(d int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[d]
}

// Print writes a line per device that ran kernels, the initial device
// included: "  device 0 (cuda, …) ran 12 kernels".
func (c *Counter) Print(w io.Writer) {
	for d := range offload.NumDevices() + 1 {
		if n := c.Count(d); n > 0 {
			fmt.Fprintf(w, "  %s ran %d kernels\n", offload.On(d), n)
		}
	}
}

// TargetBegin does nothing (tool.Tool).
func (*Counter) TargetBegin(tool.TargetEvent) {}

// TargetEnd does nothing (tool.Tool).
func (*Counter) TargetEnd(tool.TargetEvent) {}

// DataOp does nothing (tool.Tool).
func (*Counter) DataOp(tool.DataEvent) {}

// Wait does nothing (tool.Tool).
func (*Counter) Wait(tool.WaitEvent) {}

// KernelLaunch counts the launch on its device (tool.Tool).
func (c *Counter) KernelLaunch(e tool.KernelEvent) {
	c.mu.Lock()
	if c.n == nil {
		c.n = map[int]int{}
	}
	c.n[e.Device]++
	c.mu.Unlock()
}
