package cuda

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/goffload/offload/internal/cudadrv"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/gpukind"
)

// Generated PTX is what clang made of the OpenCL C that cmd/goffload-gen
// generated from a kernel's Go body (plugin.DeviceCode.Generated). Its entry
// takes the parameters the OpenCL C entry takes (gpukind.GenCode). After the
// kernel's come 64-bit hidden ones, which pack lays out after them. For code
// with checks, the issuing goroutine reads the queue's fault record once the
// launch is done. It reads it with a synchronous copy on the stream. So a
// failed check fails the launch as the Go body's panic would.

// faultRecord is a queue's fault record in device memory, made and
// zeroed on first use.
type faultRecord struct {
	mu  sync.Mutex
	ptr cudadrv.DevPtr
}

// get returns the record's address on d.
func (f *faultRecord) get(d *device) (cudadrv.DevPtr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ptr != 0 {
		return f.ptr, nil
	}
	zero := make([]byte, 8*gpukind.FaultWords)
	err := d.with(func() error {
		p, err := d.drv.MemAlloc(int64(len(zero)))
		if err != nil {
			return err
		}
		if err := d.drv.MemcpyHtoD(p, unsafe.Pointer(&zero[0]), int64(len(zero))); err != nil {
			d.drv.MemFree(p)
			return err
		}
		f.ptr = p
		return nil
	})
	if err != nil {
		return 0, d.wrap(err)
	}
	return f.ptr, nil
}

// free frees the record, if d has one and is alive.
func (f *faultRecord) free(d *device) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ptr != 0 && d.alive() == nil {
		d.with(func() error { return d.drv.MemFree(f.ptr) })
	}
	f.ptr = 0
}

// hidden returns the hidden parameters of a launch of k's generated code gen
// with args. They are the slice lengths, each declare target variable's
// device copy and length, the device number and q's fault record.
func (q *queue) hidden(k plugin.Kernel, gen *gpukind.GenCode, args []plugin.Arg) ([]uint64, error) {
	d := q.d
	var vals []uint64
	for _, n := range gpukind.SliceLens(k, args) {
		vals = append(vals, uint64(n))
	}
	for _, g := range gen.Globals {
		b, err := d.globals.Lookup(k, g)
		if err != nil {
			return nil, err
		}
		if err := d.mem.Check(b.Ptr, b.Size); err != nil {
			return nil, fmt.Errorf("kernel %q: declare target %s at %#x: %w", k.Name(), g.Describe(), uint64(b.Ptr), err)
		}
		vals = append(vals, uint64(b.Ptr), uint64(g.Len))
	}
	f, err := q.fault.get(d)
	if err != nil {
		return nil, fmt.Errorf("kernel %q: its fault record: %w", k.Name(), err)
	}
	return append(vals, uint64(gen.Dev), uint64(f)), nil
}

// checkFault waits for the launch of o and reads q's fault record. Where a
// check failed, it zeroes it and returns the kernel's panic. It runs on the
// issuing goroutine.
func (q *queue) checkFault(o *op) error {
	d := q.d
	rec := make([]byte, 8*gpukind.FaultWords)
	p := plugin.Ptr(q.fault.ptr) // made before o was enqueued
	if err := q.retrieve(rec, p, nil); err != nil {
		return fmt.Errorf("%s: kernel %q: reading its fault record: %w", d.label(), o.k.Name(), d.wrap(err))
	}
	kp := o.gen.Fault(o.k, rec)
	if kp == nil {
		return nil
	}
	clear(rec)
	if err := q.submit(p, rec, nil); err != nil {
		return fmt.Errorf("%s: kernel %q: zeroing its fault record: %w", d.label(), o.k.Name(), d.wrap(err))
	}
	return fmt.Errorf("%s: %w", d.label(), kp)
}
