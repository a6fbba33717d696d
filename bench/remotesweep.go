package main

import (
	"bytes"
	"fmt"
	"slices"
	"time"

	"github.com/goffload/offload"
	"github.com/goffload/offload/plugins/remote/transport"
)

// The transfers of suites remote and remote-socket (remote.go): the sweep of
// synchronous copies against the same bytes raw, and the largest copies
// against a Go copy.

// sweepSizes are the message sizes of the submit_* and retrieve_* lines: 8
// bytes, then powers of 4 from 64 bytes to 64 MiB.
var sweepSizes = func() []int64 {
	sizes := []int64{8}
	for n := int64(64); n <= size64MiB; n *= 4 {
		sizes = append(sizes, n)
	}
	return sizes
}()

// sweepShare: each point of the sweep measures for -time/sweepShare (its
// goffload and raw rounds alternating, each for that long), so that the
// sweep's 2×len(sweepSizes) points together last about six times -time;
// each of the suite's other figures lasts twice -time.
const sweepShare = 8

// sizeName writes a byte count as the metrics name it: 8B, 4KiB, 64MiB.
func sizeName(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

// memcpyTo returns what copies the first size bytes of src to device
// memory d, synchronously, n times (omp_target_memcpy host→device).
func memcpyTo(d offload.DevicePtr, src []byte) func(size int64) func(n int) error {
	return func(size int64) func(n int) error {
		return func(n int) error {
			for range n {
				if err := offload.Memcpy(d, offload.HostPtr(src[:size]), size); err != nil {
					return err
				}
			}
			return nil
		}
	}
}

// memcpyFrom returns what copies size bytes of device memory d into dst,
// synchronously, n times (omp_target_memcpy device→host), and checks both
// ends of what came against src's, which were copied there.
func memcpyFrom(dst []byte, d offload.DevicePtr, src []byte, metric string) func(size int64) func(n int) error {
	return func(size int64) func(n int) error {
		return func(n int) error {
			for range n {
				// Poison both ends: the copy must write them again.
				dst[0], dst[size-1] = ^src[0], ^src[size-1]
				if err := offload.Memcpy(offload.HostPtr(dst[:size]), d, size); err != nil {
					return err
				}
				if dst[0] != src[0] || dst[size-1] != src[size-1] {
					return fmt.Errorf("%s%s: the copy from the device differs from what was copied there", metric, sizeName(size))
				}
			}
			return nil
		}
	}
}

// remoteSweep: omp_target_memcpy of each of sweepSizes, synchronous, from
// host memory to device memory allocated beforehand (submit_SIZE) and back
// (retrieve_SIZE), against the same bytes sent raw over r's spinning link
// (a shared-memory ring pair, or the socket) to an xfer peer whose reads,
// like ours, wait as the transport's do (transport.SpinBudget): a message
// written and a one-byte answer, or a one-byte request and a message read.
// Each point measures for -time/sweepShare.
func remoteSweep(env *Env, dev offload.Device, r remoteRun) error {
	largest := slices.Max(sweepSizes)
	src := fill(make([]byte, largest))
	dst := make([]byte, largest)
	d, err := dev.Alloc(largest)
	if err != nil {
		return err
	}
	defer offload.Free(d)
	defer func(b time.Duration) { env.Budget = b }(env.Budget)
	env.Budget = max(env.Budget/sweepShare, 1)
	env.Comment("%[1]ssubmit_SIZE, %[1]sretrieve_SIZE: synchronous omp_target_memcpy host→device and device→host vs the same bytes over %[2]s to a raw peer, reads polling %[3]v as the transport's; each point measured for -time/%[4]d", r.prefix, r.over(), transport.SpinBudget(), sweepShare)
	submit := memcpyTo(d, src)
	retrieve := memcpyFrom(dst, d, src, r.prefix+"retrieve_")
	return r.spinPeer(env, "xfer", int(largest), func(p *peer) error {
		// Warm up: the device's memory, our buffers and the peer's are
		// faulted in, the socket buffers sized.
		for _, f := range []func(int) error{submit(largest), retrieve(largest), func(n int) error { return p.send(src, n) }, func(n int) error { return p.fetch(dst, src, n) }} {
			if err := f(1); err != nil {
				return err
			}
		}
		for _, size := range sweepSizes {
			name := r.prefix + "submit_" + sizeName(size)
			raw := func(n int) error { return p.send(src[:size], n) }
			t, b, err := env.Compare(submit(size), raw)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if err := checkOnDevice(d, src[:size]); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			env.Report(Result{Metric: name, Goffload: t, Baseline: b, Bytes: size,
				Note: fmt.Sprintf("host→device: %s vs %s", gbps(size, t), gbps(size, b))})
		}
		for _, size := range sweepSizes {
			name := r.prefix + "retrieve_" + sizeName(size)
			raw := func(n int) error { return p.fetch(dst[:size], src[:size], n) }
			t, b, err := env.Compare(retrieve(size), raw)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			env.Report(Result{Metric: name, Goffload: t, Baseline: b, Bytes: size,
				Note: fmt.Sprintf("device→host: %s vs %s", gbps(size, t), gbps(size, b))})
		}
		return nil
	})
}

// checkOnDevice checks that the data is really on the device: it reads
// back the end of want from device memory d.
func checkOnDevice(d offload.DevicePtr, want []byte) error {
	size := int64(len(want))
	probe := min(4096, size)
	back := make([]byte, probe)
	if err := offload.Memcpy(offload.HostPtr(back), d.Offset(size-probe), probe); err != nil {
		return err
	}
	if !bytes.Equal(back, want[size-probe:]) {
		return fmt.Errorf("device memory at offset %d differs from what was copied there", size-probe)
	}
	return nil
}

// remoteVsCopy: the sweep's largest copies, 64 MiB synchronous each way
// (submit_64MiB_vs_copy, retrieve_64MiB_vs_copy), against one Go copy of
// the same 64 MiB in this process into fresh memory: a new slice each
// time, whose allocation (and the zeroing or page faults it brings) counts
// in the baseline. Issue 21's goal: a device process's copies at 0.8× the
// speed of a copy, or better.
func remoteVsCopy(env *Env, dev offload.Device, r remoteRun) error {
	const size = size64MiB
	src := fill(make([]byte, size))
	dst := make([]byte, size)
	d, err := dev.Alloc(size)
	if err != nil {
		return err
	}
	defer offload.Free(d)
	copyFresh := func(n int) error {
		for range n {
			b := make([]byte, len(src))
			copy(b, src)
			if b[0] != src[0] || b[size-1] != src[size-1] {
				return fmt.Errorf("copy: the fresh slice differs from its source")
			}
		}
		return nil
	}
	for _, c := range []struct {
		name, dir string
		f         func(n int) error
	}{
		{"submit_64MiB_vs_copy", "host→device", memcpyTo(d, src)(size)},
		{"retrieve_64MiB_vs_copy", "device→host", memcpyFrom(dst, d, src, r.prefix+"retrieve_")(size)},
	} {
		name := r.prefix + c.name
		if err := c.f(1); err != nil { // warm up
			return fmt.Errorf("%s: %w", name, err)
		}
		t, b, err := env.Compare(c.f, copyFresh)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if c.dir == "host→device" {
			if err := checkOnDevice(d, src); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		env.Report(Result{Metric: name, Goffload: t, Baseline: b,
			Note: fmt.Sprintf("%s 64 MiB, synchronous, vs a Go copy into a new 64 MiB slice: %s vs %s (goal ≤ 1.25)", c.dir, gbps(size, t), gbps(size, b))})
	}
	return nil
}
