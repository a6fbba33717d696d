package engine

import (
	"encoding/binary"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
	"github.com/goffload/offload/plugins/remote/proto"
	"github.com/goffload/offload/plugins/remote/stream"
)

var (
	nopK, _  = entries.RegisterKernel("remote.malformed.nop", func() {})
	argsK, _ = entries.RegisterKernel("remote.malformed.k", func(a int32, x []float32) {})
)

// socketPair returns two connected Unix stream sockets.
func socketPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	fds, err := stream.SocketPair()
	if err != nil {
		t.Fatal(err)
	}
	a, b := fileConn(t, fds[0]), fileConn(t, fds[1])
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// startSession serves a device session on one end of a socket pair and
// greets it from the other; it returns the host's link and the session's
// result.
// sessionDevice is a device loaded over a socket pair whose other end a
// session of this process serves, as a device process would.
func sessionDevice(t *testing.T) *Device {
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
	return d
}

// newLink starts a link on a socket.
func newLink(conn net.Conn) *link { return startLink(stream.New(conn)) }

// hostConns holds the host's socket of each link startSessionOf made, for
// tests that write the device raw bytes.
var hostConns sync.Map // *link → net.Conn

// hostConn is the host's socket under l, a link of startSessionOf.
func hostConn(l *link) net.Conn {
	c, _ := hostConns.Load(l)
	return c.(net.Conn)
}

func startSession(t *testing.T) (*link, chan error) {
	_, l, done := startSessionOf(t)
	return l, done
}

// startSessionOf is startSession that returns the session too, for tests
// that look into its tables.
func startSessionOf(t *testing.T) (*Session, *link, chan error) {
	host, dev := socketPair(t)
	img := entries.Current()
	s := newSession(newLink(dev), img, 1)
	done := make(chan error, 1)
	go func() { done <- s.Serve() }()
	l := newLink(host)
	hostConns.Store(l, host)
	if err := l.send(&proto.Hello{Status: proto.Status{Text: helloText(img)}}); err != nil {
		t.Fatal(err)
	}
	m, err := l.r.ReadMsg()
	if err != nil || m.Type != proto.THello || m.Code != 0 {
		t.Fatalf("hello: %+v %v", m, err)
	}
	return s, l, done
}

// TestSessionRefusesMalformedFrames sends a device session frames that break
// the protocol: each ends the session with ErrFrame, and none panics.
func TestSessionRefusesMalformedFrames(t *testing.T) {
	for name, frame := range map[string][]byte{
		"unknown type":               append(proto.AppendFrame(nil, &proto.Msg{Type: proto.TAlloc}, nil)[:4], append([]byte{99}, make([]byte, proto.HeaderSize-1)...)...),
		"oversized length":           {0xff, 0xff, 0xff, 0x0f, byte(proto.TAlloc)},
		"data for no transfer":       proto.AppendFrame(nil, &proto.Msg{Type: proto.TData, ID: 42}, []byte{1, 2, 3}),
		"reply sent to device":       proto.AppendFrame(nil, &proto.Msg{Type: proto.TReply, ID: 1}, nil),
		"inline size mismatch":       proto.AppendFrame(nil, &proto.Msg{Type: proto.TSubmit, Queue: 1, ID: 1, Size: 10}, []byte{1, 2}),
		"pulled submit with payload": proto.AppendFrame(nil, &proto.Msg{Type: proto.TSubmitPulled, Queue: 1, ID: 1, Size: 3}, []byte{1, 2, 3}),
		"free of nothing":            proto.AppendFrame(nil, &proto.Msg{Type: proto.TFree, Ptr: 0x1234}, nil),
		"wrong-way peer event":       proto.AppendFrame(nil, &proto.Msg{Type: proto.TPeerEvent, ID: 1}, nil),
		"oversized alloc":            proto.AppendFrame(nil, &proto.Msg{Type: proto.TAlloc, Ptr: 1 << 20, Size: 1<<62 + 1}, nil),
		"pushed submit reusing a transfer": append(
			proto.AppendFrame(nil, &proto.Msg{Type: proto.TSubmitPushed, Queue: 1, ID: 1, Size: 1 << 20}, nil),
			proto.AppendFrame(nil, &proto.Msg{Type: proto.TSubmitPushed, Queue: 2, ID: 1, Size: 1 << 20}, nil)...),
		"text longer than body": func() []byte {
			b := proto.AppendFrame(nil, &proto.Msg{Type: proto.TInfo, Text: "abc"}, nil)
			b[4+42] = 200
			return b
		}(),
	} {
		t.Run(name, func(t *testing.T) {
			l, done := startSession(t)
			if _, err := hostConn(l).Write(frame); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-done:
				if !errors.Is(err, proto.ErrFrame) {
					t.Errorf("session ended with %v, want ErrFrame", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the session did not end")
			}
		})
	}
}

// TestSessionBadLaunchArguments: arguments that do not decode fail the
// launch, in order, and the session goes on.
func TestSessionBadLaunchArguments(t *testing.T) {
	k := argsK
	l, done := startSession(t)
	l.send(&proto.Launch{Queue: 1, Kernel: uint32(k.Index()), Args: []byte{1, 2, 3}})
	l.send(&proto.Launch{Queue: 1, Kernel: 1 << 30})
	l.send(&proto.Sync{Queue: 1, Seq: 7})
	m, err := l.r.ReadMsg()
	if err != nil || m.Type != proto.TSyncDone || m.ID != 7 {
		t.Fatalf("got %+v, %v", m, err)
	}
	if err := (proto.Status{Code: m.Code, Text: m.Text}).Err(); !errors.Is(err, proto.ErrFrame) || !strings.Contains(err.Error(), "remote.malformed.k") {
		t.Errorf("sync error = %v, want the arguments' ErrFrame", err)
	}
	l.send(&proto.Info{Req: 8})
	if m, err := l.r.ReadMsg(); err != nil || m.Type != proto.TReply || m.ID != 8 || m.Code != 0 {
		t.Errorf("the session stopped serving: %+v %v", m, err)
	}
	l.send(&proto.Exit{})
	if err := <-done; err != nil {
		t.Errorf("exit: %v", err)
	}
}

// TestSessionPushedSubmit: a pushed submit's data goes straight into
// device memory as it comes; one to memory that is not the device's is
// skipped on arrival and fails in its queue, which the next sync mark
// reports, and the session goes on. A small retrieve on an idle queue
// comes back in one frame.
func TestSessionPushedSubmit(t *testing.T) {
	l, done := startSession(t)
	const size = 3*proto.Fragment + 123
	const base = 1 << 40
	l.send(&proto.Alloc{Ptr: base, Size: size})
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 7)
	}
	for round, dst := range []uint64{base, base + 1<<30} { // the second is no device memory
		id := uint64(10 + round)
		l.send(&proto.SubmitPushed{Queue: 1, Xfer: id, Dst: dst, Size: size})
		if _, err := l.sendData(id, data, false); err != nil {
			t.Fatal(err)
		}
		l.send(&proto.Sync{Queue: 1, Seq: id})
		m, err := l.r.ReadMsg()
		if err != nil || m.Type != proto.TSyncDone || m.ID != id {
			t.Fatalf("round %d: got %+v, %v", round, m, err)
		}
		err = proto.Status{Code: m.Code, Text: m.Text}.Err()
		if round == 0 && err != nil {
			t.Fatalf("a pushed submit failed: %v", err)
		}
		if round == 1 && !errors.Is(err, plugin.ErrBadPointer) {
			t.Fatalf("a pushed submit to no device memory: sync says %v, want ErrBadPointer", err)
		}
	}
	// What came is in place: read the end back, in one frame.
	l.send(&proto.Retrieve{Queue: 1, Xfer: 20, Src: base + size - 100, Size: 100})
	m, err := l.r.ReadMsg()
	if err != nil || m.Type != proto.TData || m.ID != 20 || m.PayloadLen != 100 || m.Payload == nil {
		t.Fatalf("retrieve: got %+v, %v; want its data in one frame", m, err)
	}
	if string(m.Payload) != string(data[size-100:]) {
		t.Error("the retrieved bytes differ from the pushed ones")
	}
	l.send(&proto.Exit{})
	if err := <-done; err != nil {
		t.Errorf("exit: %v", err)
	}
}

// TestHostRefusesMalformedFrames plays a device that answers with garbage:
// the host marks the device lost with the protocol error, and every pending
// operation fails instead of hanging.
func TestHostRefusesMalformedFrames(t *testing.T) {
	host, dev := socketPair(t)
	img := entries.Current()
	go func() {
		l := newLink(dev)
		if _, err := l.r.ReadMsg(); err != nil {
			return
		}
		l.send(&proto.Hello{Status: proto.Status{Text: helloText(img)}})
		if _, err := l.r.ReadMsg(); err != nil { // the info request
			return
		}
		l.send(&proto.Reply{Req: 1, Status: proto.Status{Text: `{"Cores": 1, "PID": 1}`}})
		l.r.ReadMsg() // the launch
		dev.Write([]byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3})
	}()
	d := newDevice(newLink(host), "local", "fake device")
	if err := d.Load(img, 0); err != nil {
		t.Fatal(err)
	}
	q, _ := d.NewQueue()
	if err := q.Launch(nopK, nil); err != nil {
		t.Fatal(err)
	}
	err := q.Synchronize()
	if !errors.Is(err, plugin.ErrDeviceLost) || !strings.Contains(err.Error(), "malformed frame") {
		t.Errorf("got %v, want ErrDeviceLost with the frame error", err)
	}
	if _, err := d.Alloc(8); !errors.Is(err, plugin.ErrDeviceLost) {
		t.Errorf("later alloc: %v", err)
	}
	d.Close()
}

func fileConn(t *testing.T, fd int) net.Conn {
	t.Helper()
	f := os.NewFile(uintptr(fd), "test")
	defer f.Close()
	c, err := net.FileConn(f)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The handlers behind the frame decoder take bytes from another process
// too: these targets feed them arbitrary frames. None may panic or hang;
// each may end its link with an error.

// frames encodes ms, for seeds.
func frames(ms ...*proto.Msg) []byte {
	var b []byte
	for _, m := range ms {
		b = proto.AppendFrame(b, m, m.Payload)
	}
	return b
}

func u64s(v ...uint64) []byte {
	var b []byte
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, x)
	}
	return b
}

// tame rewrites frames that would make a session do unbounded work no host
// of ours asks for (launch some test kernel that sleeps, wait for a peer
// introduction, allocate all memory): launches run the no-op kernel,
// exchanges stay on the device, allocations are small. The rest passes as it is, undecodable tails included.
func tame(data []byte) []byte {
	var out []byte
	for len(data) > 0 {
		m, n, err := proto.Decode(data)
		if err != nil {
			return append(out, data...)
		}
		switch m.Type {
		case proto.TLaunch:
			if m.Kernel != uint32(argsK.Index()) {
				m.Kernel = uint32(nopK.Index())
			}
		case proto.TExchange:
			m.Kernel = 0
		case proto.TAlloc: // what a machine can hold is hostmem's to check, not the fuzzer's to try
			m.Size %= 1 << 20
		}
		out = proto.AppendFrame(out, m, m.Payload)
		data = data[n:]
	}
	return out
}

func FuzzSession(f *testing.F) {
	f.Add(frames(
		&proto.Msg{Type: proto.TAlloc, Ptr: 1 << 20, Size: 64},
		&proto.Msg{Type: proto.TSubmit, Queue: 1, ID: 2, Ptr: 1 << 20, Size: 4, Payload: []byte{1, 2, 3, 4}},
		&proto.Msg{Type: proto.TRetrieve, Queue: 1, ID: 3, Ptr: 1 << 20, Size: 4},
		&proto.Msg{Type: proto.TRecord, Queue: 1, ID: 4},
		&proto.Msg{Type: proto.TWait, Queue: 2, ID: 4},
		&proto.Msg{Type: proto.TSync, Queue: 2, ID: 5},
	))
	f.Add(frames(
		&proto.Msg{Type: proto.TSubmitPulled, Queue: 1, ID: 2, Ptr: 8, Size: 1 << 20},
		&proto.Msg{Type: proto.TData, ID: 2, Payload: []byte{1}},
		&proto.Msg{Type: proto.TNotify, ID: 9, Ptr: 3, Kernel: 1},
		&proto.Msg{Type: proto.TWaitPeer, Queue: 3, Kernel: 1, Ptr: 3},
		&proto.Msg{Type: proto.TForget, Payload: u64s(4, 9, 1<<63)},
		&proto.Msg{Type: proto.TExchange, Queue: 1, Ptr: 8, Ptr2: 16, Size: 1 << 40},
		&proto.Msg{Type: proto.TLaunch, Queue: 1, Kernel: 7, Payload: []byte{0, 0, 0, 0}},
		&proto.Msg{Type: proto.TCloseQueue, Queue: 1},
		&proto.Msg{Type: proto.TXferDone, ID: 77},
	))
	// Allocations at the host's addresses and frees without answers
	// (protocol v5), a pushed submit, and acknowledgements that release
	// held tells.
	f.Add(frames(
		&proto.Msg{Type: proto.TAlloc, Ptr: 1 << 20, Size: 64},
		&proto.Msg{Type: proto.TSubmitPushed, Queue: 1, ID: 2, Ptr: 1 << 20, Size: 64},
		&proto.Msg{Type: proto.TData, ID: 2, Payload: make([]byte, 64)},
		&proto.Msg{Type: proto.TRetrieve, Queue: 1, ID: 3, Ptr: 1 << 20, Size: 64},
		&proto.Msg{Type: proto.TNotify, ID: 4, Ptr: 3, Kernel: 1},
		&proto.Msg{Type: proto.TRecord, Queue: 1, ID: 4},
		&proto.Msg{Type: proto.TXferDone, ID: 3},
		&proto.Msg{Type: proto.TFree, Ptr: 1 << 20},
		&proto.Msg{Type: proto.TFree, Ptr: 1 << 20},
	))
	f.Fuzz(func(t *testing.T, data []byte) {
		l, done := startSession(t)
		go func() { // the host's reader: keeps the session's writer going
			for {
				if _, err := l.r.ReadMsg(); err != nil {
					return
				}
			}
		}()
		conn := hostConn(l)
		conn.Write(tame(data))
		conn.(*net.UnixConn).CloseWrite()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("the session did not end after %x", data)
		}
		l.fail(errLinkClosed)
	})
}

func FuzzPeer(f *testing.F) {
	f.Add(frames(
		&proto.Msg{Type: proto.TPeerPut, ID: 1, Ptr2: 1 << 20, Size: 3},
		&proto.Msg{Type: proto.TData, ID: 1, Payload: []byte{1, 2, 3}},
		&proto.Msg{Type: proto.TPeerEvent, ID: 5, Code: 2, Text: "failed"},
		&proto.Msg{Type: proto.TXferDone, ID: 1},
	))
	f.Add(frames(
		&proto.Msg{Type: proto.TPeerPut, ID: 1, Ptr2: 0, Size: 1 << 62},
		&proto.Msg{Type: proto.TData, ID: 1, Ptr: 5, Payload: []byte{1}},
	))
	// Quiet puts (a replay's copy that a signal follows): one in memory,
	// one out of it, which ends the link.
	f.Add(frames(
		&proto.Msg{Type: proto.TPeerPut, ID: 2, Ptr2: 1 << 20, Size: 2, Kernel: 1},
		&proto.Msg{Type: proto.TData, ID: 2, Payload: []byte{1, 2}},
		&proto.Msg{Type: proto.TPeerSignal, ID: 3, Ptr: 1, Kernel: 2},
		&proto.Msg{Type: proto.TPeerPut, ID: 4, Ptr2: 8, Size: 1, Kernel: 1},
		&proto.Msg{Type: proto.TData, ID: 4, Payload: []byte{1}},
	))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, _ := socketPair(t) // the session's host link: unused
		s := newSession(newLink(a), entries.Current(), 1)
		defer s.close()
		s.mem.Alloc(64)
		other, pb := socketPair(t)
		p := &peer{num: 1, l: newLink(pb), waiting: map[uint64]chan error{}, in: map[uint64]*incoming{}}
		defer p.l.fail(errLinkClosed)
		go func() {
			other.Write(data)
			other.(*net.UnixConn).CloseWrite()
			for { // drain what the peer answers
				if _, err := other.Read(make([]byte, 4096)); err != nil {
					return
				}
			}
		}()
		s.peers.serve(p) // returns at the end of the data, or at an error
	})
}

func FuzzHostDispatch(f *testing.F) {
	f.Add(frames(
		&proto.Msg{Type: proto.TReply, ID: 1, Ptr: 8},
		&proto.Msg{Type: proto.TEvent, ID: 2},
		&proto.Msg{Type: proto.TPull, ID: 3},
		&proto.Msg{Type: proto.TData, ID: 4, Payload: make([]byte, 100)},
		&proto.Msg{Type: proto.TSyncDone, ID: 5, Code: 1, Text: "kernel failed"},
	))
	f.Add(frames(
		&proto.Msg{Type: proto.TData, ID: 4, Ptr: 99, Payload: make([]byte, 2)},
		&proto.Msg{Type: proto.TEvent, ID: 2, Code: 200, Text: "x"},
		&proto.Msg{Type: proto.TEvent, ID: 2},
	))
	f.Fuzz(func(t *testing.T, data []byte) {
		host, dev := socketPair(t)
		d := newDevice(newLink(host), "local", "fuzz device")
		ch, _ := d.request(infoReq, nil) // id 1
		ev, _ := d.NewEvent()            // id 2
		ev.(*event).ev.Arm()
		d.mu.Lock()
		d.st.ID() // 3
		d.st.Push(3, make([]byte, 10))
		d.st.ID() // 4
		d.st.Expect(4, &incoming{dst: make([]byte, 100), size: 100})
		d.mu.Unlock()
		q, _ := d.NewQueue()
		mark, _ := q.(*queue).mark() // id 5
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			dev.Write(data)
			dev.(*net.UnixConn).CloseWrite()
			for {
				if _, err := dev.Read(make([]byte, 4096)); err != nil {
					return
				}
			}
		}()
		d.mu.Lock()
		d.reading = true
		d.mu.Unlock()
		d.read() // dispatches until the data ends or breaks the protocol, then loses the device
		<-ch     // every pending call is answered, by the device or by the loss
		<-mark
		ev.Synchronize()
		d.Close()
		dev.Close()
		wg.Wait()
	})
}

// FuzzParseHello: a hello from the other side never panics its reader,
// and what it accepts is a hello of sane fields.
func FuzzParseHello(f *testing.F) {
	f.Add(helloText(entries.Current()))
	f.Add(proto.Magic + " 1 0123456789abcdef 3")
	f.Add(proto.Magic + " 1 0123456789abcdef 3 500000")
	f.Add(proto.Magic + " 1 0123456789abcdef 3 -5")
	f.Add(proto.Magic + " 1 0123456789abcdef 3 500000 arch=s390x/8/8/be kt=0000000100000002 gt=#01020304")
	f.Add(proto.Magic + " 1 0123456789abcdef 3 500000 arch=386/4/4/le kt=000000 gt=")
	f.Fuzz(func(t *testing.T, s string) {
		h, err := parseHello(s)
		if err != nil {
			if !errors.Is(err, proto.ErrFrame) {
				t.Fatalf("parseHello(%q): %v, not a frame error", s, err)
			}
			return
		}
		if h.count < 0 || len(h.digest) != 16 || h.timeout < -1 || h.timeout > maxHelloTimeout {
			t.Fatalf("parseHello(%q) = %+v", s, h)
		}
		a := h.arch
		if h.hasArch && (a.arch == "" || (a.word != 4 && a.word != 8) || (a.align8 != 4 && a.align8 != 8) || len(h.types.sums) > maxSums) {
			t.Fatalf("parseHello(%q) = %+v: bad architecture or layouts", s, h)
		}
		// What it accepts, the check reads without panicking.
		checkImage(h, entries.Current(), "host")
	})
}
