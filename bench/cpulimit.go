package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A cpuLimit holds a process to a share of the CPUs: it is moved into a
// cgroup of its own, made for it under the one it was in, whose CPU
// bandwidth controller lets it run share × period of every period
// (cgroup v2's cpu.max, v1's cpu.cfs_quota_us). It is the kernel's own
// throttle, whatever the process does, and it stays a ceiling: on a busy
// machine the process may get less. Close moves the process back and
// removes the cgroup; a cgroup a killed run left behind is removed by the
// next (limitCPU sweeps those whose maker is gone).
type cpuLimit struct {
	pid  int
	dir  string // the cgroup made for it
	back string // the cgroup.procs of the one it was in
}

// cpuLimitPrefix begins the names of the cgroups limitCPU makes; the
// maker's pid follows.
const cpuLimitPrefix = "goffload-bench-"

// cpuPeriod is the bandwidth controller's period for a share: as short
// as the controller allows (its quota at least 1 ms), so that a kernel of
// a few milliseconds runs at the share's speed rather than at full speed
// for the quota and then not at all for the rest of a long period.
func cpuPeriod(share float64) time.Duration {
	return max(2*time.Millisecond, time.Duration(float64(time.Millisecond)/share))
}

// cgroupCPU finds where pid's CPU bandwidth is controlled: the directory
// of its cgroup in the hierarchy with the cpu controller, and whether that
// is cgroup v2. It says why not where there is none it can use.
func cgroupCPU(pid int) (dir string, v2 bool, err error) {
	mounts, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", false, err
	}
	defer mounts.Close()
	var v1Mount, v2Mount string
	sc := bufio.NewScanner(mounts)
	for sc.Scan() {
		// 32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 || f[3] != "/" {
			continue
		}
		switch g[0] {
		case "cgroup":
			for _, o := range strings.Split(g[2], ",") {
				if o == "cpu" {
					v1Mount = f[4]
				}
			}
		case "cgroup2":
			v2Mount = f[4]
		}
	}
	if err := sc.Err(); err != nil {
		return "", false, err
	}
	own, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return "", false, err
	}
	// Lines "ID:CONTROLLERS:PATH"; v2's is "0::PATH".
	path := func(v2 bool) (string, bool) {
		for line := range strings.Lines(string(own)) {
			f := strings.SplitN(strings.TrimSpace(line), ":", 3)
			if len(f) != 3 {
				continue
			}
			if v2 && f[0] == "0" && f[1] == "" {
				return f[2], true
			}
			for _, c := range strings.Split(f[1], ",") {
				if !v2 && c == "cpu" {
					return f[2], true
				}
			}
		}
		return "", false
	}
	if v1Mount != "" {
		if p, ok := path(false); ok {
			return filepath.Join(v1Mount, p), false, nil
		}
	}
	if v2Mount == "" {
		return "", false, errors.New("no cgroup hierarchy with the cpu controller is mounted")
	}
	p, ok := path(true)
	if !ok {
		return "", false, fmt.Errorf("process %d is in no cgroup v2 group", pid)
	}
	dir = filepath.Join(v2Mount, p)
	ctl, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return "", false, err
	}
	if !strings.Contains(" "+strings.TrimSpace(string(ctl))+" ", " cpu ") {
		return "", false, fmt.Errorf("the cpu controller is not enabled for the groups under %s (its cgroup.subtree_control is %q)", dir, strings.TrimSpace(string(ctl)))
	}
	return dir, true, nil
}

// limitCPU holds process pid to share of one CPU (more than 0, at most
// the machine's CPUs: 1.5 is a CPU and a half) until Close. It needs write
// access to the cgroup hierarchy (root, as CI runs).
func limitCPU(pid int, share float64) (l *cpuLimit, err error) {
	if !(share > 0 && share <= float64(runtime.NumCPU())) {
		return nil, fmt.Errorf("a CPU share of %g: want more than 0, at most the %d CPUs", share, runtime.NumCPU())
	}
	parent, v2, err := cgroupCPU(pid)
	if err != nil {
		return nil, fmt.Errorf("holding process %d to %g of a CPU: %w", pid, share, err)
	}
	sweepCPULimits(parent)
	dir, err := os.MkdirTemp(parent, fmt.Sprintf("%s%d-", cpuLimitPrefix, os.Getpid()))
	if err != nil {
		return nil, fmt.Errorf("holding process %d to %g of a CPU: %w", pid, share, err)
	}
	l = &cpuLimit{pid: pid, dir: dir, back: filepath.Join(parent, "cgroup.procs")}
	defer func() {
		if err != nil {
			err = errors.Join(err, l.Close())
		}
	}()
	period := cpuPeriod(share).Microseconds()
	quota := max(int64(share*float64(period)), 1000) // the controller's least
	if v2 {
		err = os.WriteFile(filepath.Join(dir, "cpu.max"), fmt.Appendf(nil, "%d %d", quota, period), 0)
	} else if err = os.WriteFile(filepath.Join(dir, "cpu.cfs_period_us"), fmt.Append(nil, period), 0); err == nil {
		err = os.WriteFile(filepath.Join(dir, "cpu.cfs_quota_us"), fmt.Append(nil, quota), 0)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, "cgroup.procs"), fmt.Append(nil, pid), 0)
	}
	if err != nil {
		return nil, fmt.Errorf("holding process %d to %g of a CPU with cgroup %s: %w", pid, share, dir, err)
	}
	return l, nil
}

// Close moves the process back to its cgroup (if it still runs) and
// removes the one made for it.
func (l *cpuLimit) Close() error {
	var errs []error
	procs, err := os.ReadFile(filepath.Join(l.dir, "cgroup.procs"))
	if err != nil && !os.IsNotExist(err) {
		errs = append(errs, err)
	}
	for _, p := range strings.Fields(string(procs)) {
		if err := os.WriteFile(l.back, []byte(p), 0); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("moving process %s back to %s: %w", p, filepath.Dir(l.back), err))
		}
	}
	if err := removeCgroup(l.dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// removeCgroup removes an empty cgroup. A process that just ended may
// leave it busy for a moment (its exit not yet finished); it tries for a
// second before it gives up.
func removeCgroup(dir string) error {
	deadline := time.Now().Add(time.Second)
	for {
		err := syscall.Rmdir(dir)
		if err == nil || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("removing cgroup %s: %w", dir, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sweepCPULimits removes the cgroups under parent that limitCPU made in
// runs that are gone (killed before their Close): their processes are
// moved back to parent first.
func sweepCPULimits(parent string) {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), cpuLimitPrefix)
		if !e.IsDir() || !ok {
			continue
		}
		maker, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(maker)
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue // not one of these, or its maker still runs
		}
		l := &cpuLimit{dir: filepath.Join(parent, e.Name()), back: filepath.Join(parent, "cgroup.procs")}
		l.Close() // best effort: what cannot be removed stays for the next sweep
	}
}
