package engine

import (
	"encoding/binary"
	"errors"
	"net"
	"os"
	"testing"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/remote/stream"
)

var graphAddK, _ = entries.RegisterKernel("remote.graph.add", func(v int32, x []int32) {
	if v < 0 {
		panic("a negative scalar")
	}
	for i := range x {
		x[i] += v
	}
})

// sessionDeviceOf is sessionDevice that returns the session too.
func sessionDeviceOf(t *testing.T) (*Session, *Device) {
	t.Helper()
	host, dev := socketPair(t)
	img := entries.Current()
	s := newSession(newLink(dev), img, 1)
	go s.Serve()
	d := newDevice(newLink(host), "local", "session device")
	t.Cleanup(func() { d.Close() })
	if err := d.Load(img, 0); err != nil {
		t.Fatal(err)
	}
	return s, d
}

// TestGraphPartOnSession defines a part on a device session (a launch on
// one lane, its signal waited for on the other, which copies the result
// within the device) and runs it three times with new scalars: each run
// is one frame the session reads, the results are the runs', and the
// session forgets the part once it is freed.
func TestGraphPartOnSession(t *testing.T) {
	s, d := sessionDeviceOf(t)
	x, err := d.Alloc(16)
	if err != nil {
		t.Fatal(err)
	}
	y, _ := d.Alloc(16)
	q, _ := d.NewQueue()
	defer q.Close()
	zero := make([]byte, 16)
	q.Submit(x, zero)
	q.Submit(y, zero)
	if err := q.Synchronize(); err != nil {
		t.Fatal(err)
	}
	args := []plugin.Arg{{Scalar: int32(0)}, {Ptr: x, Len: 4}}
	run, err := d.DefineGraph(plugin.GraphPart{Key: 7, Lanes: 2, Ops: []plugin.GraphOp{
		{Op: plugin.GraphLaunch, Lane: 0, Kernel: graphAddK, Args: args, ArgAt: 0},
		{Op: plugin.GraphSignal, Lane: 0, Signal: 0, To: []plugin.Device{d}},
		{Op: plugin.GraphWait, Lane: 1, Signal: 0, From: d},
		{Op: plugin.GraphExchange, Lane: 1, Dst: d, DstPtr: y, Src: x, Size: 16},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		args[0].Scalar = int32(i + 1)
		before := s.l.reads.Load()
		ev, err := run.Run(uint64(i+1), args)
		if err != nil {
			t.Fatal(err)
		}
		if err := ev.Synchronize(); err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		ev.Close()
		reads := s.l.reads.Load() - before
		if i > 0 && reads != 1 { // the first comes after the GraphDef
			t.Errorf("run %d: the session read %d frames, want 1", i, reads)
		}
	}
	got := make([]byte, 16)
	q.Retrieve(got, y)
	if err := q.Synchronize(); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if v := int32(binary.LittleEndian.Uint32(got[4*i:])); v != 6 {
			t.Fatalf("y = %v, want 6s (1+2+3)", got)
		}
	}
	// A run whose kernel fails fails, and the next one runs afresh.
	for i, v := range []int32{-1, 0} {
		args[0].Scalar = v
		ev, err := run.Run(uint64(4+i), args)
		if err != nil {
			t.Fatal(err)
		}
		err = ev.Synchronize()
		ev.Close()
		if v < 0 && !errors.Is(err, plugin.ErrKernelFailed) {
			t.Errorf("a run whose kernel panics: %v, want ErrKernelFailed", err)
		}
		if v == 0 && err != nil {
			t.Errorf("the run after a failed one: %v", err)
		}
	}
	if n := s.GraphParts(); n != 1 {
		t.Fatalf("%d parts on the session, want 1", n)
	}
	run.Free()
	if _, err := d.call(infoReq); err != nil { // the session read the free before it
		t.Fatal(err)
	}
	if n := s.GraphParts(); n != 0 {
		t.Errorf("%d parts on the session after the free, want 0", n)
	}
}

// pairIntro introduces two sessions of this process to each other over a
// socket pair, as a device process's Introducer does.
type pairIntro struct {
	sess map[*Device]*Session
	done bool
}

func (pi *pairIntro) Introduce(a, b *Device) error {
	if pi.done {
		return nil
	}
	pi.done = true
	fds, err := stream.SocketPair()
	if err != nil {
		return err
	}
	conns := [2]net.Conn{}
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "peer")
		conns[i], err = net.FileConn(f)
		f.Close()
		if err != nil {
			return err
		}
	}
	pi.sess[a].AddPeer(b.num, stream.New(conns[0]))
	pi.sess[b].AddPeer(a.num, stream.New(conns[1]))
	return nil
}

func (pi *pairIntro) Forget(*Device) {}

// TestGraphPartsSignalPeers runs a graph over two sessions linked as
// peers: device 0 adds to x and copies it to device 1, whose part waits
// for device 0's signal and adds to its copy; then device 0 waits for
// device 1's signal.
func TestGraphPartsSignalPeers(t *testing.T) {
	s0, d0 := sessionDeviceNum(t, 0)
	s1, d1 := sessionDeviceNum(t, 1)
	pi := &pairIntro{sess: map[*Device]*Session{d0: s0, d1: s1}}
	d0.Intro, d1.Intro = pi, pi
	x0, _ := d0.Alloc(16)
	x1, _ := d1.Alloc(16)
	for _, c := range []struct {
		d *Device
		p plugin.Ptr
	}{{d0, x0}, {d1, x1}} {
		q, _ := c.d.NewQueue()
		q.Submit(c.p, make([]byte, 16))
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
	}
	args := []plugin.Arg{{Scalar: int32(0)}, {Ptr: x0, Len: 4}, {Scalar: int32(100)}, {Ptr: x1, Len: 4}}
	r0, err := d0.DefineGraph(plugin.GraphPart{Key: 9, Lanes: 1, Ops: []plugin.GraphOp{
		{Op: plugin.GraphLaunch, Kernel: graphAddK, Args: args[0:2], ArgAt: 0},
		{Op: plugin.GraphExchange, Dst: d1, DstPtr: x1, Src: x0, Size: 16},
		{Op: plugin.GraphSignal, Signal: 1, To: []plugin.Device{d1}},
		{Op: plugin.GraphWait, Signal: 3, From: d1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	r1, err := d1.DefineGraph(plugin.GraphPart{Key: 9, Lanes: 1, Ops: []plugin.GraphOp{
		{Op: plugin.GraphWait, Signal: 1, From: d0},
		{Op: plugin.GraphLaunch, Kernel: graphAddK, Args: args[2:4], ArgAt: 2},
		{Op: plugin.GraphSignal, Signal: 3, To: []plugin.Device{d0}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		args[0].Scalar = int32(i + 1)
		e0, err0 := r0.Run(uint64(i+1), args)
		e1, err1 := r1.Run(uint64(i+1), args)
		if err0 != nil || err1 != nil {
			t.Fatal(err0, err1)
		}
		if err := e0.Synchronize(); err != nil {
			t.Fatal(err)
		}
		if err := e1.Synchronize(); err != nil {
			t.Fatal(err)
		}
		e0.Close()
		e1.Close()
	}
	got := make([]byte, 16)
	q, _ := d1.NewQueue()
	q.Retrieve(got, x1)
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	// x0 is 1, 3, 6 after each run; x1 is x0 + 100 each time.
	if v := int32(binary.LittleEndian.Uint32(got)); v != 106 {
		t.Errorf("x1[0] = %d, want 106", v)
	}
	if n := s0.Signals() + s1.Signals(); n != 0 {
		t.Errorf("%d stand-ins for signals left after the runs", n)
	}
	r0.Free()
	r1.Free()
}

// sessionDeviceNum is sessionDeviceOf for device number num.
func sessionDeviceNum(t *testing.T, num int) (*Session, *Device) {
	t.Helper()
	host, dev := socketPair(t)
	img := entries.Current()
	s := newSession(newLink(dev), img, 1)
	go s.Serve()
	d := newDevice(newLink(host), "local", "session device")
	t.Cleanup(func() { d.Close() })
	if err := d.Load(img, num); err != nil {
		t.Fatal(err)
	}
	return s, d
}

// TestGraphArgsInSetFrames runs a part of 2500 launches whose scalars all
// change between runs: more than one frame holds, so GraphSet frames go
// before the GraphRun, and the runs' results are their scalars'.
func TestGraphArgsInSetFrames(t *testing.T) {
	s, d := sessionDeviceOf(t)
	x, _ := d.Alloc(4)
	q, _ := d.NewQueue()
	defer q.Close()
	q.Submit(x, make([]byte, 4))
	const n = 2500 // 28 bytes of arguments each: 70 KB
	args := make([]plugin.Arg, 0, 2*n)
	var ops []plugin.GraphOp
	for i := range n {
		args = append(args, plugin.Arg{Scalar: int32(0)}, plugin.Arg{Ptr: x, Len: 1})
		ops = append(ops, plugin.GraphOp{Op: plugin.GraphLaunch, Kernel: graphAddK, Args: args[2*i : 2*i+2], ArgAt: 2 * i})
	}
	run, err := d.DefineGraph(plugin.GraphPart{Key: 11, Lanes: 1, Ops: ops})
	if err != nil {
		t.Fatal(err)
	}
	defer run.Free()
	for gen, v := range []int32{1, 1, 2} {
		for i := range n {
			args[2*i].Scalar = v
		}
		before := s.l.reads.Load()
		ev, err := run.Run(uint64(gen+1), args)
		if err != nil {
			t.Fatal(err)
		}
		if err := ev.Synchronize(); err != nil {
			t.Fatal(err)
		}
		ev.Close()
		reads := s.l.reads.Load() - before
		switch {
		case gen == 0 && reads < 2: // a GraphSet frame and the GraphRun, after the GraphDef frames
			t.Errorf("run %d: the session read %d frames, want GraphSet frames before the GraphRun", gen, reads)
		case gen == 1 && reads != 1:
			t.Errorf("run %d, the scalars unchanged: the session read %d frames, want 1", gen, reads)
		}
	}
	got := make([]byte, 4)
	q.Retrieve(got, x)
	if err := q.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if v := int32(binary.LittleEndian.Uint32(got)); v != n*(1+1+2) {
		t.Errorf("x = %d, want %d", v, n*4)
	}
}

// TestGraphRunsCountDrops checks the count of runs in flight (Replaying,
// which keeps a device process's pool workers polling): it drops back after
// runs that end, that fail, and one whose second lane is closed under it
// before its end is enqueued there (a session ending), so that workers do not
// poll in later kernels.
func TestGraphRunsCountDrops(t *testing.T) {
	s, d := sessionDeviceOf(t)
	x, err := d.Alloc(16)
	if err != nil {
		t.Fatal(err)
	}
	args := []plugin.Arg{{Scalar: int32(1)}, {Ptr: x, Len: 4}}
	const key = 11
	run, err := d.DefineGraph(plugin.GraphPart{Key: key, Lanes: 2, Ops: []plugin.GraphOp{
		{Op: plugin.GraphLaunch, Lane: 0, Kernel: graphAddK, Args: args, ArgAt: 0},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range []int32{1, -1, 2} {
		args[0].Scalar = v
		ev, err := run.Run(uint64(i+1), args)
		if err != nil {
			t.Fatal(err)
		}
		err = ev.Synchronize()
		ev.Close()
		if (err != nil) != (v < 0) {
			t.Fatalf("run %d (scalar %d): %v", i+1, v, err)
		}
		if Replaying() {
			t.Fatalf("after run %d: Replaying, want no run in flight", i+1)
		}
	}
	gs := s.graphTable()
	gs.mu.Lock()
	p, err := gs.t.Run(key, 4, false)
	gs.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	p.lanes[1].Close()
	if err := s.runGraph(p, 4, 1<<40, false); err == nil {
		t.Fatal("a run on a closed lane: no error")
	}
	if err := p.lanes[0].Synchronize(); err != nil {
		t.Fatal(err)
	}
	if Replaying() {
		t.Error("after a run whose lane closed under it: Replaying, want no run in flight")
	}
}
