package main

import (
	"bytes"
	"fmt"
	"slices"
	"time"

	"github.com/goffload/offload"
	"github.com/goffload/offload/plugins/remote"
)

// Suite remote: one local remote device (device 0), a process of this same
// executable connected by an inherited Unix socketpair, against the same
// traffic sent raw over the same kind of socket to a peer process (peer.go)
// that does nothing but read it and answer.
//
// With -devices tcp://HOST:PORT the device is a TCP device on another
// machine (or this one), and with -peer HOST:PORT the raw peers are a
// bench -serve-peer there, reached over the same network (peertcp.go);
// bench's doc comment has the commands.
//
// The raw.* lines are no goffload figures: they compare the raw ping-pong
// with both sides spinning briefly on the socket before parking against the
// plain blocking ping-pong, to see what spinning before blocking buys. For
// them the "goffload" column is the spinning variant and the baseline the
// blocking one.

func init() { register("remote", Suite{Devices: "local:1", Remote: true, Run: runRemote}) }

// spins are the ways of waiting of the raw.pingpong_spin lines, each
// measured against plain blocking reads. The last is the busy-polling
// floor (line raw.pingpong_busy): a round trip is far shorter than its
// budget, so while ping-ponging its reads never park, but a peer left idle
// between rounds still parks after a millisecond instead of taking a core
// away from the other measurements.
var spins = []spin{
	{budget: 20 * time.Microsecond},
	{budget: 100 * time.Microsecond},
	spinBusy,
}

var spinBusy = spin{budget: time.Millisecond}

// spinMetric names the line of sp.
func spinMetric(sp spin) string {
	if sp == spinBusy {
		return "raw.pingpong_busy"
	}
	return fmt.Sprintf("raw.pingpong_spin%dus", sp.budget.Microseconds())
}

func runRemote(env *Env) error {
	dev := offload.On(0)
	if err := describeDevicesOf(env, 1, "a device process (local or tcp)", "local", "tcp"); err != nil {
		return err
	}
	env.Comment("raw.pingpong_*: not goffload figures: the goffload column is the raw 8-byte ping-pong with both sides polling read(2) for up to N µs before parking as the transport's reader does (remote.SpinReader: yielding the P between polls, runtime.Gosched); the baseline is the blocking ping-pong; ratio = spin / block")
	for _, m := range []func(*Env, offload.Device) error{remoteLaunch, remoteSweep, rawSpin} {
		if err := m(env, dev); err != nil {
			return err
		}
	}
	return nil
}

// remoteLaunch: a synchronous target region with an empty kernel on the
// remote device (launch and synchronize: two frames out, one back) against
// an 8-byte ping-pong with plain blocking reads on both sides
// (remote.launch_rtt), and against one whose reads poll as the transport's
// do, the limit a spinning link can reach (remote.launch_rtt_vs_spin).
func remoteLaunch(env *Env, dev offload.Device) error {
	region := func(n int) error {
		for range n {
			if err := benchEmpty.Run(dev); err != nil {
				return err
			}
		}
		return nil
	}
	if err := region(100); err != nil { // warm up
		return err
	}
	sp := spin{budget: remote.SpinBudget()}
	for _, c := range []struct {
		metric, note string
		spin         spin
	}{
		{"remote.launch_rtt", "empty kernel, synchronous vs 8-byte ping-pong, blocking reads", spin{}},
		{"remote.launch_rtt_vs_spin", fmt.Sprintf("empty kernel, synchronous vs 8-byte ping-pong, reads polling %v as the transport's (goal ≤ 1.2)", sp.budget), sp},
	} {
		err := withPeer(env, "echo", c.spin, 0, func(p *peer) error {
			if err := p.pingPong(100); err != nil { // warm up
				return err
			}
			t, b, err := env.Compare(region, p.pingPong)
			if err != nil {
				return err
			}
			env.Report(Result{Metric: c.metric, Goffload: t, Baseline: b, Note: c.note})
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// sweepSizes are the message sizes of the remote.submit_* and
// remote.retrieve_* lines: 8 bytes, then powers of 4 from 64 bytes to
// 64 MiB.
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

// remoteSweep: omp_target_memcpy of each of sweepSizes, synchronous, from
// host memory to device memory allocated beforehand (remote.submit_SIZE)
// and back (remote.retrieve_SIZE), against the same bytes sent raw over
// the transport's socket set-up to an xfer peer whose reads, like ours,
// wait as the transport's do (remote.SpinBudget): a message written and a
// one-byte answer, or a one-byte request and a message read. Each point
// measures for -time/sweepShare.
func remoteSweep(env *Env, dev offload.Device) error {
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
	sp := spin{budget: remote.SpinBudget()}
	env.Comment("remote.submit_SIZE, remote.retrieve_SIZE: synchronous omp_target_memcpy host→device and device→host vs the same bytes over the same sockets to a raw peer, reads polling %v as the transport's; each point measured for -time/%d", sp.budget, sweepShare)
	return withPeer(env, "xfer", sp, int(largest), func(p *peer) error {
		submit := func(size int64) func(n int) error {
			return func(n int) error {
				for range n {
					if err := offload.Memcpy(d, offload.HostPtr(src[:size]), size); err != nil {
						return err
					}
				}
				return nil
			}
		}
		retrieve := func(size int64) func(n int) error {
			return func(n int) error {
				for range n {
					// Poison both ends: the copy must write them again.
					dst[0], dst[size-1] = ^src[0], ^src[size-1]
					if err := offload.Memcpy(offload.HostPtr(dst[:size]), d, size); err != nil {
						return err
					}
					if dst[0] != src[0] || dst[size-1] != src[size-1] {
						return fmt.Errorf("remote.retrieve_%s: the copy from the device differs from what was copied there", sizeName(size))
					}
				}
				return nil
			}
		}
		// Warm up: the device's memory, our buffers and the peer's are
		// faulted in, the socket buffers sized.
		for _, f := range []func(int) error{submit(largest), retrieve(largest), func(n int) error { return p.send(src, n) }, func(n int) error { return p.fetch(dst, src, n) }} {
			if err := f(1); err != nil {
				return err
			}
		}
		for _, size := range sweepSizes {
			name := "remote.submit_" + sizeName(size)
			raw := func(n int) error { return p.send(src[:size], n) }
			t, b, err := env.Compare(submit(size), raw)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			// The data must really be on the device: read back the end.
			probe := min(4096, size)
			back := make([]byte, probe)
			if err := offload.Memcpy(offload.HostPtr(back), d.Offset(size-probe), probe); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			if !bytes.Equal(back, src[size-probe:size]) {
				return fmt.Errorf("%s: device memory at offset %d differs from what was copied there", name, size-probe)
			}
			env.Report(Result{Metric: name, Goffload: t, Baseline: b, Bytes: size,
				Note: fmt.Sprintf("host→device: %s vs %s", gbps(size, t), gbps(size, b))})
		}
		for _, size := range sweepSizes {
			name := "remote.retrieve_" + sizeName(size)
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

// rawSpin: what spinning before blocking buys the raw ping-pong, for each
// way of spinning of spins: spinning ping-pong ÷ blocking ping-pong.
func rawSpin(env *Env, _ offload.Device) error {
	return withPeer(env, "echo", spin{}, 0, func(block *peer) error {
		if err := block.pingPong(100); err != nil {
			return err
		}
		for _, sp := range spins {
			err := withPeer(env, "echo", sp, 0, func(p *peer) error {
				if err := p.pingPong(100); err != nil {
					return err
				}
				reads0, parked0 := p.r.stats()
				t, b, err := env.Compare(p.pingPong, block.pingPong)
				if err != nil {
					return err
				}
				note := fmt.Sprintf("spin ≤%v", sp.budget)
				if sp == spinBusy {
					note = fmt.Sprintf("busy poll (spin ≤%v)", sp.budget)
				}
				if reads, parked := p.r.stats(); reads > reads0 {
					note += fmt.Sprintf("; host parked in %.0f%% of reads", 100*float64(parked-parked0)/float64(reads-reads0))
				}
				env.Report(Result{Metric: spinMetric(sp), Goffload: t, Baseline: b, Note: note + "; ratio spin/block"})
				return nil
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
}
