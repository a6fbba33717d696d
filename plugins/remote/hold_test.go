package remote

import (
	"testing"
	"time"

	"github.com/goffload/offload/plugins/remote/proto"
	"github.com/goffload/offload/plugins/remote/stream"
)

// TestReaderAnswersABatchInOneWrite: frames that arrive together are
// answered together. A link's reader that answers each frame with sendSoon
// while more frames wait in its buffer holds the answers back (link.hold)
// and writes them in one go when it reaches the end of the batch
// (link.release): a batch of launches costs one write back, not one each.
// Every answer arrives, in order, and none waits for a later frame.
func TestReaderAnswersABatchInOneWrite(t *testing.T) {
	a, b := socketPair(t)
	dev := newLink(a)
	defer dev.close(time.Second)
	const n = 200
	var batch []byte
	for i := range n {
		batch = proto.AppendFrame(batch, &proto.Msg{Type: proto.TLaunch, ID: uint64(i)}, nil)
	}
	// The whole batch is in the socket before the device reads any of it:
	// a reader that raced the write could find it in pieces.
	host := stream.New(b)
	before := dev.writes.Load()
	if err := host.WriteFrames(batch); err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() {
		for {
			m, err := dev.r.ReadMsg()
			if err != nil {
				served <- err
				return
			}
			if err := dev.sendSoon(&proto.Reply{Req: m.ID}); err != nil {
				served <- err
				return
			}
		}
	}()
	read := func(from, to int) {
		t.Helper()
		for i := from; i < to; i++ {
			m, err := host.ReadMsg()
			if err != nil {
				t.Fatal(err)
			}
			if m.Type != proto.TReply || m.ID != uint64(i) {
				t.Fatalf("answer %d: %s %d", i, m.Type, m.ID)
			}
		}
	}
	read(0, n)
	if w := dev.writes.Load() - before; w > n/10 {
		t.Errorf("%d frames that came in one write were answered in %d writes, want a few", n, w)
	}
	// A lone frame is answered at once: nothing is held back waiting for
	// frames that do not come.
	for i := n; i < n+10; i++ {
		if err := host.WriteFrames(proto.AppendFrame(nil, &proto.Msg{Type: proto.TLaunch, ID: uint64(i)}, nil)); err != nil {
			t.Fatal(err)
		}
		read(i, i+1)
	}
	select {
	case err := <-served:
		t.Fatalf("device reader ended: %v", err)
	default:
	}
}
