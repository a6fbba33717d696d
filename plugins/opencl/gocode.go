package opencl

import (
	"fmt"
	"unsafe"

	"github.com/goffload/offload/internal/cldrv"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/gpukind"
)

// Generated code is OpenCL C that cmd/goffload-gen made from a kernel's Go
// body (plugin.DeviceCode.Generated). gpukind.GenCode says what its entry
// takes. For code with checks, the kind reads the fault record when the
// launch is done. Such a launch is synchronous on its queue's issuing
// goroutine. That goroutine waits for the kernel to read the record.

// genBuildOptions are added to the build options of generated code. Go's
// float32 division is correctly rounded.
const genBuildOptions = " -cl-fp32-correctly-rounded-divide-sqrt"

// faultWords is the size of the fault record in longs.
const faultWords = gpukind.FaultWords

// hiddenParams is how many parameters the entry of k's code takes after the
// kernel's own. It is 0 for hand-written code.
func hiddenParams(k plugin.Kernel, kf *kernelFn) int {
	if kf.gen == nil {
		return 0
	}
	return kf.gen.Hidden(k)
}

// faultBuffer returns q's fault record, made and zeroed on first use.
func (q *queue) faultBuffer() (cldrv.Mem, error) {
	if q.fault != 0 {
		return q.fault, nil
	}
	d := q.d
	m, err := d.lib.CreateBuffer(d.ctx, 8*faultWords)
	if err != nil {
		return 0, err
	}
	zero := make([]byte, 8*faultWords)
	if err := d.lib.WriteBuffer(q.cq, m, true, 0, int64(len(zero)), unsafe.Pointer(&zero[0]), nil, nil); err != nil {
		d.lib.ReleaseMem(m)
		return 0, err
	}
	q.fault = m
	return m, nil
}

// setHidden sets the parameters of generated code after the kernel's. They
// are the slice lengths, the declare target variables (gvals, glens), the
// device number and q's fault record. Under kf.mu.
func (q *queue) setHidden(kf *kernelFn, first int, lens []int64, gvals []argVal, glens []int64) error {
	d := q.d
	for j, n := range lens {
		if err := d.lib.SetKernelArg(kf.k, first+j, unsafe.Sizeof(n), unsafe.Pointer(&n)); err != nil {
			return fmt.Errorf("argument %d (the length of slice %d): %w", first+j, j, err)
		}
	}
	first += len(lens)
	for j, v := range gvals {
		if err := d.setArg(kf, first, v); err != nil {
			return fmt.Errorf("argument %d (declare target %s): %w", first, kf.gen.Globals[j].Describe(), err)
		}
		if err := d.lib.SetKernelArg(kf.k, first+1, unsafe.Sizeof(glens[j]), unsafe.Pointer(&glens[j])); err != nil {
			return fmt.Errorf("argument %d (the length of declare target %s): %w", first+1, kf.gen.Globals[j].Describe(), err)
		}
		first += 2
	}
	dev := int64(kf.gen.Dev)
	if err := d.lib.SetKernelArg(kf.k, first, unsafe.Sizeof(dev), unsafe.Pointer(&dev)); err != nil {
		return fmt.Errorf("argument %d (the device number): %w", first, err)
	}
	m, err := q.faultBuffer()
	if err != nil {
		return fmt.Errorf("the fault record: %w", err)
	}
	if err := d.lib.SetKernelArg(kf.k, first+1, unsafe.Sizeof(m), unsafe.Pointer(&m)); err != nil {
		return fmt.Errorf("argument %d (the fault record): %w", first+1, err)
	}
	return nil
}

// checkFault waits for the launch of o and reads q's fault record. Where a
// check failed, it zeroes it and returns the kernel's panic. That is the Go
// file and line of the check, and the value Go's panic would have had.
func (q *queue) checkFault(o *op) error {
	d := q.d
	rec := make([]byte, 8*faultWords)
	if err := d.lib.ReadBuffer(q.cq, q.fault, true, 0, int64(len(rec)), unsafe.Pointer(&rec[0]), nil, nil); err != nil {
		return fmt.Errorf("%s: kernel %q: reading its fault record: %w", d.label(), o.k.Name(), d.lose(err))
	}
	kp := o.kf.gen.Fault(o.k, rec)
	if kp == nil {
		return nil
	}
	clear(rec)
	if err := d.lib.WriteBuffer(q.cq, q.fault, true, 0, int64(len(rec)), unsafe.Pointer(&rec[0]), nil, nil); err != nil {
		return fmt.Errorf("%s: kernel %q: zeroing its fault record: %w", d.label(), o.k.Name(), d.lose(err))
	}
	return fmt.Errorf("%s: %w", d.label(), kp)
}

// Declare target variables in generated code: the device keeps the binds it
// is given (gpukind.Globals). It passes each variable's device copy and
// length to the code that uses it.

// globalArgs are the arguments of kf's declare target variables on d, and
// their lengths. Else it is an error naming the variable that has no copy
// there.
func (d *device) globalArgs(k plugin.Kernel, kf *kernelFn) ([]argVal, []int64, error) {
	var vals []argVal
	var lens []int64
	for _, g := range kf.gen.Globals {
		b, err := d.globals.Lookup(k, g)
		if err != nil {
			return nil, nil, err
		}
		al, off, err := d.mem.find(b.Ptr, b.Size)
		if err != nil {
			return nil, nil, fmt.Errorf("kernel %q: declare target %s at %#x: %w", k.Name(), g.Describe(), uint64(b.Ptr), err)
		}
		v := argVal{ptr: true}
		if al.buf == 0 {
			v.svm = uintptr(b.Ptr)
		} else if v.buf, err = d.mem.argBuffer(d, al, off); err != nil {
			return nil, nil, fmt.Errorf("%w: kernel %q: declare target %s: %w", plugin.ErrBadKernel, k.Name(), g.Describe(), err)
		}
		vals = append(vals, v)
		lens = append(lens, int64(g.Len))
	}
	return vals, lens, nil
}
