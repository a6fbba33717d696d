package proto

import (
	"errors"
	"reflect"
	"testing"
)

func graphOps() []GraphOp {
	return []GraphOp{
		{Op: GraphLaunch, Lane: 0, Kernel: 3, Args: []byte{1, 2, 3}},
		{Op: GraphExchange, Lane: 1, Peer: 2, Dst: 1 << 52, Src: 1<<52 + 8, Size: 16},
		{Op: GraphSignal, Lane: 1, Signal: 7, To: []uint32{0, 2}},
		{Op: GraphWait, Lane: 0, Signal: 7, Peer: 2},
	}
}

// TestGraphOpsRoundTrip encodes a part's operations and decodes them back.
func TestGraphOpsRoundTrip(t *testing.T) {
	var b []byte
	for _, op := range graphOps() {
		b = AppendGraphOp(b, &op)
	}
	got, err := DecodeGraphOps(b, 2)
	if err != nil || !reflect.DeepEqual(got, graphOps()) {
		t.Fatalf("got %+v, %v; want %+v", got, err, graphOps())
	}
	if _, err := DecodeGraphOps(b, 1); !errors.Is(err, ErrFrame) {
		t.Errorf("lane 1 of 1 lane: %v, want ErrFrame", err)
	}
	for n := range len(b) {
		if ops, err := DecodeGraphOps(b[:n], 2); err == nil && n != 0 && len(ops) == len(graphOps()) {
			t.Errorf("%d of %d bytes decoded whole", n, len(b))
		}
	}
	a := AppendGraphArgs(AppendGraphArgs(nil, GraphArgs{Op: 1, Args: []byte{9}}), GraphArgs{Op: 4})
	args, err := DecodeGraphArgs(a)
	if err != nil || len(args) != 2 || args[0].Op != 1 || args[0].Args[0] != 9 || args[1].Op != 4 || len(args[1].Args) != 0 {
		t.Errorf("arguments: %+v, %v", args, err)
	}
	if _, err := DecodeGraphArgs(a[:len(a)-1]); !errors.Is(err, ErrFrame) {
		t.Errorf("arguments cut short: %v, want ErrFrame", err)
	}
	for _, m := range []*Msg{{Type: TGraphDef, Queue: 0}, {Type: TGraphDef, Queue: MaxGraphLanes + 1}, {Type: TGraphFree, Payload: []byte{1}, PayloadLen: 1}} {
		if _, err := Parse(m); !errors.Is(err, ErrFrame) {
			t.Errorf("%s with %d lanes: %v, want ErrFrame", m.Type, m.Queue, err)
		}
	}
}

// FuzzDecodeGraph feeds arbitrary bytes to the decoders of a graph part's
// operations and of its arguments: they return an error wrapping ErrFrame
// or operations that encode back to the same bytes.
func FuzzDecodeGraph(f *testing.F) {
	var b []byte
	for _, op := range graphOps() {
		b = AppendGraphOp(b, &op)
	}
	f.Add(b, uint8(2))
	f.Add(AppendGraphArgs(nil, GraphArgs{Op: 1, Args: []byte{9}}), uint8(1))
	f.Fuzz(func(t *testing.T, b []byte, lanes uint8) {
		ops, err := DecodeGraphOps(b, int(lanes))
		if err != nil && !errors.Is(err, ErrFrame) {
			t.Fatalf("error %v does not wrap ErrFrame", err)
		}
		if err == nil {
			var again []byte
			for i := range ops {
				if int(ops[i].Lane) >= int(lanes) {
					t.Fatalf("operation %d on lane %d of %d", i, ops[i].Lane, lanes)
				}
				again = AppendGraphOp(again, &ops[i])
			}
			if !reflect.DeepEqual(again, b) && len(b) > 0 {
				t.Fatalf("ops %+v encode to %x, not %x", ops, again, b)
			}
		}
		args, err := DecodeGraphArgs(b)
		if err != nil && !errors.Is(err, ErrFrame) {
			t.Fatalf("error %v does not wrap ErrFrame", err)
		}
		if err == nil {
			var again []byte
			for _, a := range args {
				again = AppendGraphArgs(again, a)
			}
			if !reflect.DeepEqual(again, b) && len(b) > 0 {
				t.Fatalf("arguments %+v encode to %x, not %x", args, again, b)
			}
		}
	})
}
