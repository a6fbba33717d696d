package proto

// How each typed frame maps onto the envelope (Type, put, get), and the
// checks that get makes.

import (
	"encoding/binary"
	"fmt"
)

// Type is THello.
func (Hello) Type() Type { return THello }

// Type is TAuth.
func (Auth) Type() Type { return TAuth }

// Type is TReply.
func (Reply) Type() Type { return TReply }

// Type is TAlloc.
func (Alloc) Type() Type { return TAlloc }

// Type is TFree.
func (Free) Type() Type { return TFree }

// Type is TInfo.
func (Info) Type() Type { return TInfo }

// Type is TClock.
func (Clock) Type() Type { return TClock }

// Type is TServe.
func (Serve) Type() Type { return TServe }

// Type is TSibling.
func (Sibling) Type() Type { return TSibling }

// Type is TCloseQueue.
func (CloseQueue) Type() Type { return TCloseQueue }

// Type is TSubmit.
func (Submit) Type() Type { return TSubmit }

// Type is TSubmitPulled.
func (SubmitPulled) Type() Type { return TSubmitPulled }

// Type is TSubmitPushed.
func (SubmitPushed) Type() Type { return TSubmitPushed }

// Type is TPull.
func (Pull) Type() Type { return TPull }

// Type is TData.
func (Data) Type() Type { return TData }

// Type is TRetrieve.
func (Retrieve) Type() Type { return TRetrieve }

// Type is TXferDone.
func (XferDone) Type() Type { return TXferDone }

// Type is TExchange.
func (Exchange) Type() Type { return TExchange }

// Type is TPeerPut.
func (PeerPut) Type() Type { return TPeerPut }

// Type is TLaunch.
func (Launch) Type() Type { return TLaunch }

// Type is TRecord.
func (Record) Type() Type { return TRecord }

// Type is TWait.
func (Wait) Type() Type { return TWait }

// Type is TWaitPeer.
func (WaitPeer) Type() Type { return TWaitPeer }

// Type is TNotify.
func (Notify) Type() Type { return TNotify }

// Type is TPeerEvent.
func (PeerEvent) Type() Type { return TPeerEvent }

// Type is TEvent.
func (Event) Type() Type { return TEvent }

// Type is TSync.
func (Sync) Type() Type { return TSync }

// Type is TSyncDone.
func (SyncDone) Type() Type { return TSyncDone }

// Type is TForget.
func (Forget) Type() Type { return TForget }

// Type is TExit.
func (Exit) Type() Type { return TExit }

// Type is TPing.
func (Ping) Type() Type { return TPing }

// Type is TTag.
func (Tag) Type() Type { return TTag }

// Type is TTimes.
func (Times) Type() Type { return TTimes }

// Type is TAddr.
func (Addr) Type() Type { return TAddr }

// Type is TStopLaunch.
func (StopLaunch) Type() Type { return TStopLaunch }

// Type is TCancel.
func (Cancel) Type() Type { return TCancel }

// Type is TAnnounce.
func (Announce) Type() Type { return TAnnounce }

// Type is TRawBench.
func (RawBench) Type() Type { return TRawBench }

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

func (f *Addr) put(m *Msg) { m.ID, m.Ptr = f.Req, f.Ptr }
func (f *Addr) get(m *Msg) error {
	f.Req, f.Ptr = m.ID, m.Ptr
	return noPayload(m)
}

func (f *Sibling) put(m *Msg) { m.ID, m.Queue = f.Token, f.Peer }
func (f *Sibling) get(m *Msg) error {
	f.Token, f.Peer = m.ID, m.Queue
	return noPayload(m)
}

func (f *Serve) put(m *Msg) { m.ID, m.Queue = f.Req, f.Index }
func (f *Serve) get(m *Msg) error {
	f.Req, f.Index = m.ID, m.Queue
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

func (f *PeerPut) put(m *Msg) {
	m.ID, m.Ptr2, m.Size = f.Xfer, f.Dst, f.Size
	if f.Quiet {
		m.Kernel = 1
	}
}
func (f *PeerPut) get(m *Msg) error {
	f.Xfer, f.Dst, f.Size = m.ID, m.Ptr2, m.Size
	if m.Kernel > 1 {
		return fmt.Errorf("%w: peer put with flags %#x, want 0 or 1 (quiet)", ErrFrame, m.Kernel)
	}
	f.Quiet = m.Kernel == 1
	if err := checkSize(f.Size); err != nil {
		return err
	}
	return noPayload(m)
}

func (f *Launch) put(m *Msg) { m.Queue, m.Kernel, m.ID, m.Payload = f.Queue, f.Kernel, f.Stop, f.Args }
func (f *Launch) get(m *Msg) error {
	if err := wholePayload(m); err != nil {
		return err
	}
	f.Queue, f.Kernel, f.Stop, f.Args = m.Queue, m.Kernel, m.ID, m.Payload
	return nil
}

func (f *StopLaunch) put(m *Msg) { m.ID = f.Stop }
func (f *StopLaunch) get(m *Msg) error {
	f.Stop = m.ID
	return noPayload(m)
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

func (f *Exit) put(m *Msg) {
	if f.Unfinalized {
		m.ID = 1
	}
}
func (f *Exit) get(m *Msg) error {
	if m.ID > 1 {
		return fmt.Errorf("exit with flags %#x, want 0 or 1", m.ID)
	}
	f.Unfinalized = m.ID == 1
	return noPayload(m)
}
func (f *Ping) put(m *Msg)       {}
func (f *Ping) get(m *Msg) error { return noPayload(m) }

func (f *Cancel) put(m *Msg)       {}
func (f *Cancel) get(m *Msg) error { return noPayload(m) }

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
