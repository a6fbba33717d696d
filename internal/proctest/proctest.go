// Package proctest helps tests that signal processes: it waits, by reading
// /proc (Linux), until a signal has taken effect.
package proctest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// WaitStopped waits until every thread of process pid is stopped, and
// fails the test if that takes more than 10 s. kill(2) returns before a
// SIGSTOP is taken: a thread that is running may still read, compute and
// write for a while (a device process's reader can answer a whole
// request), so a test that needs the process stopped waits for it.
func WaitStopped(t testing.TB, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		stopped, err := allStopped(pid)
		if err != nil {
			t.Fatal(err)
		}
		if stopped {
			return
		}
		runtime.Gosched()
	}
	t.Fatalf("process %d did not stop within 10s of SIGSTOP", pid)
}

// allStopped reports whether every thread of pid is stopped ('T', or 't'
// under a tracer).
func allStopped(pid int) (bool, error) {
	stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(stats) == 0 {
		return false, fmt.Errorf("process %d: no threads in /proc (%v)", pid, err)
	}
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			return false, err
		}
		// tid (comm) state ...: the state follows the last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || i+2 >= len(s) || (s[i+2] != 'T' && s[i+2] != 't') {
			return false, nil
		}
	}
	return true, nil
}

// WaitGone waits until process pid has exited (it is gone, or a zombie
// that its parent has not waited for yet), and fails the test if that
// takes more than limit.
func WaitGone(t testing.TB, pid int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if Gone(pid) {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("process %d still runs %v later", pid, limit)
}

// Gone reports whether process pid has exited: it is not in /proc, or it
// is a zombie ('Z'), or being reaped ('X').
func Gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && (s[i+2] == 'Z' || s[i+2] == 'X')
}
