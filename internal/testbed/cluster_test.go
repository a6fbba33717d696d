package testbed_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cluster runs scripts/cluster with args (on the cluster id, when it is
// not empty) and returns its output; status 77 (it cannot run here) skips
// t.
func cluster(t *testing.T, id string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(filepath.Join("..", "..", "scripts", "cluster"), args...)
	cmd.Env = os.Environ()
	if id != "" {
		cmd.Env = append(cmd.Env, "GOFFLOAD_CLUSTER="+id)
	}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 77 && os.Getenv("GOFFLOAD_REQUIRE_TESTBED") != "1" {
		t.Skipf("scripts/cluster %s: %s", strings.Join(args, " "), out)
	}
	if err != nil {
		return string(out), fmt.Errorf("scripts/cluster %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// TestClusterScript: scripts/cluster makes machines that run commands in
// their own network, cuts, heals and slows their links, and removes them
// with what runs in them; `with` removes them however its command ends.
func TestClusterScript(t *testing.T) {
	out, err := cluster(t, "", "up", "2")
	if err != nil {
		t.Fatal(err)
	}
	var id, net24 string
	var n int
	if _, err := fmt.Sscanf(out, "cluster %s %d machines on %s", &id, &n, &net24); err != nil || n != 2 {
		t.Fatalf("up 2 said %q (%v)", out, err)
	}
	id = strings.TrimSuffix(id, ":")
	downed := false
	t.Cleanup(func() {
		if !downed {
			cluster(t, id, "down")
		}
	})
	must := func(args ...string) string {
		t.Helper()
		out, err := cluster(t, id, args...)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	addr := must("addr", "1")
	if host := must("addr", "host"); !strings.HasPrefix(net24, strings.TrimSuffix(host, "254")) || !strings.HasSuffix(host, ".254") {
		t.Errorf("addr host: %q, want .254 of %s", host, net24)
	}
	if out := must("list"); !strings.Contains(out, "cluster "+id) || !strings.Contains(out, "machine 1: "+addr) {
		t.Errorf("list: %q", out)
	}

	// An echo server in machine 1, reached from here.
	echo := exec.Command(filepath.Join("..", "..", "scripts", "cluster"), "run", "1", self(t), "-test.run=^$")
	echo.Env = append(os.Environ(), "GOFFLOAD_CLUSTER="+id, "TESTBED_HELPER=echo", "TESTBED_ADDR="+net.JoinHostPort(addr, "0"))
	pipe, err := echo.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := echo.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { echo.Process.Kill(); echo.Wait() })
	sc := bufio.NewScanner(pipe)
	var at string
	for sc.Scan() {
		if a, ok := strings.CutPrefix(sc.Text(), "listening on "); ok {
			at = a
			break
		}
	}
	go io.Copy(io.Discard, pipe)
	if !strings.HasPrefix(at, addr+":") {
		t.Fatalf("the echo server run in machine 1 listens on %q, want %s:PORT", at, addr)
	}
	c, err := net.DialTimeout("tcp", at, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := roundTrip(c, bufio.NewReader(c), "via scripts/cluster", 10*time.Second); err != nil {
		t.Fatal(err)
	}

	must("cut", "1")
	if c2, err := net.DialTimeout("tcp", at, 300*time.Millisecond); err == nil {
		c2.Close()
		t.Errorf("a connection over a cut link opened")
	}
	must("heal", "1")
	c2, err := net.DialTimeout("tcp", at, 10*time.Second)
	if err != nil {
		t.Fatalf("after heal: %v", err)
	}
	c2.Close()

	must("slow", "1", "10mbit")
	if out, _ := exec.Command("tc", "class", "show", "dev", "gcl"+id+"_1").CombinedOutput(); !strings.Contains(string(out), "rate 10Mbit") {
		t.Errorf("after slow 1 10mbit: %q", out)
	}
	must("slow", "1", "off")
	if out, _ := exec.Command("tc", "class", "show", "dev", "gcl"+id+"_1").CombinedOutput(); strings.Contains(string(out), "htb") {
		t.Errorf("after slow 1 off: %q", out)
	}
	if _, err := cluster(t, id, "run", "7", "true"); err == nil || !strings.Contains(err.Error(), "no machine 7") {
		t.Errorf("run 7 on two machines: %v", err)
	}

	must("down")
	downed = true
	if err := echo.Wait(); err == nil {
		t.Errorf("the echo server in machine 1 outlived down")
	}
	have := namespaces(t)
	for i := range 2 {
		if ns := fmt.Sprintf("goffload-cl-%s-%d", id, i); have[ns] {
			t.Errorf("namespace %s is left after down", ns)
		}
	}
	if linkExists("gcl" + id) {
		t.Errorf("bridge gcl%s is left after down", id)
	}
}

// TestClusterWith: `with` runs its command on a fresh cluster, passes on
// its exit status, and removes the cluster when it ends, also when it is
// ended by a signal.
func TestClusterWith(t *testing.T) {
	out, err := cluster(t, "", "with", "1", "bash", "-c", `echo "id $GOFFLOAD_CLUSTER"; exit 3`)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Errorf("with 1 (exit 3): %v", err)
	}
	var id string
	for line := range strings.Lines(out) {
		fmt.Sscanf(line, "id %s", &id)
	}
	if id == "" {
		t.Fatalf("with's command did not get GOFFLOAD_CLUSTER: %q", out)
	}
	if have := namespaces(t); have["goffload-cl-"+id+"-0"] || linkExists("gcl"+id) {
		t.Errorf("cluster %s is left after with's command ended", id)
	}

	// Ended by SIGTERM while its command runs.
	cmd := exec.Command(filepath.Join("..", "..", "scripts", "cluster"), "with", "1", "bash", "-c", `echo "id $GOFFLOAD_CLUSTER"; exec sleep 60`)
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	sc := bufio.NewScanner(pipe)
	id = ""
	for id == "" && sc.Scan() {
		fmt.Sscanf(sc.Text(), "id %s", &id)
	}
	if id == "" {
		t.Fatal("with's command did not start")
	}
	cmd.Process.Signal(syscall.SIGTERM)
	err = cmd.Wait()
	if !errors.As(err, &ee) || ee.ExitCode() != 143 {
		t.Errorf("with, sent SIGTERM: %v, want exit status 143", err)
	}
	if have := namespaces(t); have["goffload-cl-"+id+"-0"] || linkExists("gcl"+id) {
		t.Errorf("cluster %s is left after with got SIGTERM", id)
	}
}
