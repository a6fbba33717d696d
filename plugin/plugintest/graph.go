package plugintest

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/goffload/offload/plugin"
)

// testGraphDefiner checks plugin.GraphDefiner, where the kind's devices have
// it. Device 0 takes a part of two lanes. One lane is a launch whose scalar
// is each run's. The other lane waits for its signal and copies the result
// within the device. Where device 1 takes a part too, that lane copies it to
// device 1 as well. Device 1's part waits for device 0's signal and adds to
// its copy. The graph runs three times with new scalars. Each run's event
// fires once its lanes are done, and the results are the runs'.
func (e *env) testGraphDefiner(t *testing.T) {
	d0, d1 := e.devs[0], e.devs[1]
	g0, ok := d0.(plugin.GraphDefiner)
	if !ok {
		t.Skip("the kind's devices are not plugin.GraphDefiners: the core replays graphs operation by operation")
	}
	g1, cross := d1.(plugin.GraphDefiner)
	q0, q1 := newQueue(t, d0), newQueue(t, d1)
	x, y, z := alloc(t, d0, 16), alloc(t, d0, 16), alloc(t, d1, 16)
	put(t, q0, x, make([]byte, 16))
	put(t, q0, y, make([]byte, 16))
	put(t, q1, z, make([]byte, 16))
	mustSync(t, q0)
	mustSync(t, q1)
	// The runs' arguments: device 0's launch (x += v), device 1's (z += w).
	args := []plugin.Arg{{Ptr: x, Len: 4}, {Ptr: x, Len: 4}, {Scalar: int32(0)}, {Ptr: z, Len: 4}, {Ptr: z, Len: 4}, {Scalar: int32(100)}}
	part0 := plugin.GraphPart{Key: 1 << 40, Lanes: 2, Ops: []plugin.GraphOp{
		{Op: plugin.GraphLaunch, Lane: 0, Kernel: kAddInt32, Args: args[0:3], ArgAt: 0},
		{Op: plugin.GraphSignal, Lane: 0, Signal: 0, To: []plugin.Device{d0}},
		{Op: plugin.GraphWait, Lane: 1, Signal: 0, From: d0},
		{Op: plugin.GraphExchange, Lane: 1, Dst: d0, DstPtr: y, Src: x, Size: 16},
	}}
	withCross := append(part0.Ops[:len(part0.Ops):len(part0.Ops)],
		plugin.GraphOp{Op: plugin.GraphExchange, Lane: 1, Dst: d1, DstPtr: z, Src: x, Size: 16},
		plugin.GraphOp{Op: plugin.GraphSignal, Lane: 1, Signal: 1, To: []plugin.Device{d1}})
	part1 := plugin.GraphPart{Key: 1 << 40, Lanes: 1, Ops: []plugin.GraphOp{
		{Op: plugin.GraphWait, Lane: 0, Signal: 1, From: d0},
		{Op: plugin.GraphLaunch, Lane: 0, Kernel: kAddInt32, Args: args[3:6], ArgAt: 3},
	}}
	var runs []plugin.GraphRunner
	if cross {
		r0, err := g0.DefineGraph(plugin.GraphPart{Key: part0.Key, Lanes: 2, Ops: withCross})
		if errors.Is(err, plugin.ErrUnsupported) {
			t.Logf("a part with an edge to device 1 refused: %v", err)
			cross = false
		} else if err != nil {
			t.Fatalf("DefineGraph on device 0: %v (a part the device cannot run must be refused with ErrUnsupported)", err)
		} else {
			r1, err := g1.DefineGraph(part1)
			switch {
			case errors.Is(err, plugin.ErrUnsupported):
				t.Logf("device 1 refused its part: %v", err)
				r0.Free()
				cross = false
			case err != nil:
				t.Fatalf("DefineGraph on device 1: %v", err)
			default:
				runs = []plugin.GraphRunner{r0, r1}
			}
		}
	}
	if !cross {
		r0, err := g0.DefineGraph(part0)
		if errors.Is(err, plugin.ErrUnsupported) {
			t.Skipf("device 0 refuses the part: %v", err)
		}
		if err != nil {
			t.Fatalf("DefineGraph: %v", err)
		}
		runs = []plugin.GraphRunner{r0}
	}
	for i := range 3 {
		args[2].Scalar = int32(i + 1)
		evs := make([]plugin.Event, len(runs))
		for j, r := range runs {
			ev, err := r.Run(uint64(i+1), args)
			if err != nil {
				t.Fatalf("run %d: Run on device %d: %v", i, j, err)
			}
			evs[j] = ev
		}
		for j, ev := range evs {
			if err := within(t, "the run's Event.Synchronize", ev.Synchronize); err != nil {
				t.Fatalf("run %d on device %d: %v", i, j, err)
			}
			ev.Close()
		}
	}
	int32At := func(b []byte) int32 { return int32(binary.LittleEndian.Uint32(b)) }
	if got := get(t, q0, y, 16); int32At(got) != 6 || int32At(got[12:]) != 6 {
		t.Errorf("device 0's copy after three runs adding 1, 2 and 3: %v, want 6s", got)
	}
	if cross {
		// z is x's copy plus 100 at each run: 6 + 100 at the last.
		if got := get(t, q1, z, 16); int32At(got) != 106 || int32At(got[12:]) != 106 {
			t.Errorf("device 1's copy after the runs: %v, want 106s", got)
		}
	}
	mustSync(t, q0)
	mustSync(t, q1)
	for _, r := range runs {
		if err := r.Free(); err != nil {
			t.Errorf("Free: %v", err)
		}
	}
}
