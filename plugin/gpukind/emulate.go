package gpukind

import (
	"fmt"
	"time"

	"github.com/goffload/offload/plugin"
)

// EmulatedMemory is what Emulate asks of a device's memory. The kind promises
// that Read and Write are done when they return. It promises that their
// errors are in the plugin contract's terms.
type EmulatedMemory interface {
	// Allocation returns the base and size of the live allocation that p lies
	// in. It returns false if there is none.
	Allocation(p plugin.Ptr) (base plugin.Ptr, size int64, ok bool)
	// Read copies len(dst) bytes of device memory at src to dst.
	Read(dst []byte, src plugin.Ptr) error
	// Write copies src to device memory at dst.
	Write(dst plugin.Ptr, src []byte) error
}

// Emulate runs k's Go body on the host with kctx, for a kind's emulate mode.
// It runs it over copies of the allocations its slice arguments lie in. The
// mode is for tests that run kernels written in Go only on a driver's memory,
// queues and events. The caller has waited for the queue's work before the
// launch.
//
// Only the arguments' own bytes are copied in. Only those of the arguments it
// may write are copied back. The rest of their allocations may be another
// task's meanwhile: depend clauses order tasks by the sections they name.
// timed, if not nil, gets the body's times on the host's clock and its error.
// The errors name the kernel, not the device.
func Emulate(k plugin.Kernel, args []plugin.Arg, kctx *plugin.KernelCtx, m EmulatedMemory, timed func(start, end time.Time, err error)) error {
	type hostCopy struct {
		base plugin.Ptr
		size int64
		b    []byte
	}
	var copies []*hostCopy
	params := k.Params()
	// section is slice argument i's bytes, or false if it has none.
	section := func(i int) (plugin.Ptr, int64, bool) {
		n := int64(args[i].Len) * int64(params[i].Type.Size())
		return args[i].Ptr, n, n > 0
	}
	for i, p := range params {
		if p.Kind != plugin.Slice {
			continue
		}
		base, size, ok := m.Allocation(args[i].Ptr)
		if !ok {
			continue // an empty slice with no address
		}
		var c *hostCopy
		for _, h := range copies {
			if h.base == base {
				c = h
			}
		}
		if c == nil {
			c = &hostCopy{base: base, size: size, b: make([]byte, max(size, 1))}
			copies = append(copies, c)
		}
		ptr, n, ok := section(i)
		if !ok {
			continue
		}
		off := uint64(ptr - base)
		if off > uint64(size) || uint64(n) > uint64(size)-off {
			return fmt.Errorf("kernel %q: %w: argument %d, [%#x, +%d bytes), runs past its allocation", k.Name(), plugin.ErrBadPointer, i, uint64(ptr), n)
		}
		if err := m.Read(c.b[off:off+uint64(n)], ptr); err != nil {
			return fmt.Errorf("kernel %q: argument %d: %w", k.Name(), i, err)
		}
	}
	mem := func(p plugin.Ptr, size int64) ([]byte, error) {
		for _, c := range copies {
			off := uint64(p - c.base)
			if p >= c.base && off <= uint64(c.size) && size >= 0 && uint64(size) <= uint64(c.size)-off {
				return c.b[off : off+uint64(size) : len(c.b)], nil
			}
		}
		return nil, fmt.Errorf("%w: [%#x, +%d bytes) is not inside a live allocation", plugin.ErrBadPointer, uint64(p), size)
	}
	start := time.Now()
	err := k.Launch(kctx, args, mem)
	if timed != nil {
		timed(start, time.Now(), err)
	}
	if err != nil {
		return err
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
		if err := m.Write(ptr, b); err != nil {
			return fmt.Errorf("kernel %q: argument %d: %w", k.Name(), i, err)
		}
	}
	return nil
}
