package core

import (
	"bytes"
	"fmt"

	"github.com/goffload/offload/internal/config"
	"github.com/goffload/offload/internal/mapping"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
)

// GOFFLOAD_CHECK=maps: a checking mode for the mistakes that give no error
// (as CUDA's compute-sanitizer and Go's -race are). Before a kernel runs,
// the fresh device memory of its Out and Scratch buffers is filled with a
// pattern (checkByte); after it, an In buffer whose device copy changed
// and an Out element that still holds the pattern are reported on the info
// output, naming the kernel, the parameter and the first index. A buffer
// that was present already (a data region's) is not filled: its contents
// are the region's. It costs a copy of each buffer checked, each way.

// InfoCheck is the info output of GOFFLOAD_CHECK=maps (not a
// LIBOMPTARGET_INFO bit).
const InfoCheck config.InfoFlags = 0x10000

// checkByte fills Out and Scratch buffers: 0xA5A5A5A5 is an unlikely
// int32, and a float64 of 0xA5… bytes an unlikely value.
const checkByte = 0xA5

// repeatHint is how many copies of the same host range to the same device
// make the info output suggest a data region.
const repeatHint = 8

// repeatRanges bounds the ranges a device counts copies of: past it, the
// one copied least recently is forgotten.
const repeatRanges = 64

// copyRepeats counts a device's copies in by host range (address and
// size), for the data-region hint. The hint is about any range copied
// again and again, whatever is copied between (axpy's x and y alternate).
// It counts the repeatRanges ranges copied most recently.
type copyRepeats struct {
	ranges map[copyRange]*copyCount
	clock  uint64
}

type copyRange struct {
	addr uintptr
	size int64
}

type copyCount struct {
	n      int
	last   uint64 // clock of the last copy
	hinted bool
}

// count counts a copy of r and reports whether it is the one that makes
// the hint.
func (c *copyRepeats) count(r copyRange) bool {
	c.clock++
	e := c.ranges[r]
	if e == nil {
		if c.ranges == nil {
			c.ranges = map[copyRange]*copyCount{}
		}
		if len(c.ranges) >= repeatRanges {
			var old copyRange
			oldest := c.clock
			for k, v := range c.ranges {
				if v.last < oldest {
					old, oldest = k, v.last
				}
			}
			delete(c.ranges, old)
		}
		e = &copyCount{}
		c.ranges[r] = e
	}
	e.n++
	e.last = c.clock
	hint := e.n == repeatHint && !e.hinted
	e.hinted = e.hinted || hint
	return hint
}

// noteCopyIn counts a copy of buf to d and, the repeatHint-th time for its
// host range, suggests a data region (under the copies info flag, and in
// the checking mode).
func (d *Device) noteCopyIn(task uint64, buf mapping.Buf) {
	d.qmu.Lock()
	hint := d.repeats.count(copyRange{buf.Addr(), buf.Size})
	d.qmu.Unlock()
	if hint {
		d.log.Taskf(config.InfoCopies|InfoCheck, d.Num, task, "hint: %s (HstPtr=%#x, Size=%d) was copied to %s %d times: map it once, with a data region (Device.Data, EnterData/ExitData) around the constructs that use it, and they find it present",
			nameOf(buf.Name), buf.Addr(), buf.Size, d.Label(), repeatHint)
	}
}

// argCheck is one buffer argument checked around a kernel.
type argCheck struct {
	param  int
	name   string
	out    bool   // an Out buffer filled with the pattern; else an In buffer
	elem   int    // bytes per element
	before []byte // In: the device copy before the kernel
	after  []byte // what the device holds after it
}

// checkBefore fills the fresh Out and Scratch buffers of a launch with the
// pattern and copies its In buffers back, on w's queue before the launch;
// fresh says which arguments' mappings the construct made.
func (d *Device) checkBefore(w *work, k *entries.Kernel, args []KernelArg, pargs []plugin.Arg, fresh []bool) []*argCheck {
	var cs []*argCheck
	for i, a := range args {
		p := k.Params()[i]
		if p.Kind != plugin.Slice || a.DevPtr || pargs[i].Len == 0 {
			continue
		}
		size := int64(pargs[i].Len) * int64(p.Type.Size())
		t := a.Map.Type
		c := &argCheck{param: i, name: a.Map.Buf.Name, elem: int(p.Type.Size()), after: make([]byte, size)}
		switch {
		case t&mapping.MapTo == 0 && fresh[i] && uint64(pargs[i].Ptr) != uint64(a.Map.Buf.Addr()): // Out (from) or Scratch (alloc): fresh memory, not the program's buffer itself (a HostSharer's)
			if err := w.q.Submit(pargs[i].Ptr, bytes.Repeat([]byte{checkByte}, int(size))); err != nil {
				continue
			}
			if t&mapping.MapFrom == 0 {
				continue // Scratch: filled, not reported
			}
			c.out = true
		case t&mapping.MapTo != 0 && t&mapping.MapFrom == 0: // In
			c.before = make([]byte, size)
			if w.q.Retrieve(c.before, pargs[i].Ptr) != nil {
				continue
			}
		default:
			continue
		}
		cs = append(cs, c)
	}
	return cs
}

// checkAfter copies the checked buffers back after the launch, and reports
// once the queue is done.
func (d *Device) checkAfter(w *work, k *entries.Kernel, pargs []plugin.Arg, cs []*argCheck) {
	if len(cs) == 0 {
		return
	}
	for _, c := range cs {
		w.q.Retrieve(c.after, pargs[c.param].Ptr)
	}
	task := w.task
	w.after = append(w.after, func() error {
		for _, c := range cs {
			d.reportCheck(task, k, c)
		}
		return nil
	})
}

// reportCheck says what c found, if anything.
func (d *Device) reportCheck(task uint64, k *entries.Kernel, c *argCheck) {
	n := len(c.after) / c.elem
	first, count := -1, 0
	for e := range n {
		el := c.after[e*c.elem : (e+1)*c.elem]
		var bad bool
		if c.out {
			bad = allBytes(el, checkByte)
		} else {
			bad = !bytes.Equal(el, c.before[e*c.elem:(e+1)*c.elem])
		}
		if bad {
			count++
			if first < 0 {
				first = e
			}
		}
	}
	if count == 0 {
		return
	}
	param := fmt.Sprintf("parameter %d (%s)", c.param, nameOf(c.name))
	if c.out {
		d.log.Taskf(InfoCheck, d.Num, task, "check: kernel %s, %s, Out: %d of %d elements not written, the first at index %d: they hold the fill pattern (0x%X bytes); the host gets what device memory held there (another buffer's old data, without the check)",
			k.Name(), param, count, n, first, checkByte)
	} else {
		d.log.Taskf(InfoCheck, d.Num, task, "check: kernel %s, %s, In: %d of %d elements changed, the first at index %d: the kernel wrote into an In buffer (on the initial device that changes the host copy, on other devices it does not: the result depends on where it runs)",
			k.Name(), param, count, n, first)
	}
}

func allBytes(b []byte, v byte) bool {
	for _, x := range b {
		if x != v {
			return false
		}
	}
	return len(b) > 0
}

// checkInitial is checkBefore and checkAfter for a kernel on the initial
// device, whose arguments are host memory: it fills Out slices with the
// pattern, snapshots In slices, and after the kernel reports, then puts
// back what the kernel did not write into an Out slice (the host's data,
// as without the check). It returns what to call after the kernel.
func (d *Device) checkInitial(task uint64, k *entries.Kernel, args []KernelArg) func() {
	type slot struct {
		c    *argCheck
		host []byte
		keep []byte // Out: the host's data before the fill
	}
	var slots []slot
	for i, a := range args {
		p := k.Params()[i]
		if p.Kind != plugin.Slice || a.DevPtr || a.Map.Buf.Size == 0 {
			continue
		}
		host := a.Map.Buf.Bytes()
		t := a.Map.Type
		c := &argCheck{param: i, name: a.Map.Buf.Name, elem: int(p.Type.Size())}
		switch {
		case t&mapping.MapFrom != 0 && t&mapping.MapTo == 0:
			c.out = true
			keep := append([]byte(nil), host...)
			for j := range host {
				host[j] = checkByte
			}
			slots = append(slots, slot{c, host, keep})
		case t&mapping.MapTo != 0 && t&mapping.MapFrom == 0:
			c.before = append([]byte(nil), host...)
			slots = append(slots, slot{c: c, host: host})
		}
	}
	return func() {
		for _, s := range slots {
			s.c.after = s.host
			d.reportCheck(task, k, s.c)
			if s.c.out { // what the kernel did not write is the host's again
				for e := 0; e+s.c.elem <= len(s.host); e += s.c.elem {
					if allBytes(s.host[e:e+s.c.elem], checkByte) {
						copy(s.host[e:e+s.c.elem], s.keep[e:e+s.c.elem])
					}
				}
			}
		}
	}
}
