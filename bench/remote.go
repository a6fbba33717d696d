package main

import (
	"fmt"
	"os"
	"time"

	"github.com/goffload/offload"
	"github.com/goffload/offload/plugins/remote/shm"
	"github.com/goffload/offload/plugins/remote/transport"
)

// Suite remote: one local remote device (device 0), a process of this same
// executable whose link to the host goes through shared memory (two rings
// in a memory file, the default), against the same traffic sent raw to a
// peer process (peer.go) that does nothing but read it and answer. The raw
// baselines that spin, those of remote.launch_rtt_vs_spin and of the
// remote.submit_SIZE and remote.retrieve_SIZE sweep, go over a
// shared-memory ring pair as the device's link does (peershm.go);
// remote.launch_rtt's, a ping-pong with blocking reads, and the raw.* lines
// go over an inherited Unix socketpair, as local devices' links did before
// shared memory. remote.submit_64MiB_vs_copy and
// remote.retrieve_64MiB_vs_copy compare the sweep's largest copies with a
// Go copy of the same bytes into fresh memory in this process.
//
// Suite remote-socket: the same figures, named remote_socket.*, with the
// local device's link on its socket (GOFFLOAD_LOCAL_LINK=socket, the
// fallback) and every raw baseline over a socketpair; the raw.* lines are
// suite remote's only (they involve no device).
//
// With -devices tcp://HOST:PORT the device is a TCP device on another
// machine (or this one), and with -peer HOST:PORT the raw peers are a
// bench -serve-peer there, reached over the same network (peertcp.go);
// bench's doc comment has the commands. With -peer, or a device that is not
// local, every raw baseline goes over the socket or TCP connection; suite
// remote-socket measures local devices only, and says so when -devices
// names others.
//
// The raw.* lines are no goffload figures: they compare the raw ping-pong
// with both sides spinning briefly on the socket before parking against the
// plain blocking ping-pong, to see what spinning before blocking buys. For
// them the "goffload" column is the spinning variant and the baseline the
// blocking one.

func init() {
	register("remote", Suite{Devices: "local:1", Remote: true, Run: func(env *Env) error { return runRemote(env, false) }})
	register("remote-socket", Suite{Devices: "local:1", Remote: true, Env: map[string]string{envLocalLink: "socket"},
		Run: func(env *Env) error { return runRemote(env, true) }})
}

// envLocalLink says what local devices' links go through: shm (shared
// memory, the default) or socket; a local device reads it when it is
// started (offload.Start).
const envLocalLink = "GOFFLOAD_LOCAL_LINK"

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

// remoteRun is how suite remote or remote-socket measures.
type remoteRun struct {
	prefix string // of its metrics: "remote." or "remote_socket."
	// shm: the spinning raw baselines go over a shared-memory ring pair
	// (the device is local, its link shared memory, and there is no -peer);
	// else over the socket (peerWhere).
	shm bool
	tcp bool // the raw peer is a bench -serve-peer (-peer), over TCP
}

// spinPeer opens the peer of r's spinning raw baselines (reads polling
// transport.SpinBudget as the transport's), runs f with it and closes it.
func (r remoteRun) spinPeer(env *Env, role string, size int, f func(p *peer) error) (err error) {
	if !r.shm {
		return withPeer(env, role, spin{budget: transport.SpinBudget()}, size, f)
	}
	p, err := startShmPeer(role, size)
	return usePeer(p, err, f)
}

// over says what r's spinning raw baselines go over, for notes.
func (r remoteRun) over() string {
	switch {
	case r.shm:
		return "a shared-memory ring pair"
	case r.tcp:
		return "TCP"
	}
	return "the socket"
}

// runRemote runs suite remote, or remote-socket (socket).
func runRemote(env *Env, socket bool) error {
	dev := offload.On(0)
	if err := describeDevicesOf(env, 1, "a device process (local or tcp)", "local", "tcp"); err != nil {
		return err
	}
	info, err := dev.Info()
	if err != nil {
		return err
	}
	r := remoteRun{prefix: "remote.", tcp: env.Peer != ""}
	if socket {
		r.prefix = "remote_socket."
		if info.Kind != "local" {
			env.Comment("suite remote-socket: not measured: it measures local devices with their links on their sockets (%s=socket), and device 0 is a %s device; suite remote measures it", envLocalLink, info.Kind)
			return nil
		}
	}
	if env.Peer == "" && info.Kind == "local" && os.Getenv(envLocalLink) != "socket" {
		// Where memory files are refused, the device's link stays on its
		// socket (remote's spawn), and so do the baselines.
		if f, err := shm.NewFile(); err != nil {
			env.Comment("%s*: no shared memory here (%v): the local device's link is its socket, and so is every raw baseline's", r.prefix, err)
		} else {
			f.Close()
			r.shm = true
		}
	}
	if r.shm {
		env.Comment("%[1]slaunch_rtt_vs_spin, %[1]ssubmit_SIZE, %[1]sretrieve_SIZE: raw baselines over a shared-memory ring pair, as the local device's link (shm.NewFile, shm.Open; the peer inherits the memory file as descriptor 3, %[2]s), reads polling %[3]v then parking on a futex as the transport's; %[1]slaunch_rtt's blocking ping-pong goes over the socketpair", r.prefix, envPeerShm, transport.SpinBudget())
	} else {
		env.Comment("%[1]s*: every raw baseline goes over %[2]s (the raw baselines' peer above)", r.prefix, r.over())
	}
	ms := []func(*Env, offload.Device, remoteRun) error{remoteLaunch, remoteSweep, remoteVsCopy}
	if !socket {
		env.Comment("raw.pingpong_*: not goffload figures: the goffload column is the raw 8-byte ping-pong over the socket with both sides polling read(2) for up to N µs before parking as the transport's socket reader does (transport.SpinReader: yielding the P between polls, runtime.Gosched); the baseline is the blocking ping-pong; ratio = spin / block")
		ms = append(ms, rawSpin)
	}
	for _, m := range ms {
		if err := m(env, dev, r); err != nil {
			return err
		}
	}
	return nil
}

// remoteLaunch: a synchronous target region with an empty kernel on the
// remote device (launch and synchronize: two frames out, one back) against
// an 8-byte ping-pong over the socket with plain blocking reads on both
// sides (launch_rtt), and against one whose reads wait as the transport's
// do, over r's spinning link, the limit the link can reach
// (launch_rtt_vs_spin).
func remoteLaunch(env *Env, dev offload.Device, r remoteRun) error {
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
	measure := func(metric, note string) func(p *peer) error {
		return func(p *peer) error {
			if err := p.pingPong(100); err != nil { // warm up
				return err
			}
			t, b, err := env.Compare(region, p.pingPong)
			if err != nil {
				return err
			}
			env.Report(Result{Metric: r.prefix + metric, Goffload: t, Baseline: b, Note: note})
			return nil
		}
	}
	if err := withPeer(env, "echo", spin{}, 0, measure("launch_rtt", fmt.Sprintf("empty kernel, synchronous vs 8-byte ping-pong over %s, blocking reads", remoteRun{tcp: r.tcp}.over()))); err != nil {
		return err
	}
	note := fmt.Sprintf("empty kernel, synchronous vs 8-byte ping-pong over %s, reads polling %v as the transport's (goal ≤ 1.2)", r.over(), transport.SpinBudget())
	if err := r.spinPeer(env, "echo", 0, measure("launch_rtt_vs_spin", note)); err != nil {
		return err
	}
	return launchBeyondKernel(env, dev, r.prefix)
}

// rawSpin: what spinning before blocking buys the raw ping-pong over the
// socket, for each way of spinning of spins: spinning ping-pong ÷ blocking
// ping-pong.
func rawSpin(env *Env, _ offload.Device, _ remoteRun) error {
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
