package testbed_test

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goffload/offload/internal/testbed"
)

// namespaces lists the network namespaces by name.
func namespaces(t *testing.T) map[string]bool {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for line := range strings.Lines(string(out)) {
		if f := strings.Fields(line); len(f) > 0 {
			names[f[0]] = true
		}
	}
	return names
}

// linkExists reports whether this namespace has an interface called name.
func linkExists(name string) bool {
	_, err := os.Stat("/sys/class/net/" + name)
	return err == nil
}

// hasAddr reports whether an interface of this namespace has address a.
func hasAddr(t *testing.T, a string) bool {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range addrs {
		if ip, _, _ := net.ParseCIDR(x.String()); ip != nil && ip.String() == a {
			return true
		}
	}
	return false
}

// checkGone fails t if anything of the bed whose namespaces are ns and
// whose bridge is bridge is left.
func checkGone(t *testing.T, ns []string, bridge, hostAddr string) {
	t.Helper()
	have := namespaces(t)
	for _, n := range ns {
		if have[n] {
			t.Errorf("namespace %s is left", n)
		}
	}
	for i := range ns {
		if port := fmt.Sprintf("%s_%d", bridge, i); linkExists(port) {
			t.Errorf("interface %s is left", port)
		}
	}
	if linkExists(bridge) {
		t.Errorf("bridge %s is left", bridge)
	}
	if hostAddr != "" && hasAddr(t, hostAddr) {
		t.Errorf("address %s is left", hostAddr)
	}
}

// TestMachines: each machine has its own address in the bed's subnet and
// its loopback up; this namespace reaches every machine, and machines
// reach each other; Close removes the namespaces, the veth pairs, the
// bridge and its address here.
func TestMachines(t *testing.T) {
	b := testbed.New(t, 3)
	var ns []string
	seen := map[string]bool{}
	for i, m := range b.Machines() {
		if m.Index() != i || !b.Prefix().Contains(m.Addr()) || seen[m.Addr().String()] || m.Addr() == b.HostAddr() {
			t.Errorf("%v: index %d, address %s: want index %d and an address of its own in %s", m, m.Index(), m.Addr(), i, b.Prefix())
		}
		seen[m.Addr().String()] = true
		ns = append(ns, m.Namespace())
		if !namespaces(t)[m.Namespace()] {
			t.Errorf("%v: no namespace %s", m, m.Namespace())
		}
	}
	if !b.Prefix().Contains(b.HostAddr()) || !hasAddr(t, b.HostAddr().String()) {
		t.Errorf("this namespace's address on the bridge: %s, not on an interface here or outside %s", b.HostAddr(), b.Prefix())
	}

	// This namespace to each machine.
	var echoes []string
	for _, m := range b.Machines() {
		a := startEcho(t, m, m.Addr().String())
		echoes = append(echoes, a)
		c, err := net.DialTimeout("tcp", a, 10*time.Second)
		if err != nil {
			t.Fatalf("to %v: %v", m, err)
		}
		if err := roundTrip(c, bufio.NewReader(c), "ping "+m.Addr().String(), 10*time.Second); err != nil {
			t.Errorf("to %v: %v", m, err)
		}
		c.Close()
	}
	// Machine 0 to machine 2, which sees machine 0's address.
	got, err := dialFrom(t, b.Machine(0), echoes[2])
	if err != nil {
		t.Fatal(err)
	}
	if want := "hello from " + b.Machine(0).Addr().String() + ":"; !strings.HasPrefix(got, want) {
		t.Errorf("machine 0 to machine 2: %q, want %q…", got, want)
	}
	// Machine 1's loopback.
	lo := startEcho(t, b.Machine(1), "127.0.0.1")
	if got, err := dialFrom(t, b.Machine(1), lo); err != nil || !strings.HasPrefix(got, "hello from 127.0.0.1:") {
		t.Errorf("machine 1's loopback: %q, %v", got, err)
	}
	// This namespace's loopback is not machine 1's.
	if c, err := net.DialTimeout("tcp", lo, time.Second); err == nil {
		c.Close()
		t.Errorf("%s (machine 1's loopback) answers here", lo)
	}

	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	checkGone(t, ns, b.Bridge(), b.HostAddr().String())
	if err := b.Close(); err != nil {
		t.Errorf("closing twice: %v", err)
	}
}

// TestCutHeal: a cut link carries nothing either way, with no error on
// either side; healed, the same connection goes on and new ones open.
func TestCutHeal(t *testing.T) {
	b := testbed.New(t, 1)
	m := b.Machine(0)
	a := startEcho(t, m, m.Addr().String())
	c, err := net.DialTimeout("tcp", a, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if err := roundTrip(c, r, "before", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := m.Cut(); err != nil {
		t.Fatal(err)
	}
	// Nothing can prove a silence but a wait: 300 ms without an answer
	// (a veth pair answers in microseconds).
	err = roundTrip(c, r, "during", 300*time.Millisecond)
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("over a cut link: %v, want a timeout", err)
	}
	if c2, err := net.DialTimeout("tcp", a, 300*time.Millisecond); err == nil {
		c2.Close()
		t.Errorf("a new connection over a cut link opened")
	}
	if err := m.Heal(); err != nil {
		t.Fatal(err)
	}
	// The line sent during the cut arrives with TCP's next retransmission.
	c.SetDeadline(time.Now().Add(20 * time.Second))
	line, err := r.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "during" {
		t.Fatalf("after healing, the line sent during the cut: %q, %v", line, err)
	}
	if err := roundTrip(c, r, "after", 10*time.Second); err != nil {
		t.Errorf("after healing: %v", err)
	}
	c2, err := net.DialTimeout("tcp", a, 10*time.Second)
	if err != nil {
		t.Fatalf("a new connection after healing: %v", err)
	}
	c2.Close()
}

// TestSlowQdisc: Slow puts a rate on both ends of a machine's link, and
// Slow(0) takes it off (the rate's effect is measured by TestSlowLink).
func TestSlowQdisc(t *testing.T) {
	b := testbed.New(t, 1)
	m := b.Machine(0)
	qdisc := func(ns ...string) string {
		args := append(ns, "class", "show", "dev")
		if len(ns) == 0 {
			args = append(args, b.Bridge()+"_0")
		} else {
			args = append(args, "eth0")
		}
		out, err := exec.Command("tc", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("tc %v: %v: %s", args, err, out)
		}
		return string(out)
	}
	if err := m.Slow(20_000_000); err != nil {
		t.Fatal(err)
	}
	for _, ns := range [][]string{nil, {"-n", m.Namespace()}} {
		if out := qdisc(ns...); !strings.Contains(out, "htb 1:1") || !strings.Contains(out, "rate 20Mbit") {
			t.Errorf("tc %v class show: %q, want an htb class at 20Mbit", ns, out)
		}
	}
	if err := m.Slow(0); err != nil {
		t.Fatal(err)
	}
	for _, ns := range [][]string{nil, {"-n", m.Namespace()}} {
		if out := qdisc(ns...); strings.Contains(out, "htb") {
			t.Errorf("after Slow(0), tc %v class show: %q", ns, out)
		}
	}
	if err := m.Slow(0); err != nil {
		t.Errorf("Slow(0) on a link that is not slowed: %v", err)
	}
}

// TestHelperBed is run by TestCleanupAfterPanic and TestSweepAfterKill in
// a child process: it opens a bed, says what it made, and then panics,
// fails, or waits to be killed.
func TestHelperBed(t *testing.T) {
	mode := os.Getenv("TESTBED_HELPER")
	if !strings.HasPrefix(mode, "bed-") {
		t.Skip("a helper: TestCleanupAfterPanic and TestSweepAfterKill run it in a child process")
	}
	b := testbed.New(t, 2)
	d, err := b.Machine(0).StartDevice(self(t), []string{"-test.run=^$"})
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("bed %s %s %s %s %d\n", b.Machine(0).Namespace(), b.Machine(1).Namespace(), b.Bridge(), b.HostAddr(), d.PID)
	switch mode {
	case "bed-panic":
		panic("on purpose, to see the bed removed")
	case "bed-fail":
		t.Fatal("on purpose, to see the bed removed")
	case "bed-hold":
		select {}
	}
}

// bedChild runs TestHelperBed in mode in a child process; it returns what
// the bed made once the child said so, and the child.
func bedChild(t *testing.T, mode string) (ns []string, bridge, hostAddr string, devPID int, cmd *exec.Cmd) {
	t.Helper()
	cmd = exec.Command(self(t), "-test.run=^TestHelperBed$", "-test.v")
	cmd.Env = append(os.Environ(), "TESTBED_HELPER="+mode, "GOFFLOAD_REQUIRE_TESTBED=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(out)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
		var n0, n1 string
		if _, err := fmt.Sscanf(sc.Text(), "bed %s %s %s %s %d", &n0, &n1, &bridge, &hostAddr, &devPID); err == nil {
			go func() {
				for sc.Scan() {
				}
			}()
			return []string{n0, n1}, bridge, hostAddr, devPID, cmd
		}
	}
	t.Fatalf("the child did not say what its bed made; its output:\n%s", strings.Join(lines, "\n"))
	return
}

// TestCleanupAfterPanic: a test that panics or fails with a bed open
// leaves nothing behind (its device process included).
func TestCleanupAfterPanic(t *testing.T) {
	testbed.New(t, 1) // skips where a bed cannot run
	for _, mode := range []string{"bed-panic", "bed-fail"} {
		ns, bridge, hostAddr, devPID, cmd := bedChild(t, mode)
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("%s: the child ended with %v, want a failure", mode, err)
		}
		checkGone(t, ns, bridge, hostAddr)
		if err := syscall.Kill(devPID, 0); err == nil {
			t.Errorf("%s: the device process %d still runs", mode, devPID)
		}
	}
}

// TestSweepAfterKill: what a killed process's bed left behind is removed
// by the next bed that opens.
func TestSweepAfterKill(t *testing.T) {
	testbed.New(t, 1) // skips where a bed cannot run
	ns, bridge, _, _, cmd := bedChild(t, "bed-hold")
	cmd.Process.Kill()
	cmd.Wait()
	if have := namespaces(t); !have[ns[0]] || !have[ns[1]] || !linkExists(bridge) {
		t.Fatalf("a killed child's bed is already gone (%v, bridge %v): nothing to sweep", have, linkExists(bridge))
	}
	testbed.New(t, 1)
	// The new bed may take the same subnet: the bridge's address went with
	// the bridge.
	checkGone(t, ns, bridge, "")
}

// TestCleanupAtSignal: a process stopped by SIGTERM or SIGINT with a bed
// open removes it first, and then ends by that signal.
func TestCleanupAtSignal(t *testing.T) {
	testbed.New(t, 1) // skips where a bed cannot run
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		ns, bridge, hostAddr, _, cmd := bedChild(t, "bed-hold")
		cmd.Process.Signal(sig)
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != sig {
			t.Errorf("the child ended with %v, want the signal %v", err, sig)
		}
		checkGone(t, ns, bridge, hostAddr)
	}
}
