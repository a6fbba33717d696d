package opencl

import (
	"fmt"
	"time"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/gpukind"
)

// workSize is a launch's NDRange: from geo where it sets the teams or
// threads (thread_limit is the work-group, num_teams×thread_limit the
// global size), else one work-item per element of the longest slice
// argument, in work-groups of the driver's choice. A work-group beyond
// the device's or the kernel's limits is an error naming the kernel.
func (d *device) workSize(k plugin.Kernel, wg int, args []plugin.Arg, geo plugin.Geometry) (dims int, global [3]uintptr, local *[3]uintptr, err error) {
	if geo.IsZero() {
		n := max(gpukind.LongestSlice(k, args), 1)
		return 1, [3]uintptr{uintptr(n), 1, 1}, nil, nil
	}
	block := geo.Threads
	if block == ([3]int{}) {
		block = [3]int{min(256, d.maxWG), 1, 1}
		if wg > 0 {
			block[0] = min(block[0], wg)
		}
	}
	teams := geo.Teams
	if teams == ([3]int{}) {
		n := max(gpukind.LongestSlice(k, args), 1)
		teams = [3]int{(n + block[0] - 1) / block[0], 1, 1}
	}
	threads := 1
	var l [3]uintptr
	for i := range 3 {
		if block[i] < 1 || block[i] > d.maxItems[i] || teams[i] < 1 {
			return 0, global, nil, fmt.Errorf("%w: kernel %q: %s: this OpenCL device takes work-groups of at most %v work-items", plugin.ErrBadKernel, k.Name(), plugin.Geometry{Teams: teams, Threads: block}, d.maxItems)
		}
		threads *= block[i]
		global[i], l[i] = uintptr(teams[i]*block[i]), uintptr(block[i])
		if teams[i] > 1 || block[i] > 1 {
			dims = i + 1
		}
	}
	limit := d.maxWG
	if wg > 0 {
		limit = min(limit, wg)
	}
	if threads > limit {
		return 0, global, nil, fmt.Errorf("%w: kernel %q: thread_limit(%d,%d,%d) is %d work-items per work-group, more than the %d this kernel takes on this OpenCL device", plugin.ErrBadKernel, k.Name(), block[0], block[1], block[2], threads, limit)
	}
	return max(dims, 1), global, &l, nil
}

// emulate runs o's kernel's Go body on the host over copies of the
// allocations its slice arguments lie in, once the command queue is done
// (the emulate mode, for tests: gpukind.OpEmulate).
func (q *queue) emulate(o *op) error {
	d := q.d
	if err := d.lib.Finish(q.cq); err != nil {
		return fmt.Errorf("%s: kernel %q: %w", d.label(), o.k.Name(), d.lose(err))
	}
	q.p.drain(q, ^uint64(0), true)
	d.Mu.RLock()
	kctx := d.Kernels.Ctx
	d.Mu.RUnlock()
	timed := func(start, end time.Time, err error) {
		q.hostTimed(o, plugin.OpLaunch, o.k.Name(), start, end, err)
	}
	if err := gpukind.Emulate(o.k, o.args, kctx, (*emuMemory)(q), timed); err != nil {
		return fmt.Errorf("%s: %w", d.label(), err)
	}
	return nil
}

// emuMemory is the queue's device memory as gpukind.OpEmulate copies it:
// blocking reads and writes on the command queue.
type emuMemory queue

func (m *emuMemory) Allocation(p plugin.Ptr) (plugin.Ptr, int64, bool) {
	a, _, err := m.d.mem.find(p, 0)
	if err != nil {
		return 0, 0, false
	}
	return a.base, a.size, true
}

func (m *emuMemory) Read(dst []byte, src plugin.Ptr) error {
	r, err := m.d.rangeOf(src, int64(len(dst)))
	if err != nil {
		return err
	}
	return m.d.wrap(m.d.read(m.cq, dst, r, true, nil))
}

func (m *emuMemory) Write(dst plugin.Ptr, src []byte) error {
	r, err := m.d.rangeOf(dst, int64(len(src)))
	if err != nil {
		return err
	}
	return m.d.wrap(m.d.write(m.cq, r, src, true, nil))
}
