package opencl

import (
	"fmt"
	"time"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/gpukind"
)

// An ndRange is a launch's work as clEnqueueNDRangeKernel takes it.
type ndRange struct {
	dims           int
	offset, global [3]uintptr
	local          *[3]uintptr // nil: work-groups of the driver's choice
}

// workSize is a launch's NDRange, from geo's offset. The global size is the
// one geo gives, else num_teams×thread_limit. Else it is gpukind.Extent: one
// work-item per element of the longest slice the kernel may write. The
// work-groups are thread_limit, or with num_teams alone the kind's default.
// Else they are the driver's choice, and the global size is then not rounded
// up. A work-group beyond the device's or the kernel's limits is an error
// naming the kernel.
func (d *device) workSize(k plugin.Kernel, wg int, args []plugin.Arg, geo plugin.Geometry) (r ndRange, err error) {
	var block [3]int
	switch {
	case geo.Threads != [3]int{}:
		block = geo.Threads
	case geo.Teams != [3]int{}:
		block = [3]int{min(256, d.maxWG), 1, 1}
		if wg > 0 {
			block[0] = min(block[0], wg)
		}
	}
	n := gpukind.Work(k, args, geo, block)
	if block != ([3]int{}) {
		threads := 1
		for i := range 3 {
			if block[i] < 1 || block[i] > d.maxItems[i] {
				return r, fmt.Errorf("%w: kernel %q: %s: this OpenCL device takes work-groups of at most %v work-items", plugin.ErrBadKernel, k.Name(), plugin.Geometry{Teams: geo.Teams, Threads: block}, d.maxItems)
			}
			threads *= block[i]
		}
		limit := d.maxWG
		if wg > 0 {
			limit = min(limit, wg)
		}
		if threads > limit {
			return r, fmt.Errorf("%w: kernel %q: thread_limit(%d,%d,%d) is %d work-items per work-group, more than the %d this kernel takes on this OpenCL device", plugin.ErrBadKernel, k.Name(), block[0], block[1], block[2], threads, limit)
		}
		r.local = &[3]uintptr{uintptr(block[0]), uintptr(block[1]), uintptr(block[2])}
	}
	for i := range 3 {
		if n[i] < 1 {
			return r, fmt.Errorf("%w: kernel %q: %s: a global size of %v work-items", plugin.ErrBadKernel, k.Name(), geo, n)
		}
		r.global[i], r.offset[i] = uintptr(n[i]), uintptr(geo.Offset[i])
		if n[i] > 1 || block[i] > 1 || geo.Offset[i] > 0 {
			r.dims = i + 1
		}
	}
	r.dims = max(r.dims, 1)
	return r, nil
}

// emulate runs o's kernel's Go body on the host over copies of the
// allocations its slice arguments lie in. It does so once the command queue
// is done. That is the emulate mode, for tests (gpukind.Emulate).
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

// emuMemory is the queue's device memory as gpukind.Emulate copies it. Reads
// and writes block on the command queue.
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
