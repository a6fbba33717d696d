package remote_test

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugin/plugintest"
	"github.com/goffload/offload/plugins/remote"
)

// shmLinksK writes the number of shared-memory links of the device process
// it runs in.
var shmLinksK = mustKernel("remotetest.shmlinks", func(out []int64) { out[0] = remote.ShmLinks() })

// TestLocalLinks: local devices link to the host and to each other through
// shared memory by default, and through their sockets with
// GOFFLOAD_LOCAL_LINK=socket; the conformance suite passes both ways.
func TestLocalLinks(t *testing.T) {
	for _, c := range []struct {
		link string
		want int64 // shared-memory links in device 0 after an exchange with device 1
	}{{"shm", 2}, {"socket", 0}} {
		t.Run(c.link, func(t *testing.T) {
			t.Setenv("GOFFLOAD_LOCAL_LINK", c.link)
			devs := openLocal(t, 2)
			p0, _ := devs[0].Alloc(8)
			p1, _ := devs[1].Alloc(8)
			q0, _ := devs[0].NewQueue()
			q0.Submit(p0, []byte{1, 2, 3, 4, 5, 6, 7, 8})
			if err := q0.(plugin.Exchanger).Exchange(devs[1], p1, p0, 8); err != nil {
				t.Fatal(err)
			}
			q0.Launch(shmLinksK, []plugin.Arg{{Ptr: p0, Len: 1}})
			out := make([]byte, 8)
			q0.Retrieve(out, p0)
			if err := q0.Synchronize(); err != nil {
				t.Fatal(err)
			}
			if got := int64(out[0]) | int64(out[1])<<8; got != c.want {
				t.Fatalf("GOFFLOAD_LOCAL_LINK=%s: device 0 has %d shared-memory links, want %d (to the host and to device 1, or none)", c.link, got, c.want)
			}
		})
		t.Run(c.link+"/conformance", func(t *testing.T) {
			t.Setenv("GOFFLOAD_LOCAL_LINK", c.link)
			plugintest.Run(t, func(t *testing.T) []plugin.Device {
				k, _ := plugin.LookupKind("local")
				devs, err := k.Open("2")
				if err != nil {
					t.Fatal(err)
				}
				return devs
			})
		})
	}
}

// TestDeviceStoppedMidTransfer stops (SIGSTOP) a device process while 256
// MiB stream to it and while 256 MiB stream back, on both links: the copy
// fails with the device's silence after GOFFLOAD_DEVICE_TIMEOUT (a writer
// waiting for room in a ring the stopped reader never empties, a reader
// waiting for bytes that never come), the other device goes on.
func TestDeviceStoppedMidTransfer(t *testing.T) {
	const size = 256 << 20
	buf := make([]byte, size)
	for _, link := range []string{"shm", "socket"} {
		for _, dir := range []string{"submit", "retrieve"} {
			t.Run(link+"/"+dir, func(t *testing.T) {
				t.Setenv("GOFFLOAD_LOCAL_LINK", link)
				t.Setenv("GOFFLOAD_DEVICE_TIMEOUT", "1s")
				devs, q := startBigCopy(t, dir, buf)
				pid := devs[0].Info().PID
				syscall.Kill(pid, syscall.SIGSTOP)
				defer syscall.Kill(pid, syscall.SIGCONT)
				done := make(chan error, 1)
				go func() { done <- q.Synchronize() }()
				var err error
				select {
				case err = <-done:
				case <-time.After(time.Minute):
					t.Fatal("a copy to a stopped device hangs")
				}
				if !errors.Is(err, plugin.ErrDeviceLost) && err != nil {
					t.Fatalf("copy to a stopped device: %v, want ErrDeviceLost", err)
				}
				if err == nil {
					// The copy was done before the stop landed: the
					// next operation must still find the device lost.
					q.Launch(nopK, nil)
					err = q.Synchronize()
				}
				if !errors.Is(err, plugin.ErrDeviceLost) || !strings.Contains(err.Error(), "nothing heard") {
					t.Fatalf("after SIGSTOP: %v, want ErrDeviceLost for the silence", err)
				}
				checkAlive(t, devs[1])
			})
		}
	}
}
