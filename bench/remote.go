package main

import (
	"bytes"
	"fmt"
	"time"

	"github.com/goffload/offload"
	"github.com/goffload/offload/plugins/remote"
)

// Suite remote: one local remote device (device 0), a process of this same
// executable connected by an inherited Unix socketpair, against the same
// traffic sent raw over the same kind of socket to a peer process (peer.go)
// that does nothing but read it and answer.
//
// The raw.* lines are no goffload figures: they compare the raw ping-pong
// with both sides spinning briefly on the socket before parking against the
// plain blocking ping-pong, to see what spinning before blocking buys. For
// them the "goffload" column is the spinning variant and the baseline the
// blocking one.

func init() { register("remote", Suite{Devices: "local:1", Run: runRemote}) }

// spins are the ways of waiting of the raw.pingpong_spin lines, each
// measured against plain blocking reads. The last is the busy-polling
// floor (line raw.pingpong_busy): a round trip is far shorter than its
// budget, so while ping-ponging its reads never park, but a peer left idle
// between rounds still parks after a millisecond instead of taking a core
// away from the other measurements.
var spins = []spin{
	{budget: 20 * time.Microsecond},
	{budget: 100 * time.Microsecond},
	{budget: 20 * time.Microsecond, osYield: true},
	{budget: 100 * time.Microsecond, osYield: true},
	spinBusy,
}

var spinBusy = spin{budget: time.Millisecond}

// spinMetric names the line of sp.
func spinMetric(sp spin) string {
	if sp == spinBusy {
		return "raw.pingpong_busy"
	}
	name := fmt.Sprintf("raw.pingpong_spin%dus", sp.budget.Microseconds())
	if sp.osYield {
		name += "_yield"
	}
	return name
}

func runRemote(env *Env) error {
	dev := offload.On(0)
	if err := describeDevices(env, 1, "remote", "a remote device"); err != nil {
		return err
	}
	env.Comment("raw peers: this executable started again with %s=echo|sink, on an inherited AF_UNIX SOCK_STREAM socketpair", envPeerRole)
	env.Comment("raw.pingpong_*: not goffload figures: the goffload column is the raw 8-byte ping-pong with both sides polling read(2) for up to N µs before parking, yielding the P between polls (runtime.Gosched) and with _yield the CPU too (sched_yield); the baseline is the blocking ping-pong; ratio = spin / block")
	for _, m := range []func(*Env, offload.Device) error{remoteLaunch, remoteSubmit, rawSpin} {
		if err := m(env, dev); err != nil {
			return err
		}
	}
	return nil
}

// withPeer starts a peer, runs f with it and stops it.
func withPeer(role string, sp spin, f func(p *peer) error, env ...string) (err error) {
	p, err := startPeer(role, sp, env...)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := p.close(); err == nil {
			err = cerr
		}
	}()
	return f(p)
}

// remoteLaunch: a synchronous target region with an empty kernel on the
// remote device (launch and synchronize: two frames out, one back) against
// an 8-byte ping-pong with plain blocking reads on both sides
// (remote.launch_rtt), and against one whose reads poll as the transport's
// do, the limit a spinning link can reach (remote.launch_rtt_vs_spin).
func remoteLaunch(env *Env, dev offload.Device) error {
	region := func(n int) error {
		for range n {
			if err := dev.Run(benchEmpty); err != nil {
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
		err := withPeer("echo", c.spin, func(p *peer) error {
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

// remoteSubmit: omp_target_memcpy of 64 MiB from host memory to device
// memory allocated beforehand, synchronous, against writing the 64 MiB to a
// sink peer that reads them into a preallocated buffer and answers with
// one byte.
func remoteSubmit(env *Env, dev offload.Device) error {
	buf := fill(make([]byte, size64MiB))
	d, err := dev.Alloc(size64MiB)
	if err != nil {
		return err
	}
	defer offload.Free(d)
	src := offload.HostPtr(buf)
	submit := func(n int) error {
		for range n {
			if err := offload.Memcpy(d, src, size64MiB); err != nil {
				return err
			}
		}
		return nil
	}
	return withPeer("sink", spin{}, func(p *peer) error {
		// Warm up both: the device's memory and the sink's buffer are
		// faulted in, the socket buffers sized.
		if err := submit(1); err != nil {
			return err
		}
		raw := func(n int) error { return p.send(buf, n) }
		if err := raw(1); err != nil {
			return err
		}
		t, b, err := env.Compare(submit, raw)
		if err != nil {
			return err
		}
		// The data must really be on the device: read back both ends.
		const probe = 4096
		back := make([]byte, probe)
		for _, off := range []int64{0, size64MiB - probe} {
			if err := offload.Memcpy(offload.HostPtr(back), d.Offset(off), probe); err != nil {
				return err
			}
			if !bytes.Equal(back, buf[off:off+probe]) {
				return fmt.Errorf("remote.submit_64MiB: device memory at offset %d differs from what was copied there", off)
			}
		}
		env.Report(Result{Metric: "remote.submit_64MiB", Goffload: t, Baseline: b,
			Note: fmt.Sprintf("host→device: %s vs %s", gbps(size64MiB, t), gbps(size64MiB, b))})
		return nil
	}, fmt.Sprintf("%s=%d", envPeerSize, size64MiB))
}

// rawSpin: what spinning before blocking buys the raw ping-pong, for each
// way of spinning of spins: spinning ping-pong ÷ blocking ping-pong.
func rawSpin(env *Env, _ offload.Device) error {
	return withPeer("echo", spin{}, func(block *peer) error {
		if err := block.pingPong(100); err != nil {
			return err
		}
		for _, sp := range spins {
			err := withPeer("echo", sp, func(p *peer) error {
				if err := p.pingPong(100); err != nil {
					return err
				}
				p.r.reads, p.r.parked = 0, 0
				t, b, err := env.Compare(p.pingPong, block.pingPong)
				if err != nil {
					return err
				}
				note := fmt.Sprintf("spin ≤%v", sp.budget)
				if sp == spinBusy {
					note = fmt.Sprintf("busy poll (spin ≤%v)", sp.budget)
				}
				if sp.osYield {
					note += " +sched_yield"
				}
				if p.r.reads > 0 {
					note += fmt.Sprintf("; host parked in %.0f%% of reads", 100*float64(p.r.parked)/float64(p.r.reads))
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
