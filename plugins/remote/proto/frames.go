package proto

import (
	"encoding/binary"
	"fmt"
)

// Typed frames: one Go type per message, with its fields named for what
// they hold. A typed frame travels in the envelope Msg (the header the
// package doc draws); which of the envelope's fields each type uses is
// written beside its fields. Engines build frames with Encode and read
// them with As, which checks the type and every field the type constrains
// (sizes, payload lengths), so a handler sees only frames that make sense.
//
// Versions before 6 overloaded the envelope: ptr2 said how a submit's data
// came, whether an alloc or free was answered and whether a wait was on a
// peer's event; kernel held a peer device; an exchange and an event meant
// one thing from the host and another from a peer. Each of those is its own
// type now.

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

// As reads m as a frame of type T: an error wrapping ErrFrame if m is of
// another type or breaks T's rules.
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

// Parse reads m as the typed frame its type says (a pointer: *Launch for
// a TLaunch), checked as As checks it.
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
	TTimes:        func() Frame { return new(Times) },
	TSubmitPulled: func() Frame { return new(SubmitPulled) },
	TSubmitPushed: func() Frame { return new(SubmitPushed) },
	TWaitPeer:     func() Frame { return new(WaitPeer) },
	TPeerPut:      func() Frame { return new(PeerPut) },
	TPeerEvent:    func() Frame { return new(PeerEvent) },
	TAnnounce:     func() Frame { return new(Announce) },
	TRawBench:     func() Frame { return new(RawBench) },
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

// Status is an outcome carried by an answer: Code 0 is success; otherwise
// Code classifies the error and Text says it. (A Reply's or Hello's Text
// is its content when Code is 0.)
type Status struct {
	Code uint8
	Text string
}

// Hello (↔) opens a session: Text is magic, version and image digest; Num
// (→d) the device's number. A refusal carries Code and the reason in Text.
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

// Clock (→d) asks for the device's clock: a Reply with it in Value.
type Clock struct{ Req uint64 }

// CloseQueue (→d) ends Queue once its operations are done.
type CloseQueue struct{ Queue uint32 }

// Submit (→d) copies Data, at most MaxInline bytes carried in the frame,
// to Dst in Queue's order.
type Submit struct {
	Queue uint32
	Dst   uint64 // ptr
	Data  []byte // payload; size is its length
}

// SubmitPulled (→d) copies Size bytes to Dst in Queue's order: when the
// queue reaches it the device sends Pull, and the data comes as transfer
// Xfer.
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
// Queue's order; the host acknowledges it with XferDone.
type Retrieve struct {
	Queue uint32
	Xfer  uint64 // id
	Src   uint64 // ptr
	Size  uint64
}

// XferDone says transfer Xfer is in place: →d, a retrieve's data reached
// host memory; between peers, a PeerPut's data is in the receiver's
// memory (or, with Code set, could not be put there).
type XferDone struct {
	Xfer uint64 // id
	Status
}

// Exchange (→d) copies Size bytes from Src on this device to Dst on device
// Peer (which may be this device), in Queue's order.
type Exchange struct {
	Queue uint32
	Src   uint64 // ptr
	Dst   uint64 // ptr2
	Size  uint64
	Peer  uint32 // kernel
}

// PeerPut (between peers) says Size bytes for Dst follow as transfer Xfer;
// the receiver answers XferDone once they are in place.
type PeerPut struct {
	Xfer uint64 // id
	Dst  uint64 // ptr2
	Size uint64
}

// Launch (→d) runs kernel Kernel of the image with Args (AppendArgs) in
// Queue's order.
type Launch struct {
	Queue  uint32
	Kernel uint32
	Args   []byte // payload
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

// WaitPeer (→d) makes Queue wait until device Peer says (PeerEvent) that
// the event behind wait Wait fired; the host asked Peer with Notify.
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

// Exit (→d) ends the session.
type Exit struct{}

// Ping (↔) says the link is alive (every frame counts as a sign of life).
type Ping struct{}

// Tag (→d) times Queue's next operations under Tag (0: stop timing);
// HostClock is the host's clock when it was sent.
type Tag struct {
	Queue     uint32
	Tag       uint64 // id
	HostClock uint64 // ptr
}

// Times (→h) carries timed operations of Queue (AppendTimes); DevClock is
// the device's clock when it was sent.
type Times struct {
	Queue    uint32
	DevClock uint64 // ptr
	Ops      []byte // payload
}

// Announce (MPI, host rank → device ranks) opens session Gen.
type Announce struct{ Gen uint64 }

// RawBench (MPI, host rank → a device rank) runs N raw round trips of Size
// bytes (Stream: one way) between the two ranks, for the bench's baseline.
type RawBench struct {
	N, Size uint64
	Stream  bool
}

func (Hello) Type() Type        { return THello }
func (Auth) Type() Type         { return TAuth }
func (Reply) Type() Type        { return TReply }
func (Alloc) Type() Type        { return TAlloc }
func (Free) Type() Type         { return TFree }
func (Info) Type() Type         { return TInfo }
func (Clock) Type() Type        { return TClock }
func (CloseQueue) Type() Type   { return TCloseQueue }
func (Submit) Type() Type       { return TSubmit }
func (SubmitPulled) Type() Type { return TSubmitPulled }
func (SubmitPushed) Type() Type { return TSubmitPushed }
func (Pull) Type() Type         { return TPull }
func (Data) Type() Type         { return TData }
func (Retrieve) Type() Type     { return TRetrieve }
func (XferDone) Type() Type     { return TXferDone }
func (Exchange) Type() Type     { return TExchange }
func (PeerPut) Type() Type      { return TPeerPut }
func (Launch) Type() Type       { return TLaunch }
func (Record) Type() Type       { return TRecord }
func (Wait) Type() Type         { return TWait }
func (WaitPeer) Type() Type     { return TWaitPeer }
func (Notify) Type() Type       { return TNotify }
func (PeerEvent) Type() Type    { return TPeerEvent }
func (Event) Type() Type        { return TEvent }
func (Sync) Type() Type         { return TSync }
func (SyncDone) Type() Type     { return TSyncDone }
func (Forget) Type() Type       { return TForget }
func (Exit) Type() Type         { return TExit }
func (Ping) Type() Type         { return TPing }
func (Tag) Type() Type          { return TTag }
func (Times) Type() Type        { return TTimes }
func (Announce) Type() Type     { return TAnnounce }
func (RawBench) Type() Type     { return TRawBench }

func (st *Status) put(m *Msg) { m.Code, m.Text = st.Code, st.Text }
func (st *Status) get(m *Msg) { st.Code, st.Text = m.Code, m.Text }

func (f *Hello) put(m *Msg) { m.Kernel = f.Num; f.Status.put(m) }
func (f *Hello) get(m *Msg) error {
	f.Num = m.Kernel
	f.Status.get(m)
	return noPayload(m)
}

func (f *Auth) put(m *Msg) { f.Status.put(m) }
func (f *Auth) get(m *Msg) error {
	f.Status.get(m)
	return noPayload(m)
}

func (f *Reply) put(m *Msg) { m.ID, m.Ptr = f.Req, f.Value; f.Status.put(m) }
func (f *Reply) get(m *Msg) error {
	f.Req, f.Value = m.ID, m.Ptr
	f.Status.get(m)
	return noPayload(m)
}

func (f *Alloc) put(m *Msg) { m.Ptr, m.Size = f.Ptr, f.Size }
func (f *Alloc) get(m *Msg) error {
	f.Ptr, f.Size = m.Ptr, m.Size
	if err := checkSize(f.Size); err != nil {
		return err
	}
	return noPayload(m)
}

func (f *Free) put(m *Msg) { m.Ptr = f.Ptr }
func (f *Free) get(m *Msg) error {
	f.Ptr = m.Ptr
	return noPayload(m)
}

func (f *Info) put(m *Msg) { m.ID = f.Req }
func (f *Info) get(m *Msg) error {
	f.Req = m.ID
	return noPayload(m)
}

func (f *Clock) put(m *Msg) { m.ID = f.Req }
func (f *Clock) get(m *Msg) error {
	f.Req = m.ID
	return noPayload(m)
}

func (f *CloseQueue) put(m *Msg) { m.Queue = f.Queue }
func (f *CloseQueue) get(m *Msg) error {
	f.Queue = m.Queue
	return noPayload(m)
}

func (f *Submit) put(m *Msg) {
	m.Queue, m.Ptr, m.Size, m.Payload = f.Queue, f.Dst, uint64(len(f.Data)), f.Data
}
func (f *Submit) get(m *Msg) error {
	if m.Size > MaxInline || uint64(m.PayloadLen) != m.Size {
		return fmt.Errorf("inline submit of %d bytes carries %d", m.Size, m.PayloadLen)
	}
	if err := wholePayload(m); err != nil {
		return err
	}
	f.Queue, f.Dst, f.Data = m.Queue, m.Ptr, m.Payload
	return nil
}

func putXferTo(m *Msg, queue uint32, xfer, dst, size uint64) {
	m.Queue, m.ID, m.Ptr, m.Size = queue, xfer, dst, size
}

func getXferTo(m *Msg) (queue uint32, xfer, dst, size uint64, err error) {
	if err := checkSize(m.Size); err != nil {
		return 0, 0, 0, 0, err
	}
	return m.Queue, m.ID, m.Ptr, m.Size, noPayload(m)
}

func (f *SubmitPulled) put(m *Msg) { putXferTo(m, f.Queue, f.Xfer, f.Dst, f.Size) }
func (f *SubmitPulled) get(m *Msg) (err error) {
	f.Queue, f.Xfer, f.Dst, f.Size, err = getXferTo(m)
	return err
}

func (f *SubmitPushed) put(m *Msg) { putXferTo(m, f.Queue, f.Xfer, f.Dst, f.Size) }
func (f *SubmitPushed) get(m *Msg) (err error) {
	f.Queue, f.Xfer, f.Dst, f.Size, err = getXferTo(m)
	return err
}

func (f *Retrieve) put(m *Msg) { putXferTo(m, f.Queue, f.Xfer, f.Src, f.Size) }
func (f *Retrieve) get(m *Msg) error { // any size: the device refuses what its memory does not hold
	f.Queue, f.Xfer, f.Src, f.Size = m.Queue, m.ID, m.Ptr, m.Size
	return noPayload(m)
}

func (f *Pull) put(m *Msg) { m.Queue, m.ID = f.Queue, f.Xfer }
func (f *Pull) get(m *Msg) error {
	f.Queue, f.Xfer = m.Queue, m.ID
	return noPayload(m)
}

// Data's payload is the fragment, which stream readers may leave on the
// stream: get takes any payload length.
func (f *Data) put(m *Msg) { m.ID, m.Ptr = f.Xfer, f.Off }
func (f *Data) get(m *Msg) error {
	f.Xfer, f.Off = m.ID, m.Ptr
	return nil
}

func (f *XferDone) put(m *Msg) { m.ID = f.Xfer; f.Status.put(m) }
func (f *XferDone) get(m *Msg) error {
	f.Xfer = m.ID
	f.Status.get(m)
	return noPayload(m)
}

func (f *Exchange) put(m *Msg) {
	m.Queue, m.Ptr, m.Ptr2, m.Size, m.Kernel = f.Queue, f.Src, f.Dst, f.Size, f.Peer
}
func (f *Exchange) get(m *Msg) error { // any size: the device refuses what its memory does not hold
	f.Queue, f.Src, f.Dst, f.Size, f.Peer = m.Queue, m.Ptr, m.Ptr2, m.Size, m.Kernel
	return noPayload(m)
}

func (f *PeerPut) put(m *Msg) { m.ID, m.Ptr2, m.Size = f.Xfer, f.Dst, f.Size }
func (f *PeerPut) get(m *Msg) error {
	f.Xfer, f.Dst, f.Size = m.ID, m.Ptr2, m.Size
	if err := checkSize(f.Size); err != nil {
		return err
	}
	return noPayload(m)
}

func (f *Launch) put(m *Msg) { m.Queue, m.Kernel, m.Payload = f.Queue, f.Kernel, f.Args }
func (f *Launch) get(m *Msg) error {
	if err := wholePayload(m); err != nil {
		return err
	}
	f.Queue, f.Kernel, f.Args = m.Queue, m.Kernel, m.Payload
	return nil
}

func (f *Record) put(m *Msg) { m.Queue, m.ID = f.Queue, f.Event }
func (f *Record) get(m *Msg) error {
	f.Queue, f.Event = m.Queue, m.ID
	return noPayload(m)
}

func (f *Wait) put(m *Msg) { m.Queue, m.ID = f.Queue, f.Event }
func (f *Wait) get(m *Msg) error {
	f.Queue, f.Event = m.Queue, m.ID
	return noPayload(m)
}

func (f *WaitPeer) put(m *Msg) { m.Queue, m.Kernel, m.Ptr = f.Queue, f.Peer, f.Wait }
func (f *WaitPeer) get(m *Msg) error {
	f.Queue, f.Peer, f.Wait = m.Queue, m.Kernel, m.Ptr
	return noPayload(m)
}

func (f *Notify) put(m *Msg) { m.ID, m.Kernel, m.Ptr = f.Event, f.Peer, f.Wait }
func (f *Notify) get(m *Msg) error {
	f.Event, f.Peer, f.Wait = m.ID, m.Kernel, m.Ptr
	return noPayload(m)
}

func (f *PeerEvent) put(m *Msg) { m.ID = f.Wait; f.Status.put(m) }
func (f *PeerEvent) get(m *Msg) error {
	f.Wait = m.ID
	f.Status.get(m)
	return noPayload(m)
}

func (f *Event) put(m *Msg) { m.ID = f.Event; f.Status.put(m) }
func (f *Event) get(m *Msg) error {
	f.Event = m.ID
	f.Status.get(m)
	return noPayload(m)
}

func (f *Sync) put(m *Msg) { m.Queue, m.ID = f.Queue, f.Seq }
func (f *Sync) get(m *Msg) error {
	f.Queue, f.Seq = m.Queue, m.ID
	return noPayload(m)
}

func (f *SyncDone) put(m *Msg) { m.Queue, m.ID = f.Queue, f.Seq; f.Status.put(m) }
func (f *SyncDone) get(m *Msg) error {
	f.Queue, f.Seq = m.Queue, m.ID
	f.Status.get(m)
	return noPayload(m)
}

func (f *Forget) put(m *Msg) {
	b := make([]byte, 0, 8*len(f.Events))
	for _, id := range f.Events {
		b = binary.LittleEndian.AppendUint64(b, id)
	}
	m.Payload = b
}
func (f *Forget) get(m *Msg) error {
	if err := wholePayload(m); err != nil {
		return err
	}
	if len(m.Payload)%8 != 0 {
		return fmt.Errorf("forget list of %d bytes", len(m.Payload))
	}
	f.Events = make([]uint64, 0, len(m.Payload)/8)
	for b := m.Payload; len(b) >= 8; b = b[8:] {
		f.Events = append(f.Events, binary.LittleEndian.Uint64(b))
	}
	return nil
}

func (f *Exit) put(m *Msg)       {}
func (f *Exit) get(m *Msg) error { return noPayload(m) }
func (f *Ping) put(m *Msg)       {}
func (f *Ping) get(m *Msg) error { return noPayload(m) }

func (f *Tag) put(m *Msg) { m.Queue, m.ID, m.Ptr = f.Queue, f.Tag, f.HostClock }
func (f *Tag) get(m *Msg) error {
	f.Queue, f.Tag, f.HostClock = m.Queue, m.ID, m.Ptr
	return noPayload(m)
}

func (f *Times) put(m *Msg) { m.Queue, m.Ptr, m.Payload = f.Queue, f.DevClock, f.Ops }
func (f *Times) get(m *Msg) error {
	if err := wholePayload(m); err != nil {
		return err
	}
	f.Queue, f.DevClock, f.Ops = m.Queue, m.Ptr, m.Payload
	return nil
}

func (f *Announce) put(m *Msg) { m.ID = f.Gen }
func (f *Announce) get(m *Msg) error {
	f.Gen = m.ID
	return noPayload(m)
}

func (f *RawBench) put(m *Msg) {
	m.Ptr, m.Size = f.N, f.Size
	if f.Stream {
		m.Code = 1
	}
}
func (f *RawBench) get(m *Msg) error {
	if m.Ptr > 1<<31 || m.Size > 1<<31 {
		return fmt.Errorf("raw bench of %d round trips of %d bytes", m.Ptr, m.Size)
	}
	f.N, f.Size, f.Stream = m.Ptr, m.Size, m.Code == 1
	return noPayload(m)
}
