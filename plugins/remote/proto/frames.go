package proto

import (
	"fmt"
)

// Typed frames: one Go type per message, with its fields named for what they
// hold. A typed frame travels in the envelope Msg, the header the package doc
// draws. Which of the envelope's fields each type uses is written beside its
// fields. Engines build frames with Encode and read them with As. As checks
// the type and every field the type constrains (sizes, payload lengths). So a
// handler sees only frames that make sense.
//
// Versions before 6 overloaded the envelope. ptr2 said how a submit's data
// came, whether an alloc or free was answered, and whether a wait was on a
// peer's event. kernel held a peer device. An exchange and an event meant one
// thing from the host and another from a peer. Each of those is its own type
// now.

// Frame is a typed frame.
type Frame interface {
	// Type is the frame's type, the envelope's first byte.
	Type() Type
	put(m *Msg)
	get(m *Msg) error
}

// Encode returns f in its envelope. A payload (launch arguments, inline
// data, a forget list) is in the envelope's Payload, aliasing f's.
func Encode(f Frame) *Msg {
	m := &Msg{Type: f.Type()}
	f.put(m)
	m.PayloadLen = len(m.Payload)
	return m
}

// As reads m as a frame of type T. It returns an error wrapping ErrFrame if m
// is of another type or breaks T's rules.
func As[T any, P interface {
	*T
	Frame
}](m *Msg) (T, error) {
	var f T
	p := P(&f)
	if m.Type != p.Type() {
		return f, fmt.Errorf("%w: %s frame read as %s", ErrFrame, m.Type, p.Type())
	}
	if err := p.get(m); err != nil {
		return f, fmt.Errorf("%w: %s: %w", ErrFrame, m.Type, err)
	}
	return f, nil
}

// Parse reads m as the typed frame its type says, checked as As checks it.
// The frame is a pointer: *Launch for a TLaunch.
func Parse(m *Msg) (Frame, error) {
	if m.Type == 0 || m.Type >= tMax {
		return nil, fmt.Errorf("%w: unknown type %d", ErrFrame, uint8(m.Type))
	}
	f := newFrame[m.Type]()
	if err := f.get(m); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrFrame, m.Type, err)
	}
	return f, nil
}

var newFrame = [tMax]func() Frame{
	THello:        func() Frame { return new(Hello) },
	TAuth:         func() Frame { return new(Auth) },
	TReply:        func() Frame { return new(Reply) },
	TAlloc:        func() Frame { return new(Alloc) },
	TFree:         func() Frame { return new(Free) },
	TInfo:         func() Frame { return new(Info) },
	TCloseQueue:   func() Frame { return new(CloseQueue) },
	TSubmit:       func() Frame { return new(Submit) },
	TPull:         func() Frame { return new(Pull) },
	TData:         func() Frame { return new(Data) },
	TRetrieve:     func() Frame { return new(Retrieve) },
	TXferDone:     func() Frame { return new(XferDone) },
	TExchange:     func() Frame { return new(Exchange) },
	TLaunch:       func() Frame { return new(Launch) },
	TRecord:       func() Frame { return new(Record) },
	TWait:         func() Frame { return new(Wait) },
	TSync:         func() Frame { return new(Sync) },
	TSyncDone:     func() Frame { return new(SyncDone) },
	TEvent:        func() Frame { return new(Event) },
	TNotify:       func() Frame { return new(Notify) },
	TExit:         func() Frame { return new(Exit) },
	TForget:       func() Frame { return new(Forget) },
	TPing:         func() Frame { return new(Ping) },
	TTag:          func() Frame { return new(Tag) },
	TClock:        func() Frame { return new(Clock) },
	TServe:        func() Frame { return new(Serve) },
	TSibling:      func() Frame { return new(Sibling) },
	TTimes:        func() Frame { return new(Times) },
	TSubmitPulled: func() Frame { return new(SubmitPulled) },
	TSubmitPushed: func() Frame { return new(SubmitPushed) },
	TWaitPeer:     func() Frame { return new(WaitPeer) },
	TPeerPut:      func() Frame { return new(PeerPut) },
	TPeerEvent:    func() Frame { return new(PeerEvent) },
	TAnnounce:     func() Frame { return new(Announce) },
	TRawBench:     func() Frame { return new(RawBench) },
	TCancel:       func() Frame { return new(Cancel) },
	TStopLaunch:   func() Frame { return new(StopLaunch) },
	TAddr:         func() Frame { return new(Addr) },
	TGraphDef:     func() Frame { return new(GraphDef) },
	TGraphSet:     func() Frame { return new(GraphSet) },
	TGraphRun:     func() Frame { return new(GraphRun) },
	TGraphFree:    func() Frame { return new(GraphFree) },
	TPeerSignal:   func() Frame { return new(PeerSignal) },
}

// MaxSize bounds every byte count a frame gives (allocations, copies):
// larger ones are malformed, whatever memory the machine has.
const MaxSize = 1 << 62

func checkSize(n uint64) error {
	if n > MaxSize {
		return fmt.Errorf("size %d is over %d", n, uint64(MaxSize))
	}
	return nil
}

func noPayload(m *Msg) error {
	if m.PayloadLen != 0 {
		return fmt.Errorf("unexpected payload of %d bytes", m.PayloadLen)
	}
	return nil
}

// wholePayload checks that the payload is in the frame (at most MaxInline
// bytes, read with the header).
func wholePayload(m *Msg) error {
	if m.PayloadLen != len(m.Payload) {
		return fmt.Errorf("payload of %d bytes, %d present", m.PayloadLen, len(m.Payload))
	}
	return nil
}

// Status is an outcome carried by an answer. Code 0 is success. Otherwise
// Code classifies the error and Text says it. (A Reply's or Hello's Text is
// its content when Code is 0.)
type Status struct {
	Code uint8
	Text string
}

// Hello (↔) opens a session. Text is magic, version and image digest. Num
// (→d) is the device's number. A refusal carries Code and the reason in Text.
type Hello struct {
	Num uint32 // kernel
	Status
}

// Auth (↔) is a step of the TCP shared-secret handshake; a refusal has
// Code set.
type Auth struct{ Status }

// Reply (→h) answers request Req: Value is its result, Text its
// description (Info) or, with Code set, its error.
type Reply struct {
	Req   uint64 // id
	Value uint64 // ptr
	Status
}

// Alloc (→d) allocates Size bytes at Ptr, the address the host chose. It
// is not answered: a failure shows where the memory is used.
type Alloc struct{ Ptr, Size uint64 }

// Free (→d) frees the allocation at Ptr. It is not answered: the host
// frees only what it allocated.
type Free struct{ Ptr uint64 }

// Info (→d) asks for the device's description: a Reply whose Text is
// plugin.Info in JSON. An Info also tells the host that the device has
// read every frame before it.
type Info struct{ Req uint64 }

// Addr (→d) asks for the address, in the device's process, of the byte at
// Ptr. The answer is a Reply with it in Value. It is an error if Ptr is not
// inside a live allocation; an allocation's end is inside it.
type Addr struct {
	Req uint64 // id
	Ptr uint64 // ptr
}

// Clock (→d) asks for the device's clock: a Reply with it in Value.
type Clock struct{ Req uint64 }

// Serve (→d, before hello) picks device Index of those the process serves
// (its GOFFLOAD_DEVICES) for the session. The answer is a Reply whose Value
// is how many it serves. Its Text is the JSON of the one picked: {"Name", and
// "Token", the session's number in its process, for Sibling}. A process that
// serves its own CPUs serves one. An index past the last is refused.
type Serve struct {
	Req   uint64 // id
	Index uint32 // queue
}

// Sibling (→d) says that device Peer of the host is another session of the
// same device process. It is the one whose Serve answer gave Token. The two
// link to each other inside the process, so that their exchanges and waits
// never leave it. No answer.
type Sibling struct {
	Peer  uint32 // queue
	Token uint64 // id
}

// CloseQueue (→d) ends Queue once its operations are done.
type CloseQueue struct{ Queue uint32 }

// Submit (→d) copies Data, at most MaxInline bytes carried in the frame,
// to Dst in Queue's order.
type Submit struct {
	Queue uint32
	Dst   uint64 // ptr
	Data  []byte // payload; size is its length
}

// SubmitPulled (→d) copies Size bytes to Dst in Queue's order. When the queue
// reaches it, the device sends Pull. The data comes as transfer Xfer.
type SubmitPulled struct {
	Queue uint32
	Xfer  uint64 // id
	Dst   uint64 // ptr
	Size  uint64
}

// SubmitPushed (→d) copies Size bytes to Dst: the data follows at once as
// transfer Xfer, and goes straight into device memory as it comes. The
// host sends it so only when every earlier operation of Queue is done.
type SubmitPushed struct {
	Queue uint32
	Xfer  uint64 // id
	Dst   uint64 // ptr
	Size  uint64
}

// Pull (→h) says the device's Queue reached the pulled submit Xfer: send
// its data.
type Pull struct {
	Queue uint32
	Xfer  uint64 // id
}

// Data (↔) is a fragment of transfer Xfer, at offset Off; the fragment is
// the payload (stream readers read it themselves).
type Data struct {
	Xfer uint64 // id
	Off  uint64 // ptr
}

// Retrieve (→d) sends Size bytes at Src to the host as transfer Xfer, in
// Queue's order. The host acknowledges it with XferDone.
type Retrieve struct {
	Queue uint32
	Xfer  uint64 // id
	Src   uint64 // ptr
	Size  uint64
}

// XferDone says transfer Xfer is in place. Sent →d, it says a retrieve's
// data reached host memory. Between peers, it says a PeerPut's data is in
// the receiver's memory. With Code set, it says the data could not be put
// there.
type XferDone struct {
	Xfer uint64 // id
	Status
}

// Exchange (→d) copies Size bytes from Src on this device to Dst on device
// Peer, in Queue's order. Peer may be this device.
type Exchange struct {
	Queue uint32
	Src   uint64 // ptr
	Dst   uint64 // ptr2
	Size  uint64
	Peer  uint32 // kernel
}

// PeerPut (between peers) says Size bytes for Dst follow as transfer Xfer.
// The receiver answers XferDone once they are in place. A Quiet put is not
// answered: the sender does not wait for it, and what it sends the receiver
// next on the link (a graph's PeerSignal) comes after the data is in place.
// A quiet put the receiver cannot place ends the link, with why.
type PeerPut struct {
	Xfer  uint64 // id
	Dst   uint64 // ptr2
	Size  uint64
	Quiet bool // sent as the kernel field's bit 0
}

// Launch (→d) runs kernel Kernel of the image with Args (AppendArgs) in
// Queue's order. A launch with a Stop number can be asked to stop alone
// (StopLaunch), until the queue's next Sync.
type Launch struct {
	Queue  uint32
	Kernel uint32
	Stop   uint64 // id; 0: none
	Args   []byte // payload
}

// StopLaunch (→d) asks the kernel of the launch numbered Stop to stop: its
// Ctx's Done channel closes (the construct's context ended). A number the
// device no longer knows (its queue synchronized since) is ignored.
type StopLaunch struct {
	Stop uint64 // id
}

// Record (→d) records Event at the end of Queue: the device sends Event
// when the queue reaches it.
type Record struct {
	Queue uint32
	Event uint64 // id
}

// Wait (→d) makes Queue wait for Event, one of this device's.
type Wait struct {
	Queue uint32
	Event uint64 // id
}

// WaitPeer (→d) makes Queue wait until device Peer says (PeerEvent) that the
// event behind wait Wait fired. The host asked Peer with Notify.
type WaitPeer struct {
	Queue uint32
	Peer  uint32 // kernel
	Wait  uint64 // ptr
}

// Notify (→d) asks the device to tell device Peer, as wait Wait, when its
// Event fires.
type Notify struct {
	Event uint64 // id
	Peer  uint32 // kernel
	Wait  uint64 // ptr
}

// PeerEvent (between peers) says the event behind wait Wait fired, with
// Code and Text its error.
type PeerEvent struct {
	Wait uint64 // id
	Status
}

// Event (→h) says Event fired, with Code and Text its error.
type Event struct {
	Event uint64 // id
	Status
}

// Sync (→d) marks Queue: the device answers SyncDone with the same Seq
// when the queue reaches the mark.
type Sync struct {
	Queue uint32
	Seq   uint64 // id
}

// SyncDone (→h) answers Sync Seq of Queue, with the queue's first error
// since the last mark.
type SyncDone struct {
	Queue uint32
	Seq   uint64 // id
	Status
}

// Forget (→d) lists events the host closed after they fired: no queue
// will wait on them again.
type Forget struct {
	Events []uint64 // payload, 8 bytes each
}

// Exit (→d) ends the session. On an MPI job's announcement link it ends
// the device rank; Unfinalized then says that the host does not finalize
// MPI (it lost a rank, and MPI_Finalize would wait for that rank forever),
// so the device rank exits without finalizing either.
type Exit struct {
	Unfinalized bool // sent as the ID's bit 0
}

// Ping (↔) says the link is alive (every frame counts as a sign of life).
type Ping struct{}

// Tag (→d) times Queue's next operations under Tag (0: stop timing);
// HostClock is the host's clock when it was sent.
type Tag struct {
	Queue     uint32
	Tag       uint64 // id
	HostClock uint64 // ptr
}

// Times (→h) carries timed operations of Queue (AppendTimes). DevClock is the
// device's clock when it was sent.
type Times struct {
	Queue    uint32
	DevClock uint64 // ptr
	Ops      []byte // payload
}

// Cancel (→d) asks the device's running and later kernels to stop: their
// Ctx's Done channel closes (the host's Stop has begun).
type Cancel struct{}

// Announce (MPI, host rank → device ranks) opens session Gen.
type Announce struct{ Gen uint64 }

// RawBench (MPI, host rank → a device rank) runs N raw round trips of Size
// bytes between the two ranks. With Stream they go one way. It is for the
// bench's baseline.
type RawBench struct {
	N, Size uint64
	Stream  bool
}
