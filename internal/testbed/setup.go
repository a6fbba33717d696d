package testbed

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

const (
	// nsPrefix starts the name of every namespace a bed makes:
	// goffload-tb-PID-START-K-I (scripts/cluster's are goffload-cl-…).
	nsPrefix = "goffload-tb-"
	// ifPrefix starts the name of every interface a bed makes in this
	// namespace: gtbPID36-K36 (the bridge), gtbPID36-K36_I36 (the bridge's
	// end of machine I's veth pair); at most 15 bytes, as Linux wants.
	// Their alias is the bed's id, which names the process that made them.
	ifPrefix = "gtb"
	// lockPath serialises choosing a subnet (and sweeping) between beds of
	// different processes and scripts/cluster, which locks it too.
	lockPath = "/run/goffload-testbed.lock" // ip netns needs /run (for /run/netns) anyway
	// lockWait bounds the wait for lockPath.
	lockWait = 30 * time.Second
)

// An owner is the process a bed belongs to: its pid and its start time
// (in clock ticks since boot, from /proc), so that a pid used again by
// another process is not taken for the bed's maker.
type owner struct {
	pid   int
	start uint64
}

func selfOwner() (owner, error) {
	start, err := startTime(os.Getpid())
	if err != nil {
		return owner{}, fmt.Errorf("testbed: %w", err)
	}
	return owner{os.Getpid(), start}, nil
}

// startTime reads field 22 of /proc/PID/stat.
func startTime(pid int) (uint64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	i := bytes.LastIndexByte(b, ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: no start time in %q", pid, b)
	}
	return strconv.ParseUint(f[19], 10, 64)
}

// alive reports whether the process that made a bed still runs.
func (o owner) alive() bool {
	start, err := startTime(o.pid)
	return err == nil && start == o.start
}

// parseID reads the owner from a namespace name or bridge alias
// (goffload-tb-PID-START-…).
func parseID(s string) (owner, bool) {
	rest, ok := strings.CutPrefix(s, nsPrefix)
	if !ok {
		return owner{}, false
	}
	f := strings.SplitN(rest, "-", 3)
	if len(f) < 3 {
		return owner{}, false
	}
	pid, err1 := strconv.Atoi(f[0])
	start, err2 := strconv.ParseUint(f[1], 10, 64)
	if err1 != nil || err2 != nil || pid <= 0 {
		return owner{}, false
	}
	return owner{pid, start}, true
}

var seq atomic.Int64

func nextSeq() int64 { return seq.Add(1) }

// available says why a bed cannot run here, or is nil.
func available() error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: it needs root (this is uid %d) to make network namespaces, a bridge and veth pairs", ErrUnavailable, os.Geteuid())
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("%w: no ip command (install iproute2): %v", ErrUnavailable, err)
	}
	return nil
}

// ipRun runs ip with args and returns an error with its output if it
// fails.
func ipRun(args ...string) error {
	_, err := ipOut(args...)
	return err
}

func ipOut(args ...string) (string, error) {
	return runOut("ip", args...)
}

func runOut(name string, args ...string) (string, error) {
	var out, errb bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// lock takes the lock file shared with other processes' beds and
// scripts/cluster; the function it returns releases it.
func lock() (func(), error) {
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EROFS) {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err) // root in a user namespace, say
	}
	if err != nil {
		return nil, fmt.Errorf("testbed: %w", err)
	}
	// Holders keep it for a few ip commands; one that keeps it longer than
	// lockWait is stuck, and waiting on would hang the test.
	deadline := time.Now().Add(lockWait)
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			break
		}
		if time.Now().After(deadline) {
			err = fmt.Errorf("held by another process for over %v (lsof %s says which)", lockWait, lockPath)
			break
		}
		time.Sleep(wait)
	}
	f.Close()
	return nil, fmt.Errorf("testbed: locking %s: %w", lockPath, err)
}

// make sweeps what ended processes left, then makes the bridge and n
// machines.
func (b *Bed) make(n int) error {
	unlock, err := lock()
	if err != nil {
		return err
	}
	defer func() {
		if unlock != nil {
			unlock()
		}
	}()
	if err := sweep(); err != nil {
		return err
	}
	if err := ipRun("link", "add", b.bridge, "type", "bridge"); err != nil {
		return fmt.Errorf("%w: making a bridge: %v", ErrUnavailable, err)
	}
	if err := ipRun("link", "set", "dev", b.bridge, "alias", b.id, "up"); err != nil {
		return err
	}
	b.net, err = freeSubnet()
	if err != nil {
		return err
	}
	base := b.net.Addr().As4()
	b.hostAddr = netip.AddrFrom4([4]byte{base[0], base[1], base[2], 254})
	if err := ipRun("addr", "add", netip.PrefixFrom(b.hostAddr, 24).String(), "dev", b.bridge); err != nil {
		return err
	}
	unlock()
	unlock = nil
	for i := range n {
		m := &Machine{
			bed:   b,
			index: i,
			ns:    fmt.Sprintf("%s-%d", b.id, i),
			veth:  "eth0",
			addr:  netip.AddrFrom4([4]byte{base[0], base[1], base[2], byte(i + 1)}),
		}
		if err := m.make(); err != nil {
			return err
		}
		b.machines = append(b.machines, m)
	}
	return nil
}

// make creates the machine's namespace and veth pair and brings its
// interfaces up.
func (m *Machine) make() error {
	port := m.bed.port(m.index)
	if err := ipRun("netns", "add", m.ns); err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if err := ipRun("link", "add", port, "type", "veth", "peer", "name", m.veth, "netns", m.ns); err != nil {
		return fmt.Errorf("%w: making a veth pair: %v", ErrUnavailable, err)
	}
	steps := [][]string{
		{"link", "set", "dev", port, "alias", m.bed.id, "master", m.bed.bridge, "up"},
		{"-n", m.ns, "link", "set", "dev", "lo", "up"},
		{"-n", m.ns, "addr", "add", netip.PrefixFrom(m.addr, 24).String(), "dev", m.veth},
		{"-n", m.ns, "link", "set", "dev", m.veth, "up"},
	}
	for _, s := range steps {
		if err := ipRun(s...); err != nil {
			return fmt.Errorf("testbed: machine %d: %w", m.index, err)
		}
	}
	return nil
}

// freeSubnet returns the first 10.231.X.0/24 that no address or route of
// this namespace overlaps (in any routing table; a default route aside).
func freeSubnet() (netip.Prefix, error) {
	out, err := ipOut("-o", "-4", "route", "show", "table", "all")
	if err != nil {
		return netip.Prefix{}, err
	}
	addrs, err := ipOut("-o", "-4", "addr", "show")
	if err != nil {
		return netip.Prefix{}, err
	}
	return pickSubnet(append(routePrefixes(out), addrPrefixes(addrs)...))
}

// pickSubnet returns the first 10.231.X.0/24 that overlaps none of taken
// (whose /0s, default routes, do not count).
func pickSubnet(taken []netip.Prefix) (netip.Prefix, error) {
	for x := range 256 {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 231, byte(x), 0}), 24)
		free := true
		for _, q := range taken {
			if q.Bits() > 0 && q.Overlaps(p) {
				free = false
				break
			}
		}
		if free {
			return p, nil
		}
	}
	return netip.Prefix{}, errors.New("testbed: every 10.231.X.0/24 overlaps an address or a route of this machine")
}

// routeTypes are the words ip may print before a route's destination.
var routeTypes = map[string]bool{
	"unicast": true, "local": true, "broadcast": true, "multicast": true, "anycast": true,
	"unreachable": true, "blackhole": true, "prohibit": true, "throw": true, "nat": true,
}

// routePrefixes reads the destinations of ip -o -4 route show's lines.
func routePrefixes(out string) []netip.Prefix {
	var ps []netip.Prefix
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) > 1 && routeTypes[f[0]] {
			f = f[1:]
		}
		if len(f) == 0 {
			continue
		}
		if p, ok := parsePrefix(f[0]); ok {
			ps = append(ps, p)
		}
	}
	return ps
}

// addrPrefixes reads the networks of ip -o -4 addr show's lines
// (N: IFACE inet A.B.C.D/L ...).
func addrPrefixes(out string) []netip.Prefix {
	var ps []netip.Prefix
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		for i := 0; i+1 < len(f); i++ {
			if f[i] == "inet" {
				if p, ok := parsePrefix(f[i+1]); ok {
					ps = append(ps, p.Masked())
				}
			}
		}
	}
	return ps
}

func parsePrefix(s string) (netip.Prefix, bool) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p, true
	}
	if a, err := netip.ParseAddr(s); err == nil && a.Is4() {
		return netip.PrefixFrom(a, 32), true
	}
	return netip.Prefix{}, false
}

// setRate puts an htb class of rate bps at the root of dev in namespace ns
// ("" for this one), or removes the root qdisc when bps is 0.
func setRate(ns, dev string, bps uint64) error {
	pre := []string{}
	if ns != "" {
		pre = []string{"-n", ns}
	}
	tc := func(args ...string) error {
		_, err := runOut("tc", append(append([]string{}, pre...), args...)...)
		return err
	}
	if _, err := exec.LookPath("tc"); err != nil {
		return fmt.Errorf("no tc command (install iproute2): %w", err)
	}
	if bps == 0 {
		out, err := runOut("tc", append(append([]string{}, pre...), "qdisc", "show", "dev", dev, "root")...)
		if err != nil || !strings.Contains(out, "htb 1:") {
			return err // not slowed: nothing to take off
		}
		return tc("qdisc", "del", "dev", dev, "root")
	}
	rate := strconv.FormatUint(bps, 10) + "bit"
	if err := tc("qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "1"); err != nil {
		return err
	}
	return tc("class", "replace", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", rate, "ceil", rate)
}

// sweep removes the namespaces and interfaces of beds whose process has
// ended (killed before its cleanup ran). The caller holds the lock.
func sweep() error {
	nss, err := namespaces()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	var errs []error
	for _, ns := range nss {
		if own, ok := parseID(ns); ok && !own.alive() {
			errs = append(errs, removeNamespace(ns))
		}
	}
	for _, name := range interfaces() {
		if !strings.HasPrefix(name, ifPrefix) {
			continue
		}
		alias, _ := os.ReadFile("/sys/class/net/" + name + "/ifalias")
		if own, ok := parseID(strings.TrimSpace(string(alias))); ok && !own.alive() {
			errs = append(errs, removeLink(name))
		}
	}
	return errors.Join(errs...)
}

// namespaces lists the named network namespaces (ip netns list).
func namespaces() ([]string, error) {
	out, err := ipOut("netns", "list")
	if err != nil {
		return nil, err
	}
	var names []string
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) > 0 {
			names = append(names, f[0])
		}
	}
	return names, nil
}

// interfaces lists this namespace's interfaces by name.
func interfaces() []string {
	ents, _ := os.ReadDir("/sys/class/net")
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// removeOwned removes the namespaces whose names start with id and the
// interfaces here whose names start with tag.
func removeOwned(id, tag string) error {
	nss, err := namespaces()
	errs := []error{err}
	for _, ns := range nss {
		if strings.HasPrefix(ns, id+"-") {
			errs = append(errs, removeNamespace(ns))
		}
	}
	for _, name := range interfaces() {
		if strings.HasPrefix(name, tag+"_") || name == tag {
			errs = append(errs, removeLink(name))
		}
	}
	return errors.Join(errs...)
}

// removeNamespace kills what still runs in namespace ns, then removes it
// (which removes its end of the veth pair, and so the pair).
func removeNamespace(ns string) error {
	if out, err := ipOut("netns", "pids", ns); err == nil {
		for _, f := range strings.Fields(out) {
			if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	if err := ipRun("netns", "del", ns); err != nil {
		return fmt.Errorf("testbed: removing namespace %s: %w", ns, err)
	}
	return nil
}

// removeLink removes interface name; one already gone (with its veth
// peer's namespace) is fine.
func removeLink(name string) error {
	if err := ipRun("link", "del", "dev", name); err != nil {
		if _, serr := os.Stat("/sys/class/net/" + name); errors.Is(serr, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("testbed: removing interface %s: %w", name, err)
	}
	return nil
}

// open holds the beds not yet closed, for the signal handler.
var openBeds struct {
	sync.Mutex
	beds map[*Bed]struct{}
	sigs chan os.Signal
}

// track adds b to the open beds; the first one starts the handler that
// closes every open bed at SIGINT, SIGTERM or SIGHUP and then lets the
// signal do what it would have done.
func track(b *Bed) {
	openBeds.Lock()
	defer openBeds.Unlock()
	if openBeds.beds == nil {
		openBeds.beds = map[*Bed]struct{}{}
	}
	openBeds.beds[b] = struct{}{}
	if openBeds.sigs == nil {
		openBeds.sigs = make(chan os.Signal, 1)
		signal.Notify(openBeds.sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
		go onSignal(openBeds.sigs)
	}
}

// untrack removes b from the open beds; the last one stops the handler.
func untrack(b *Bed) {
	openBeds.Lock()
	defer openBeds.Unlock()
	delete(openBeds.beds, b)
	if len(openBeds.beds) == 0 && openBeds.sigs != nil {
		signal.Stop(openBeds.sigs)
		close(openBeds.sigs)
		openBeds.sigs = nil
	}
}

func onSignal(c chan os.Signal) {
	sig, ok := <-c
	if !ok {
		return
	}
	openBeds.Lock()
	beds := make([]*Bed, 0, len(openBeds.beds))
	for b := range openBeds.beds {
		beds = append(beds, b)
	}
	openBeds.Unlock()
	for _, b := range beds {
		b.Close()
	}
	// The last Close stopped this handler: unless some other handler
	// wants sig, it now does what it would have done without one.
	if s, ok := sig.(syscall.Signal); ok {
		syscall.Kill(os.Getpid(), s)
	}
}
