package remote_test

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
)

// TestDevicesOutliveStartingThread: devices started on a goroutine that
// locked its thread and returned without unlocking (Go then ends the
// thread) still work afterwards. Pdeathsig follows the thread that forked,
// not the process: the devices were killed with it (issue 47).
func TestDevicesOutliveStartingThread(t *testing.T) {
	k, _ := plugin.LookupKind("local")
	type started struct {
		devs []plugin.Device
		tid  int
		err  error
	}
	ch := make(chan started, 1)
	go onLockedThread(func() {
		devs, err := k.Open("2")
		for i, d := range devs {
			if err == nil {
				err = d.Load(entries.Current(), i)
			}
		}
		ch <- started{devs, syscall.Gettid(), err}
	})
	s := <-ch
	t.Cleanup(func() {
		for _, d := range s.devs {
			d.Close()
		}
	})
	if s.err != nil {
		t.Fatal(s.err)
	}
	task := fmt.Sprintf("/proc/self/task/%d", s.tid)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(task); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("thread %d that started the devices did not end within 10s (pid %d)", s.tid, os.Getpid())
		}
		runtime.Gosched()
	}
	for i, d := range s.devs {
		q, err := d.NewQueue()
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Launch(nopK, nil); err != nil {
			t.Fatalf("device %d after the thread that started it ended: %v", i, err)
		}
		if err := q.Synchronize(); err != nil {
			t.Fatalf("device %d after the thread that started it ended: %v", i, err)
		}
		q.Close()
	}
}

// onLockedThread runs f on a goroutine that locks its thread and returns
// without unlocking it, so that Go ends the thread. Not on the main thread,
// which Go never ends: a goroutine that finds itself there keeps it while
// another tries.
func onLockedThread(f func()) {
	runtime.LockOSThread() // never unlocked off the main thread
	if syscall.Gettid() != syscall.Getpid() {
		f()
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		onLockedThread(f)
	}()
	<-done
	runtime.UnlockOSThread()
}
