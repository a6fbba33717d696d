package proto

import (
	"encoding/binary"
	"fmt"
)

// Recorded task graphs on device processes: a device's part of a graph is
// defined once with GraphDef frames. The part is its operations on lanes, its
// waits on other devices' signals, and its signals to them. Each replay runs
// it with one GraphRun. The devices tell each other of their signals with
// PeerSignal frames on their peer links. The host hears of a run once, as the
// Event its GraphRun names.

// GraphDef (→d) adds Ops (EncodeGraphOps) to graph Graph, whose part runs
// on Lanes queues of its own. A part too large for one frame comes in
// several, each adding to the last, all before its first run.
type GraphDef struct {
	Graph uint64 // id
	Lanes uint32 // queue
	Ops   []byte // payload
}

// GraphSet (→d) changes the arguments of graph Graph's launches
// (EncodeGraphArgs) for its later runs. It comes between runs.
type GraphSet struct {
	Graph uint64 // id
	Args  []byte // payload
}

// GraphRun (→d) runs graph Graph as its run Gen. From then on the launches'
// arguments are changed as Args says (EncodeGraphArgs). The device sends
// Event once every lane of the run is done, with the first error of any.
// After says the run may come before the part's last run ended (the host
// queued it) and runs only if that one ended without an error; else it
// fails and runs nothing. Only a part of one lane takes it.
type GraphRun struct {
	Graph uint64 // id
	Gen   uint64 // ptr
	Event uint64 // ptr2
	Args  []byte // payload
	After bool   // kernel, bit 0
}

// GraphFree (→d) forgets graph Graph once its runs are done.
type GraphFree struct {
	Graph uint64 // id
}

// PeerSignal (between peers) says signal Signal of run Gen of graph Graph
// fired, with Code and Text its error.
type PeerSignal struct {
	Graph  uint64 // id
	Gen    uint64 // ptr
	Signal uint32 // kernel
	Status
}

// Type is TGraphDef.
func (GraphDef) Type() Type { return TGraphDef }

// Type is TGraphSet.
func (GraphSet) Type() Type { return TGraphSet }

// Type is TGraphRun.
func (GraphRun) Type() Type { return TGraphRun }

// Type is TGraphFree.
func (GraphFree) Type() Type { return TGraphFree }

// Type is TPeerSignal.
func (PeerSignal) Type() Type { return TPeerSignal }

func (f *GraphDef) put(m *Msg) { m.ID, m.Queue, m.Payload = f.Graph, f.Lanes, f.Ops }
func (f *GraphDef) get(m *Msg) error {
	if err := wholePayload(m); err != nil {
		return err
	}
	if m.Queue == 0 || m.Queue > MaxGraphLanes {
		return fmt.Errorf("%d lanes, want 1 to %d", m.Queue, MaxGraphLanes)
	}
	f.Graph, f.Lanes, f.Ops = m.ID, m.Queue, m.Payload
	return nil
}

func (f *GraphSet) put(m *Msg) { m.ID, m.Payload = f.Graph, f.Args }
func (f *GraphSet) get(m *Msg) error {
	if err := wholePayload(m); err != nil {
		return err
	}
	f.Graph, f.Args = m.ID, m.Payload
	return nil
}

func (f *GraphRun) put(m *Msg) {
	m.ID, m.Ptr, m.Ptr2, m.Payload = f.Graph, f.Gen, f.Event, f.Args
	if f.After {
		m.Kernel = 1
	}
}
func (f *GraphRun) get(m *Msg) error {
	if err := wholePayload(m); err != nil {
		return err
	}
	if m.Kernel&^1 != 0 {
		return fmt.Errorf("graph run flags %#x, want 0 or 1 (after)", m.Kernel)
	}
	f.Graph, f.Gen, f.Event, f.Args, f.After = m.ID, m.Ptr, m.Ptr2, m.Payload, m.Kernel&1 != 0
	return nil
}

func (f *GraphFree) put(m *Msg) { m.ID = f.Graph }
func (f *GraphFree) get(m *Msg) error {
	f.Graph = m.ID
	return noPayload(m)
}

func (f *PeerSignal) put(m *Msg) {
	m.ID, m.Ptr, m.Kernel = f.Graph, f.Gen, f.Signal
	f.Status.put(m)
}
func (f *PeerSignal) get(m *Msg) error {
	f.Graph, f.Gen, f.Signal = m.ID, m.Ptr, m.Kernel
	f.Status.get(m)
	return noPayload(m)
}

// Limits of graph parts.
const (
	MaxGraphLanes = 64   // lanes of one part
	MaxGraphTo    = 1024 // devices one signal is for
)

// The operations of a graph part on the wire.
const (
	GraphLaunch   = 1 // Kernel with Args
	GraphExchange = 2 // Size bytes from Src to Dst on device Peer
	GraphSignal   = 3 // Signal, for the devices To
	GraphWait     = 4 // for Signal of device Peer
)

// GraphOp is one operation of a graph part; Op says which fields it uses.
type GraphOp struct {
	Op     uint8
	Lane   uint16
	Kernel uint32
	Args   []byte
	Peer   uint32
	Dst    uint64
	Src    uint64
	Size   uint64
	Signal uint32
	To     []uint32
}

// AppendGraphOp encodes op at the end of b: its kind, lane and the fields the
// kind uses, little-endian.
func AppendGraphOp(b []byte, op *GraphOp) []byte {
	le := binary.LittleEndian
	b = append(b, op.Op)
	b = le.AppendUint16(b, op.Lane)
	switch op.Op {
	case GraphLaunch:
		b = le.AppendUint32(b, op.Kernel)
		b = le.AppendUint32(b, uint32(len(op.Args)))
		b = append(b, op.Args...)
	case GraphExchange:
		b = le.AppendUint32(b, op.Peer)
		b = le.AppendUint64(b, op.Dst)
		b = le.AppendUint64(b, op.Src)
		b = le.AppendUint64(b, op.Size)
	case GraphSignal:
		b = le.AppendUint32(b, op.Signal)
		b = le.AppendUint16(b, uint16(len(op.To)))
		for _, t := range op.To {
			b = le.AppendUint32(b, t)
		}
	case GraphWait:
		b = le.AppendUint32(b, op.Signal)
		b = le.AppendUint32(b, op.Peer)
	}
	return b
}

// DecodeGraphOps decodes a GraphDef's operations, each lane below lanes.
// Launch arguments alias b.
func DecodeGraphOps(b []byte, lanes int) ([]GraphOp, error) {
	var ops []GraphOp
	r := reader{b: b}
	for len(r.b) > 0 {
		var op GraphOp
		op.Op = r.u8()
		op.Lane = r.u16()
		switch op.Op {
		case GraphLaunch:
			op.Kernel = r.u32()
			op.Args = r.bytes(int(r.u32()))
		case GraphExchange:
			op.Peer = r.u32()
			op.Dst, op.Src, op.Size = r.u64(), r.u64(), r.u64()
			if r.err == nil {
				r.err = checkSize(op.Size)
			}
		case GraphSignal:
			op.Signal = r.u32()
			n := int(r.u16())
			if n > MaxGraphTo {
				return nil, fmt.Errorf("%w: graph signal for %d devices, at most %d", ErrFrame, n, MaxGraphTo)
			}
			if r.err == nil && n*4 > len(r.b) {
				r.err = fmt.Errorf("graph signal for %d devices in %d bytes", n, len(r.b))
			}
			for i := 0; i < n && r.err == nil; i++ {
				op.To = append(op.To, r.u32())
			}
		case GraphWait:
			op.Signal = r.u32()
			op.Peer = r.u32()
		default:
			return nil, fmt.Errorf("%w: graph operation %d of kind %d", ErrFrame, len(ops), op.Op)
		}
		if r.err != nil {
			return nil, fmt.Errorf("%w: graph operation %d: %w", ErrFrame, len(ops), r.err)
		}
		if int(op.Lane) >= lanes {
			return nil, fmt.Errorf("%w: graph operation %d on lane %d of %d", ErrFrame, len(ops), op.Lane, lanes)
		}
		ops = append(ops, op)
	}
	return ops, nil
}

// GraphArgs is a launch's new arguments. Op is the operation of the part, its
// index among all the part's operations.
type GraphArgs struct {
	Op   uint32
	Args []byte
}

// AppendGraphArgs encodes a's operation index and arguments at the end
// of b.
func AppendGraphArgs(b []byte, a GraphArgs) []byte {
	b = binary.LittleEndian.AppendUint32(b, a.Op)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(a.Args)))
	return append(b, a.Args...)
}

// DecodeGraphArgs decodes a GraphSet's or GraphRun's arguments; they
// alias b.
func DecodeGraphArgs(b []byte) ([]GraphArgs, error) {
	var out []GraphArgs
	r := reader{b: b}
	for len(r.b) > 0 {
		a := GraphArgs{Op: r.u32()}
		a.Args = r.bytes(int(r.u32()))
		if r.err != nil {
			return nil, fmt.Errorf("%w: graph arguments %d: %w", ErrFrame, len(out), r.err)
		}
		out = append(out, a)
	}
	return out, nil
}

// reader reads little-endian fields off b. The first shortfall is err, and
// the reads after it give zeros.
type reader struct {
	b   []byte
	err error
}

func (r *reader) take(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b) {
		r.err = fmt.Errorf("%d bytes wanted, %d left", n, len(r.b))
		r.b = nil
		return nil
	}
	p := r.b[:n:n]
	r.b = r.b[n:]
	return p
}

func (r *reader) u8() uint8 {
	if p := r.take(1); p != nil {
		return p[0]
	}
	return 0
}

func (r *reader) u16() uint16 {
	if p := r.take(2); p != nil {
		return binary.LittleEndian.Uint16(p)
	}
	return 0
}

func (r *reader) u32() uint32 {
	if p := r.take(4); p != nil {
		return binary.LittleEndian.Uint32(p)
	}
	return 0
}

func (r *reader) u64() uint64 {
	if p := r.take(8); p != nil {
		return binary.LittleEndian.Uint64(p)
	}
	return 0
}

func (r *reader) bytes(n int) []byte { return r.take(n) }
