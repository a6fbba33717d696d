package proto

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// everyFrame has one frame of every type, with every field set.
func everyFrame() []Frame {
	st := Status{Code: 3, Text: "it failed"}
	return []Frame{
		&Hello{Num: 7, Status: Status{Text: Magic + " 6 abc"}},
		&Auth{Status: Status{Text: "proof nonce"}},
		&Reply{Req: 1, Value: 2, Status: st},
		&Alloc{Ptr: 1 << 52, Size: 4096},
		&Free{Ptr: 1 << 52},
		&Info{Req: 9},
		&Clock{Req: 10},
		&Serve{Req: 11, Index: 3},
		&Sibling{Peer: 2, Token: 1<<63 + 5},
		&Addr{Req: 11, Ptr: 1<<52 + 8},
		&CloseQueue{Queue: 4},
		&Submit{Queue: 1, Dst: 1 << 20, Data: []byte("data")},
		&SubmitPulled{Queue: 1, Xfer: 5, Dst: 1 << 20, Size: 1 << 30},
		&SubmitPushed{Queue: 2, Xfer: 6, Dst: 1 << 21, Size: 1 << 31},
		&Pull{Queue: 1, Xfer: 5},
		&Data{Xfer: 5, Off: 1 << 20},
		&Retrieve{Queue: 3, Xfer: 8, Src: 1 << 22, Size: 100},
		&XferDone{Xfer: 8, Status: st},
		&Exchange{Queue: 3, Src: 1, Dst: 2, Size: 3, Peer: 4},
		&PeerPut{Xfer: 9, Dst: 1 << 20, Size: 77},
		&PeerPut{Xfer: 10, Dst: 1 << 20, Size: 8, Quiet: true},
		&Launch{Queue: 1, Kernel: 12, Stop: 99, Args: []byte{1, 2, 3}},
		&StopLaunch{Stop: 99},
		&Record{Queue: 1, Event: 13},
		&Wait{Queue: 2, Event: 13},
		&WaitPeer{Queue: 2, Peer: 1, Wait: 14},
		&Notify{Event: 13, Peer: 2, Wait: 14},
		&PeerEvent{Wait: 14, Status: st},
		&Event{Event: 13, Status: st},
		&Sync{Queue: 5, Seq: 15},
		&SyncDone{Queue: 5, Seq: 15, Status: st},
		&Forget{Events: []uint64{1, 2, 1 << 63}},
		&Exit{},
		&Exit{Unfinalized: true},
		&Ping{},
		&Tag{Queue: 6, Tag: 16, HostClock: 17},
		&Times{Queue: 6, DevClock: 18, Ops: []byte{9, 9}},
		&Announce{Gen: 3},
		&RawBench{N: 1000, Size: 8, Stream: true},
		&Cancel{},
		&GraphDef{Graph: 3, Lanes: 2, Ops: AppendGraphOp(nil, &GraphOp{Op: GraphWait, Lane: 1, Signal: 4, Peer: 2})},
		&GraphSet{Graph: 3, Args: AppendGraphArgs(nil, GraphArgs{Op: 5, Args: []byte{7}})},
		&GraphRun{Graph: 3, Gen: 9, Event: 19, Args: []byte{1, 2}},
		&GraphRun{Graph: 3, Gen: 10, Event: 20, Args: []byte{}, After: true},
		&GraphFree{Graph: 3},
		&PeerSignal{Graph: 3, Gen: 9, Signal: 4, Status: st},
	}
}

// TestTypedFramesRoundTrip sends every typed frame through its envelope and
// the wire and reads it back as the same typed frame.
func TestTypedFramesRoundTrip(t *testing.T) {
	seen := map[Type]bool{}
	for _, f := range everyFrame() {
		m := Encode(f)
		b := AppendFrame(nil, m, m.Payload)
		got, n, err := Decode(b)
		if err != nil || n != len(b) {
			t.Fatalf("%s: decode: %v (%d of %d bytes)", f.Type(), err, n, len(b))
		}
		back, err := Parse(got)
		if err != nil {
			t.Fatalf("%s: parse: %v", f.Type(), err)
		}
		if !reflect.DeepEqual(back, f) {
			t.Errorf("%s: got %+v, want %+v", f.Type(), back, f)
		}
		seen[f.Type()] = true
	}
	for ty := Type(1); ty < tMax; ty++ {
		if !seen[ty] {
			t.Errorf("no typed frame of type %s in the test", ty)
		}
		if newFrame[ty] == nil {
			t.Errorf("Parse knows no frame of type %s", ty)
		}
	}
}

// TestAsChecksTheType reads a frame as another type, and the rules of each
// type that constrains its fields.
func TestAsChecksTheType(t *testing.T) {
	if _, err := As[Launch](Encode(&Record{Queue: 1, Event: 2})); !errors.Is(err, ErrFrame) || !strings.Contains(err.Error(), "record frame read as launch") {
		t.Errorf("record as launch: %v", err)
	}
	bad := map[string]*Msg{
		"inline submit, size not its payload": {Type: TSubmit, Size: 10, Payload: []byte{1}, PayloadLen: 1},
		"inline submit over MaxInline":        {Type: TSubmit, Size: MaxInline + 1, PayloadLen: MaxInline + 1},
		"inline submit, payload left unread":  {Type: TSubmit, Size: 4, PayloadLen: 4},
		"pulled submit with a payload":        {Type: TSubmitPulled, Size: 3, Payload: []byte{1, 2, 3}, PayloadLen: 3},
		"pushed submit over MaxSize":          {Type: TSubmitPushed, Size: MaxSize + 1},
		"alloc over MaxSize":                  {Type: TAlloc, Size: MaxSize + 1},
		"peer put over MaxSize":               {Type: TPeerPut, Size: 1 << 63},
		"peer put with unknown flags":         {Type: TPeerPut, Size: 8, Kernel: 2},
		"graph run with unknown flags":        {Type: TGraphRun, Kernel: 2},
		"forget list cut":                     {Type: TForget, Payload: make([]byte, 12), PayloadLen: 12},
		"launch arguments left unread":        {Type: TLaunch, PayloadLen: 100},
		"record with a payload":               {Type: TRecord, Payload: []byte{1}, PayloadLen: 1},
		"raw bench of 2^40 round trips":       {Type: TRawBench, Ptr: 1 << 40},
		"unknown type":                        {Type: tMax},
		"zero type":                           {Type: 0},
	}
	for name, m := range bad {
		if f, err := Parse(m); !errors.Is(err, ErrFrame) {
			t.Errorf("%s: got %+v, %v; want ErrFrame", name, f, err)
		}
	}
	// What the device checks itself passes: sizes of copies that its
	// memory refuses (an error of the queue, not of the link).
	for _, m := range []*Msg{{Type: TExchange, Size: 1<<63 - 1}, {Type: TRetrieve, Size: 1 << 63}} {
		if _, err := Parse(m); err != nil {
			t.Errorf("%s of %d bytes: %v", m.Type, m.Size, err)
		}
	}
}

// FuzzParse reads arbitrary bytes as frames: Parse never panics, and a
// frame it accepts encodes back to an envelope that parses to the same
// frame.
func FuzzParse(f *testing.F) {
	for _, fr := range everyFrame() {
		m := Encode(fr)
		f.Add(AppendFrame(nil, m, m.Payload))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for len(b) > 0 {
			m, n, err := Decode(b)
			if err != nil {
				return
			}
			b = b[n:]
			fr, err := Parse(m)
			if err != nil {
				if !errors.Is(err, ErrFrame) {
					t.Fatalf("%s: error %v does not wrap ErrFrame", m.Type, err)
				}
				continue
			}
			if fr.Type() != m.Type {
				t.Fatalf("%s parsed as %s", m.Type, fr.Type())
			}
			again, err := Parse(Encode(fr))
			if err != nil {
				if m.Type == TData { // Data's payload is the stream's, not the frame's
					continue
				}
				t.Fatalf("%s: %+v does not parse again: %v", m.Type, fr, err)
			}
			if !reflect.DeepEqual(again, fr) {
				t.Fatalf("%s: %+v parsed again as %+v", m.Type, fr, again)
			}
		}
	})
}
