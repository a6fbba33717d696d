package opencl

import (
	"fmt"
	"time"

	"github.com/goffload/offload/plugin"
)

// workSize is a launch's NDRange: from geo where it sets the teams or
// threads (thread_limit is the work-group, num_teams×thread_limit the
// global size), else one work-item per element of the longest slice
// argument, in work-groups of the driver's choice. A work-group beyond
// the device's or the kernel's limits is an error naming the kernel.
func (d *device) workSize(k plugin.Kernel, kf *kernelFn, args []plugin.Arg, geo plugin.Geometry) (dims int, global [3]uintptr, local *[3]uintptr, err error) {
	if geo.IsZero() {
		n := 1
		for i, p := range k.Params() {
			if p.Kind == plugin.Slice && i < len(args) {
				n = max(n, args[i].Len)
			}
		}
		return 1, [3]uintptr{uintptr(n), 1, 1}, nil, nil
	}
	block := geo.Threads
	if block == ([3]int{}) {
		block = [3]int{min(256, d.maxWG), 1, 1}
		if kf.wg > 0 {
			block[0] = min(block[0], kf.wg)
		}
	}
	teams := geo.Teams
	if teams == ([3]int{}) {
		n := 1
		for i, p := range k.Params() {
			if p.Kind == plugin.Slice && i < len(args) {
				n = max(n, args[i].Len)
			}
		}
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
	if kf.wg > 0 {
		limit = min(limit, kf.wg)
	}
	if threads > limit {
		return 0, global, nil, fmt.Errorf("%w: kernel %q: thread_limit(%d,%d,%d) is %d work-items per work-group, more than the %d this kernel takes on this OpenCL device", plugin.ErrBadKernel, k.Name(), block[0], block[1], block[2], threads, limit)
	}
	return max(dims, 1), global, &l, nil
}

// emulate runs o's kernel's Go body on the host over copies of the
// allocations its slice arguments lie in, once the command queue is done
// (the emulate mode, for tests). Only the arguments' own bytes are copied
// in, and only those of the arguments it may write are copied back: the
// rest of their allocations may be another task's meanwhile (depend
// clauses order tasks by the sections they name, and a task on one half of
// a buffer runs beside a copy into the other).
func (q *queue) emulate(o *op) error {
	d := q.d
	if err := d.lib.Finish(q.cq); err != nil {
		return fmt.Errorf("%s: kernel %q: %w", d.label(), o.k.Name(), d.lose(err))
	}
	q.p.drain(q, ^uint64(0), true)
	type hostCopy struct {
		a *allocation
		b []byte
	}
	var copies []*hostCopy
	params := o.k.Params()
	// section is slice argument i's bytes, or false if it has none.
	section := func(i int) (plugin.Ptr, int64, bool) {
		n := int64(o.args[i].Len) * int64(params[i].Type.Size())
		return o.args[i].Ptr, n, n > 0
	}
	for i, p := range params {
		if p.Kind != plugin.Slice {
			continue
		}
		a, _, err := d.mem.find(o.args[i].Ptr, 0)
		if err != nil {
			continue // an empty slice with no address
		}
		var c *hostCopy
		for _, h := range copies {
			if h.a == a {
				c = h
			}
		}
		if c == nil {
			c = &hostCopy{a: a, b: make([]byte, max(a.size, 1))}
			copies = append(copies, c)
		}
		ptr, n, ok := section(i)
		if !ok {
			continue
		}
		r, err := d.rangeOf(ptr, n)
		if err != nil {
			return fmt.Errorf("%s: kernel %q: argument %d: %w", d.label(), o.k.Name(), i, err)
		}
		off := uint64(ptr - a.base)
		if err := d.read(q.cq, c.b[off:off+uint64(n)], r, true, nil); err != nil {
			return fmt.Errorf("%s: kernel %q: %w", d.label(), o.k.Name(), d.wrap(err))
		}
	}
	mem := func(p plugin.Ptr, size int64) ([]byte, error) {
		for _, c := range copies {
			off := uint64(p - c.a.base)
			if p >= c.a.base && off <= uint64(c.a.size) && size >= 0 && uint64(size) <= uint64(c.a.size)-off {
				return c.b[off : off+uint64(size) : len(c.b)], nil
			}
		}
		return nil, fmt.Errorf("%w: [%#x, +%d bytes) is not inside a live allocation", plugin.ErrBadPointer, uint64(p), size)
	}
	d.mu.RLock()
	kctx := d.kctx
	d.mu.RUnlock()
	start := time.Now()
	err := o.k.Launch(kctx, o.args, mem)
	q.hostTimed(o, plugin.OpLaunch, o.k.Name(), start, time.Now(), err)
	if err != nil {
		return fmt.Errorf("%s: %w", d.label(), err)
	}
	for i, p := range params {
		ptr, n, ok := section(i)
		if p.Kind != plugin.Slice || p.ReadOnly() || !ok {
			continue
		}
		b, err := mem(ptr, n)
		if err != nil {
			continue // not in an allocation: the launch refused it already
		}
		r, err := d.rangeOf(ptr, n)
		if err != nil {
			return fmt.Errorf("%s: kernel %q: argument %d: %w", d.label(), o.k.Name(), i, err)
		}
		if err := d.write(q.cq, r, b, true, nil); err != nil {
			return fmt.Errorf("%s: kernel %q: %w", d.label(), o.k.Name(), d.wrap(err))
		}
	}
	return nil
}
