package opencl

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/goffload/offload/internal/cldrv"
)

// hostWrites keeps the plugin contract's order of host memory on some
// drivers. They read a non-blocking write's host memory when it is enqueued,
// not when the queue reaches it. (NVIDIA's OpenCL copies small writes into a
// staging buffer at once.) A Submit must send what earlier commands wrote
// into the same host memory. Those are a Retrieve enqueued before it, or a
// Wait on another queue, whose Retrieves may write it.
//
// The issuing goroutine keeps the events of such commands: retrieves with
// their host range, and barriers for any range. Before it issues a submit
// whose host memory one of them may write, it waits on the host for the last
// such command. The queue is in order, so the commands before it are complete
// then. A submit that overlaps none is issued at once, so copies of unrelated
// memory still overlap.
type hostWrites struct {
	mu   sync.Mutex // the issuer adds and waits; Synchronize and Close clear
	list []hostWrite

	waiting func() // if not nil, called when a submit starts waiting (for tests)
}

// A hostWrite is a command that may write host memory: a retrieve into
// [lo, hi), or a barrier (any) waiting for another queue.
type hostWrite struct {
	lo, hi uintptr
	any    bool
	ev     cldrv.Event // retained
}

// maxHostWrites is how many commands the list holds before it drops the
// complete ones.
const maxHostWrites = 32

// add keeps the event of a command that may write host memory (host's, or any
// with host nil). Without a reference to the event (the driver refused one),
// it waits for the command at once. That keeps the order too.
func (w *hostWrites) add(d *device, host []byte, ev cldrv.Event) error {
	if ev == 0 {
		return nil
	}
	if err := d.lib.RetainEvent(ev); err != nil {
		return waitCommand(d, ev)
	}
	h := hostWrite{any: host == nil, ev: ev}
	if host != nil {
		h.lo = uintptr(unsafe.Pointer(unsafe.SliceData(host)))
		h.hi = h.lo + uintptr(len(host))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.list) >= maxHostWrites {
		w.dropComplete(d)
	}
	w.list = append(w.list, h)
	return nil
}

// before waits until the commands that may write host (a submit's source) are
// complete. An error is the driver's: the command failed, or the wait did.
func (w *hostWrites) before(d *device, host []byte) error {
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(host)))
	hi := lo + uintptr(len(host))
	w.mu.Lock()
	defer w.mu.Unlock()
	last := -1
	for i, h := range w.list {
		if h.any || (h.lo < hi && lo < h.hi) {
			last = i
		}
	}
	if last < 0 {
		return nil
	}
	if w.waiting != nil {
		w.waiting()
	}
	err := waitCommand(d, w.list[last].ev)
	w.release(d, last+1)
	return err
}

// waitCommand waits for the command of ev and reports whether it failed.
func waitCommand(d *device, ev cldrv.Event) error {
	if err := d.lib.WaitForEvents([]cldrv.Event{ev}); err != nil {
		return err
	}
	st, err := d.lib.EventStatus(ev)
	if err == nil && st < 0 {
		err = fmt.Errorf("a command before it failed: %s", cldrv.Status(st).Name())
	}
	return err
}

// dropComplete releases the commands up to the last complete one; those
// before it are complete too. Under w.mu.
func (w *hostWrites) dropComplete(d *device) {
	for i := len(w.list) - 1; i >= 0; i-- {
		if st, err := d.lib.EventStatus(w.list[i].ev); err == nil && st == cldrv.Complete {
			w.release(d, i+1)
			return
		}
	}
}

// release releases the first n commands' events; under w.mu.
func (w *hostWrites) release(d *device, n int) {
	for _, h := range w.list[:n] {
		d.lib.ReleaseEvent(h.ev)
	}
	m := copy(w.list, w.list[n:])
	clear(w.list[m:])
	w.list = w.list[:m]
}

// reset releases every command's event. The queue is done, or the device
// lost.
func (w *hostWrites) reset(d *device) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.release(d, len(w.list))
}
