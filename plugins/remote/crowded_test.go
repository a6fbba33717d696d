package remote_test

import (
	"encoding/binary"
	"runtime"
	"testing"
	"time"

	"github.com/goffload/offload/internal/waitpoll"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/remote"
)

// crowdedK writes 1 if the device process it runs in was told the machine
// is crowded, else 0.
var crowdedK = mustKernel("remotetest.crowded", func(out []int64) {
	out[0] = 0
	if waitpoll.Crowded() {
		out[0] = 1
	}
})

// TestCrowded: a host whose local devices and itself outnumber the cores
// is crowded (its pollers yield their core, waitpoll.Pause), and so are
// the devices it starts; with a core each, none is; when the devices end,
// the host is no longer crowded.
func TestCrowded(t *testing.T) {
	for _, n := range []int{1, runtime.NumCPU()} {
		waitGone(t)
		want := n+1 > runtime.NumCPU()
		devs := openLocal(t, n)
		if got := waitpoll.Crowded(); got != want {
			t.Errorf("local:%d on %d cores: host crowded = %v, want %v", n, runtime.NumCPU(), got, want)
		}
		for i, d := range devs {
			p, err := d.Alloc(8)
			if err != nil {
				t.Fatal(err)
			}
			q, _ := d.NewQueue()
			q.Launch(crowdedK, []plugin.Arg{{Ptr: p, Len: 1}})
			out := make([]byte, 8)
			q.Retrieve(out, p)
			if err := q.Synchronize(); err != nil {
				t.Fatal(err)
			}
			if got := binary.LittleEndian.Uint64(out) == 1; got != want {
				t.Errorf("local:%d on %d cores: device %d crowded = %v, want %v", n, runtime.NumCPU(), i, got, want)
			}
		}
		for _, d := range devs {
			d.Close()
		}
	}
	waitGone(t)
	if waitpoll.Crowded() {
		t.Error("host still crowded after its devices ended")
	}
}

// waitGone waits until the device processes of earlier tests have ended.
func waitGone(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for remote.LocalProcs() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d device processes still run after 10 s", remote.LocalProcs())
		}
		time.Sleep(time.Millisecond)
	}
}
