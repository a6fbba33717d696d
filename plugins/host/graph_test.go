package host_test

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/host"
)

// other is a device of another kind, for the parts a host device refuses.
type other struct{ plugin.Device }

func (other) Info() plugin.Info { return plugin.Info{Kind: "other"} }

func kernelNamed(t *testing.T, name string) plugin.Kernel {
	t.Helper()
	for _, k := range entries.Current().Kernels {
		if k.Name() == name {
			return k
		}
	}
	t.Fatalf("%s is not registered", name)
	return nil
}

// TestDefineGraphRefuses: a host device refuses with ErrUnsupported a part
// whose signals come from or go to a device of another kind, or whose copy
// goes to one (host devices signal each other in memory). A lane out of range
// and a kernel of no image it loaded are errors of another kind. Refused parts
// leave no graph defined.
func TestDefineGraphRefuses(t *testing.T) {
	d := newLoaded(t, testConfig)
	gd := d.(plugin.GraphDefiner)
	x, err := d.Alloc(16)
	if err != nil {
		t.Fatal(err)
	}
	o := other{}
	before := host.GraphsDefined()
	for _, c := range []struct {
		name        string
		op          plugin.GraphOp
		unsupported bool
	}{
		{"wait from another kind", plugin.GraphOp{Op: plugin.GraphWait, From: o}, true},
		{"signal to another kind", plugin.GraphOp{Op: plugin.GraphSignal, To: []plugin.Device{d, o}}, true},
		{"copy to another kind", plugin.GraphOp{Op: plugin.GraphExchange, Dst: o, Src: x, Size: 16}, true},
		{"lane out of range", plugin.GraphOp{Op: plugin.GraphSignal, Lane: 1, To: []plugin.Device{d}}, false},
		{"copy out of the source", plugin.GraphOp{Op: plugin.GraphExchange, Dst: d, DstPtr: x, Src: x, Size: 32}, false},
	} {
		_, err := gd.DefineGraph(plugin.GraphPart{Key: 7 << 40, Lanes: 1, Ops: []plugin.GraphOp{c.op}})
		if err == nil || errors.Is(err, plugin.ErrUnsupported) != c.unsupported {
			t.Errorf("%s: DefineGraph: %v, want an error (ErrUnsupported: %v)", c.name, err, c.unsupported)
		}
	}
	if got := host.GraphsDefined(); got != before {
		t.Errorf("after refused parts: %d graphs defined, want %d", got, before)
	}
}

// TestGraphPartLostDevice: a run of a part on a device abandoned (Stop gave
// up on it) fails with ErrDeviceLost without running its kernel, and still
// fires its signal, so the part of another device that waits for it ends
// with the error too instead of hanging. A part of the same graph on a live
// device runs on.
func TestGraphPartLostDevice(t *testing.T) {
	d0, d1 := newLoaded(t, testConfig), newLoaded(t, testConfig)
	k := kernelNamed(t, "plugintest.addInt64")
	x0, err := d0.Alloc(8)
	if err != nil {
		t.Fatal(err)
	}
	x1, err := d1.Alloc(8)
	if err != nil {
		t.Fatal(err)
	}
	args := []plugin.Arg{{Ptr: x0, Len: 1}, {Scalar: int64(1)}, {Ptr: x1, Len: 1}, {Scalar: int64(1)}}
	const key = 8 << 40
	r0, err := d0.(plugin.GraphDefiner).DefineGraph(plugin.GraphPart{Key: key, Lanes: 1, Ops: []plugin.GraphOp{
		{Op: plugin.GraphLaunch, Kernel: k, Args: args[0:2], ArgAt: 0},
		{Op: plugin.GraphSignal, Signal: 0, To: []plugin.Device{d1}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	r1, err := d1.(plugin.GraphDefiner).DefineGraph(plugin.GraphPart{Key: key, Lanes: 1, Ops: []plugin.GraphOp{
		{Op: plugin.GraphWait, Signal: 0, From: d0},
		{Op: plugin.GraphLaunch, Kernel: k, Args: args[2:4], ArgAt: 2},
	}})
	if err != nil {
		t.Fatal(err)
	}
	run := func(gen uint64) (error, error) {
		var errs [2]error
		for i, r := range []plugin.GraphRunner{r0, r1} {
			ev, err := r.Run(gen, args)
			if err != nil {
				t.Fatalf("Run %d on device %d: %v", gen, i, err)
			}
			done := make(chan error, 1)
			go func() { done <- ev.Synchronize() }()
			select {
			case errs[i] = <-done:
			case <-time.After(10 * time.Second):
				t.Fatalf("run %d on device %d: no end in 10 s", gen, i)
			}
		}
		return errs[0], errs[1]
	}
	if e0, e1 := run(1); e0 != nil || e1 != nil {
		t.Fatalf("a run on live devices: %v, %v", e0, e1)
	}
	d0.(plugin.Abandoner).Abandon(errors.New("a test gave up on it"))
	e0, e1 := run(2)
	if !errors.Is(e0, plugin.ErrDeviceLost) || !errors.Is(e1, plugin.ErrDeviceLost) {
		t.Fatalf("a run with device 0 abandoned: %v, %v; want ErrDeviceLost from both (device 1's by the signal)", e0, e1)
	}
	q, err := d1.NewQueue()
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	got := make([]byte, 8)
	if err := q.Retrieve(got, x1); err != nil {
		t.Fatal(err)
	}
	if err := q.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if v := binary.LittleEndian.Uint64(got); v != 1 {
		t.Errorf("device 1's x after a good run and one that waited for a lost device: %d, want 1", v)
	}
	for _, r := range []plugin.GraphRunner{r0, r1} {
		if err := r.Free(); err != nil {
			t.Errorf("Free: %v", err)
		}
		if err := r.Free(); !errors.Is(err, plugin.ErrBadHandle) {
			t.Errorf("a second Free: %v, want ErrBadHandle", err)
		}
	}
}
