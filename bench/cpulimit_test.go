package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// startChild starts sh running script and kills it at the end of the
// test.
func startChild(t *testing.T, script string) *exec.Cmd {
	t.Helper()
	c := exec.Command("sh", "-c", script)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Process.Kill()
		c.Wait()
	})
	return c
}

// cpuLimitable says why limitCPU cannot be used here ("" where it can):
// it holds a sleeping child to half a CPU and lets it go.
func cpuLimitable(t *testing.T) string {
	t.Helper()
	c := startChild(t, "exec sleep 60")
	l, err := limitCPU(c.Process.Pid, 0.5)
	if err != nil {
		return err.Error()
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return ""
}

// inCgroup reports whether process pid is in cgroup dir.
func inCgroup(t *testing.T, pid int, dir string) bool {
	t.Helper()
	procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		if os.IsNotExist(err) {
			return false
		}
		t.Fatal(err)
	}
	return strings.Contains("\n"+string(procs), "\n"+strconv.Itoa(pid)+"\n")
}

// throttled is cpu.stat's nr_throttled of cgroup dir: how many periods
// the controller held its processes back in.
func throttled(t *testing.T, dir string) int {
	t.Helper()
	stat, err := os.ReadFile(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(stat)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "nr_throttled "); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("cpu.stat: %q", line)
			}
			return n
		}
	}
	t.Fatalf("cpu.stat of %s has no nr_throttled:\n%s", dir, stat)
	return 0
}

// TestLimitCPU: a spinning child held to a tenth of a CPU is moved into a
// cgroup of its own, with the quota, where the controller holds it back
// period after period; Close moves it back and removes the cgroup. A
// cgroup left by a run that is gone is swept by the next limitCPU, one
// of a run that still runs is not. Bad shares are refused.
func TestLimitCPU(t *testing.T) {
	if why := cpuLimitable(t); why != "" {
		t.Skipf("no CPU limits here: %s", why)
	}
	for _, share := range []float64{0, -1, float64(runtime.NumCPU()) + 0.5} {
		if _, err := limitCPU(os.Getpid(), share); err == nil {
			t.Errorf("share %g: no error", share)
		}
	}
	spin := startChild(t, "while :; do :; done")
	pid := spin.Process.Pid
	l, err := limitCPU(pid, 0.1)
	if err != nil {
		t.Fatal(err)
	}
	if !inCgroup(t, pid, l.dir) {
		t.Fatalf("child %d is not in %s", pid, l.dir)
	}
	// The controller holds it back: wait for its count of periods held
	// back to grow (a tenth of a CPU: 9 ms of every 10 ms).
	deadline := time.Now().Add(30 * time.Second)
	for throttled(t, l.dir) < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("a spinning child held to a tenth of a CPU: throttled in %d periods after 30 s", throttled(t, l.dir))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(l.dir); !os.IsNotExist(err) {
		t.Errorf("cgroup %s after Close: %v, want it gone", l.dir, err)
	}
	if !inCgroup(t, pid, filepath.Dir(l.back)) {
		t.Errorf("child %d is not back in %s", pid, filepath.Dir(l.back))
	}

	// A cgroup of a run that is gone (a process that has ended: this
	// one's child, waited for) with a process left in it, and one of a
	// run that still runs (this test's parent). The cleanups remove them
	// (after the children end) if the sweep did not.
	parent := filepath.Dir(l.dir)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(parent, fmt.Sprintf("%s%d-x", cpuLimitPrefix, gone.Process.Pid))
	live := filepath.Join(parent, fmt.Sprintf("%s%d-x", cpuLimitPrefix, os.Getppid()))
	for _, dir := range []string{stale, live} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { removeCgroup(dir) })
	}
	left := startChild(t, "exec sleep 60").Process.Pid
	if err := os.WriteFile(filepath.Join(stale, "cgroup.procs"), fmt.Append(nil, left), 0); err != nil {
		t.Fatal(err)
	}
	l, err = limitCPU(pid, 0.5)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the cgroup of a run that is gone, %s: %v, want it swept", stale, err)
	}
	if !inCgroup(t, left, parent) {
		t.Errorf("process %d, left in the swept cgroup, is not back in %s", left, parent)
	}
	if _, err := os.Stat(live); err != nil {
		t.Errorf("the cgroup of a run that still runs, %s: %v, want it kept", live, err)
	}
	if !inCgroup(t, pid, l.dir) {
		t.Errorf("child %d is not in %s", pid, l.dir)
	}
}
