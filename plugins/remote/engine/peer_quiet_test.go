package engine

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugins/remote/proto"
)

// peerServe serves a peer link of a new session, as device 1's, on which
// the test writes in; it returns the memory in's puts went to, the
// confirmations the session queued on the link, whether signal 2 of run 1
// of graph 3 fired, the frames that came back and serve's error, once in
// has been read and the link closed.
func peerServe(t *testing.T, in func(dst uint64) []byte) (data []byte, dones uint64, signaled bool, back []*proto.Msg, err error) {
	t.Helper()
	a, _ := socketPair(t) // the session's host link: unused
	s := newSession(newLink(a), entries.Current(), 1)
	defer s.close()
	dst, aerr := s.mem.Alloc(64)
	if aerr != nil {
		t.Fatal(aerr)
	}
	other, pb := socketPair(t)
	p := &peer{num: 1, l: newLink(pb), waiting: map[uint64]chan error{}, in: map[uint64]*incoming{}}
	answers := make(chan []byte, 1)
	go func() {
		other.Write(in(uint64(dst)))
		other.(*net.UnixConn).CloseWrite()
		b, _ := io.ReadAll(other) // until the link is closed
		answers <- b
	}()
	err = s.peers.serve(p) // returns at the end of in, or at an error
	dones = p.l.queued[proto.TXferDone&63].Load()
	signaled, _ = s.peers.gevent(1, 3, 1, 2).Query()
	p.l.fail(errLinkClosed)
	var b []byte
	select {
	case b = <-answers:
	case <-time.After(20 * time.Second):
		t.Fatal("the peer link did not close")
	}
	for len(b) > 0 {
		m, n, derr := proto.Decode(b)
		if derr != nil {
			t.Fatalf("the session's answer: %v", derr)
		}
		if m.Type != proto.TPing {
			back = append(back, m)
		}
		b = b[n:]
	}
	mem, _ := s.mem.Bytes(dst, 8)
	return append([]byte(nil), mem...), dones, signaled, back, err
}

// TestQuietPut: a peer's quiet put (a graph's exchange followed by a
// signal for the same device) is in place once the signal behind it has
// fired, and is not confirmed; a put that is not quiet is. A quiet put
// the device cannot place ends the link with an error that says so.
func TestQuietPut(t *testing.T) {
	payload := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	put := func(quiet bool) func(dst uint64) []byte {
		return func(dst uint64) []byte {
			var flags uint32
			if quiet {
				flags = 1
			}
			return frames(
				&proto.Msg{Type: proto.TPeerPut, ID: 7, Ptr2: dst, Size: 8, Kernel: flags},
				&proto.Msg{Type: proto.TData, ID: 7, Payload: payload},
				&proto.Msg{Type: proto.TPeerSignal, ID: 3, Ptr: 1, Kernel: 2},
			)
		}
	}
	for _, quiet := range []bool{true, false} {
		data, dones, signaled, back, err := peerServe(t, put(quiet))
		if err != nil && !errors.Is(err, io.EOF) {
			t.Errorf("quiet %v: serve: %v, want the end of the frames", quiet, err)
		}
		if !signaled {
			t.Errorf("quiet %v: the signal behind the data did not fire", quiet)
		}
		if !bytes.Equal(data, payload) {
			t.Errorf("quiet %v: memory holds %v, want %v", quiet, data, payload)
		}
		if want := map[bool]uint64{true: 0, false: 1}[quiet]; dones != want {
			t.Errorf("quiet %v: %d confirmations sent (%d frames came back), want %d", quiet, dones, len(back), want)
		}
	}
	// Out of the device's memory: the quiet put ends the link.
	_, dones, _, back, err := peerServe(t, func(dst uint64) []byte {
		return frames(
			&proto.Msg{Type: proto.TPeerPut, ID: 9, Ptr2: dst + 1<<30, Size: 8, Kernel: 1},
			&proto.Msg{Type: proto.TData, ID: 9, Payload: payload},
		)
	})
	if err == nil || !strings.Contains(err.Error(), "exchange 9 from device 1 (not confirmed: the link ends)") {
		t.Errorf("a quiet put out of memory: serve: %v, want the link's end saying why", err)
	}
	if dones != 0 {
		t.Errorf("a quiet put out of memory was answered %d times (%d frames came back)", dones, len(back))
	}
}
