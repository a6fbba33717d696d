package engine

import (
	"encoding/binary"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugins/remote/proto"
)

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
	f.Fuzz(func(t *testing.T, s string) {
		h, err := parseHello(s)
		if err != nil {
			return
		}
		if h.count < 0 || len(h.digest) != 16 || h.timeout < -1 || h.timeout > maxHelloTimeout {
			t.Fatalf("parseHello(%q) = %+v", s, h)
		}
	})
}
