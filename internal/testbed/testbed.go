// Package testbed makes machines on one machine for tests and benchmarks
// of goffload across a network: each machine is a Linux network namespace
// with an address of its own, joined to the others and to this process's
// namespace by a bridge, so that a tcp:// device process started in one is
// reached over a real network path whose link a test can cut, heal and
// slow.
//
// A bed needs root (it creates namespaces, a bridge and veth pairs with
// iproute2's ip, and rate limits with tc). Where it cannot run (not root,
// no ip, namespaces refused) [New] skips the test with the reason, and
// [Open] returns an error wrapping [ErrUnavailable]; with
// GOFFLOAD_REQUIRE_TESTBED=1 New fails the test instead.
//
// Everything a bed makes is named after the process that made it
// (namespaces goffload-tb-PID-START-K-I, interfaces gtb…), and only those
// things are touched: the host's own interfaces, addresses and routes stay
// as they are. The bridge gets one address in this namespace, in a
// 10.231.X.0/24 that no route or address here overlaps, so that a host in
// this process reaches the machines; [Bed.Close] removes it with the rest.
// Close runs at the test's cleanup, also after a failure or a panic, and
// at SIGINT, SIGTERM or SIGHUP; what a killed process left behind is
// removed by the next bed that opens, once its maker is gone.
package testbed

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
)

// ErrUnavailable is wrapped by Open's error where a bed cannot run here:
// not root, no ip command, or network namespaces, bridges or veth pairs
// refused.
var ErrUnavailable = errors.New("testbed: cannot make machines here")

// envRequire names the variable that makes New fail instead of skip.
const envRequire = "GOFFLOAD_REQUIRE_TESTBED"

// MaxMachines is the most machines one bed holds (a /24, less the host's
// address and the network and broadcast addresses).
const MaxMachines = 253

// A Bed is a set of machines joined by a bridge.
type Bed struct {
	id       string // goffload-tb-PID-START-K: what every namespace's name starts with
	tag      string // gtbPID36-K36: the bridge's name, and what its ports' names start with
	bridge   string
	net      netip.Prefix
	hostAddr netip.Addr
	secret   string
	machines []*Machine

	mu      sync.Mutex
	closed  bool
	devices map[*Device]struct{}
}

// A Machine is one network namespace of a bed, with one interface (eth0)
// on the bed's bridge and its loopback up.
type Machine struct {
	bed   *Bed
	index int
	ns    string
	veth  string // this namespace's end of the machine's veth pair
	addr  netip.Addr
}

// New opens a bed of n machines for t and closes it at t's cleanup. It
// skips t where a bed cannot run (the message says why), unless
// GOFFLOAD_REQUIRE_TESTBED=1, and fails t when making the bed fails
// otherwise.
func New(t testing.TB, n int) *Bed {
	t.Helper()
	b, err := Open(n)
	if errors.Is(err, ErrUnavailable) && os.Getenv(envRequire) != "1" {
		t.Skipf("%v (set %s=1 to fail instead of skip)", err, envRequire)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("closing the testbed: %v", err)
		}
	})
	return b
}

// Open makes a bed of n machines (1 to MaxMachines). The caller must
// Close it. Before it makes anything, it removes what beds of processes
// that have ended left behind.
func Open(n int) (*Bed, error) {
	if n < 1 || n > MaxMachines {
		return nil, fmt.Errorf("testbed: %d machines: want 1 to %d", n, MaxMachines)
	}
	owner, err := selfOwner()
	if err != nil {
		return nil, err
	}
	return open(n, owner)
}

// open makes a bed for owner (a process's pid and start time; tests pass
// one that has ended, to leave something for a sweep).
func open(n int, own owner) (*Bed, error) {
	if err := available(); err != nil {
		return nil, err
	}
	key := make([]byte, 16)
	rand.Read(key)
	seq := nextSeq()
	if seq >= 36*36*36 { // the tag's K36 has three characters at most
		return nil, fmt.Errorf("testbed: this process has opened %d beds: at most %d fit the interfaces' names", seq-1, 36*36*36-1)
	}
	b := &Bed{
		id:      fmt.Sprintf("%s%d-%d-%d", nsPrefix, own.pid, own.start, seq),
		tag:     ifPrefix + strconv.FormatInt(int64(own.pid), 36) + "-" + strconv.FormatInt(seq, 36),
		secret:  hex.EncodeToString(key),
		devices: map[*Device]struct{}{},
	}
	b.bridge = b.tag
	track(b)
	if err := b.make(n); err != nil {
		if cerr := b.Close(); cerr != nil {
			err = fmt.Errorf("%w (and cleaning up: %v)", err, cerr)
		}
		return nil, err
	}
	return b, nil
}

// Machines returns the bed's machines, by index.
func (b *Bed) Machines() []*Machine { return append([]*Machine(nil), b.machines...) }

// Machine returns machine i.
func (b *Bed) Machine(i int) *Machine { return b.machines[i] }

// HostAddr is this namespace's address on the bridge: what a process
// here connects from, and what a machine reaches it at.
func (b *Bed) HostAddr() netip.Addr { return b.hostAddr }

// Bridge is the name of the bed's bridge in this namespace; the bridge's
// end of machine I's veth pair is Bridge()+"_"+I (I in base 36).
func (b *Bed) Bridge() string { return b.bridge }

// Prefix is the bed's subnet (a 10.231.X.0/24).
func (b *Bed) Prefix() netip.Prefix { return b.net }

// Secret is the GOFFLOAD_SECRET that StartDevice gives device processes
// (random, per bed): a host here sets it too.
func (b *Bed) Secret() string { return b.secret }

// Close kills the device processes the bed started and removes its
// namespaces (with every process still in them), its veth pairs and its
// bridge with its address. Closing twice does nothing.
func (b *Bed) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	devs := make([]*Device, 0, len(b.devices))
	for d := range b.devices {
		devs = append(devs, d)
	}
	b.mu.Unlock()
	for _, d := range devs {
		d.Kill()
	}
	err := removeOwned(b.id, b.tag)
	untrack(b)
	return err
}

// Index is the machine's index in its bed.
func (m *Machine) Index() int { return m.index }

// Namespace is the name of the machine's network namespace (ip netns).
func (m *Machine) Namespace() string { return m.ns }

// Addr is the machine's address on the bridge.
func (m *Machine) Addr() netip.Addr { return m.addr }

// String names the machine for messages.
func (m *Machine) String() string {
	return fmt.Sprintf("testbed machine %d (%s, %s)", m.index, m.ns, m.addr)
}

// Command returns a command that runs name with args in the machine's
// network namespace (ip netns exec, which enters the namespace and then
// execs name in the same process, so the Cmd's Process is name's): its
// sockets are the machine's, the rest (files, processes) is this
// machine's. Close kills what still runs in the namespace.
func (m *Machine) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", m.ns, name}, args...)...)
}

// Cut takes the machine's link down, at both ends of its veth pair: what
// is sent to it or from it is lost, without a reset or an error on either
// side, as when a cable is pulled. Heal brings it back.
func (m *Machine) Cut() error {
	return m.setLink("down")
}

// Heal brings a cut link back up; connections that have not given up go
// on (after TCP's next retransmission).
func (m *Machine) Heal() error {
	return m.setLink("up")
}

func (m *Machine) setLink(state string) error {
	if err := ipRun("link", "set", "dev", m.bed.port(m.index), state); err != nil {
		return fmt.Errorf("%v: %w", m, err)
	}
	if err := ipRun("-n", m.ns, "link", "set", "dev", m.veth, state); err != nil {
		return fmt.Errorf("%v: %w", m, err)
	}
	return nil
}

// Slow limits the machine's link to bitsPerSecond each way (a tc htb
// class on both ends of its veth pair); 0 lifts the limit. The kernels
// this runs on may lack netem, so there is no added delay or loss.
func (m *Machine) Slow(bitsPerSecond uint64) error {
	for _, ns := range []string{"", m.ns} {
		dev := m.veth
		if ns == "" {
			dev = m.bed.port(m.index)
		}
		if err := setRate(ns, dev, bitsPerSecond); err != nil {
			return fmt.Errorf("%v: %w", m, err)
		}
	}
	return nil
}

// port is the bridge's end of machine i's veth pair.
func (b *Bed) port(i int) string { return b.tag + "_" + strconv.FormatInt(int64(i), 36) }
