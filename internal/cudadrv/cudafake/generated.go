// Fakes of generated PTX entries: a kernel's Go body run over the
// launch's device memory, with the parameters read as generated PTX takes
// them.

package cudafake

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unsafe"

	"github.com/goffload/offload/internal/cudadrv"
	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
)

// SetGenerated makes the entry of every registered kernel that has
// generated PTX (offload.Kernel.GeneratedPTX) run the kernel's Go body, as
// the PTX would: it reads the kernel's parameters as the cuda kind packs
// them, then the hidden ones (each slice's length, which must be the
// slice's, the device number and the fault record), and runs the body
// over the launch's device memory. A failed Go check (an index out of
// range, a division by zero) writes the fault record as the generated
// code does, naming the check's site, and the launch ends normally.
// Kernels whose code uses declare target variables are not faked.
// It returns the entries it set.
func (d *Driver) SetGenerated() []string {
	var set []string
	for _, name := range entries.KernelNames() {
		k, ok := entries.LookupKernel(name)
		if !ok {
			continue
		}
		code, ok := k.Code("ptx")
		if !ok || !code.Generated || len(code.Globals) > 0 {
			continue
		}
		d.SetKernel(code.Entry, func(l *Launch) error { return runGenerated(l, k, code) })
		set = append(set, code.Entry)
	}
	return set
}

// runGenerated runs kernel k, whose generated PTX is code, for launch l.
func runGenerated(l *Launch, k plugin.Kernel, code plugin.DeviceCode) error {
	ps := k.Params()
	slices := 0
	for _, p := range ps {
		if p.Kind == plugin.Slice {
			slices++
		}
	}
	if want := len(ps) + slices + 2; len(l.Params) != want {
		return fmt.Errorf("%s: %d parameters, want %d", l.Entry, len(l.Params), want)
	}
	args := make([]plugin.Arg, len(ps))
	li := len(ps)
	for i, p := range ps {
		if p.Kind == plugin.Slice {
			args[i] = plugin.Arg{Ptr: plugin.Ptr(l.Ptr(i)), Len: int(l.Int64(li))}
			li++
			continue
		}
		if len(l.Params[i]) != int(p.Type.Size()) {
			return fmt.Errorf("%s: parameter %d has %d bytes, the Go parameter %d", l.Entry, i, len(l.Params[i]), p.Type.Size())
		}
		v := reflect.New(p.Type)
		copy(unsafe.Slice((*byte)(v.UnsafePointer()), p.Type.Size()), l.Params[i])
		args[i].Scalar = v.Elem().Interface()
	}
	dev, fault := l.Int64(li), l.Ptr(li+1)
	rec, err := l.Mem(fault, 32)
	if err != nil {
		return fmt.Errorf("%s: the fault record: %w", l.Entry, err)
	}
	pool := plugin.NewPool(1)
	defer pool.Close()
	mem := func(p plugin.Ptr, size int64) ([]byte, error) { return l.Mem(cudadrv.DevPtr(p), size) }
	err = k.Launch(plugin.NewKernelCtx(int(dev), pool), args, mem)
	var kp *plugin.KernelPanic
	if !errors.As(err, &kp) {
		return err
	}
	if word(rec, 0) != 0 {
		return nil // an earlier check failed: the first wins
	}
	what, a, b := "panic", int64(0), int64(0)
	switch v := kp.Value; {
	case strings.Contains(v, "index out of range"):
		what = "index"
		fmt.Sscanf(v[strings.Index(v, "["):], "[%d] with length %d", &a, &b)
	case strings.Contains(v, "integer divide by zero"):
		what = "divide"
	case strings.Contains(v, "negative shift amount"):
		what = "shift"
	}
	site := 0
	for i, s := range code.Sites {
		if s == kp.At+": "+what {
			site = i + 1
			break
		}
	}
	if site == 0 {
		return fmt.Errorf("%s: the Go body failed at %s (%s), which is no check of its generated code", l.Entry, kp.At, kp.Value)
	}
	flags := int64(0)
	if kp.Chunk {
		flags = 1
	}
	for i, w := range []int64{int64(site), a, b, flags} {
		for j := range 8 {
			rec[8*i+j] = byte(uint64(w) >> (8 * j))
		}
	}
	return nil
}

func word(b []byte, i int) uint64 {
	var v uint64
	for j := 7; j >= 0; j-- {
		v = v<<8 | uint64(b[8*i+j])
	}
	return v
}
