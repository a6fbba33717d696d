// Package proto is the wire protocol between a goffload host and its remote
// device processes: framed, binary, little-endian, versioned. It holds plain
// encoding and decoding with no I/O policy, so it can be tested and fuzzed on
// bytes.
//
// A frame is an envelope, the same for every type:
//
//	uint32 n      length of what follows (header and payload), n <= MaxFrame
//	uint8  type
//	uint32 queue
//	uint64 id
//	uint64 ptr
//	uint64 ptr2
//	uint64 size
//	uint32 kernel
//	uint8  code   error code (0: none)
//	uint32 nt     length of text, then nt bytes of text
//	…             payload: the rest of the frame
//
// Engines do not read the envelope's fields. Each message has a typed frame
// (frames.go) whose fields are named for what they hold and say where they
// travel. Encode and As convert, and As checks what the type constrains.
//
// Every length read from the wire is checked against the frame's own length
// and the limits below before anything is allocated.
package proto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Version is the protocol version; a peer with another version is refused at
// hello.
const Version = 7

// Magic opens every hello.
const Magic = "GOFFLOAD"

// Limits on what the wire may carry.
const (
	HeaderSize = 1 + 4 + 8 + 8 + 8 + 8 + 4 + 1 + 4 // after the length word
	MaxText    = 64 << 10
	// Fragment is the payload size of a transfer fragment. MaxFrame leaves
	// room for a header and text around it.
	Fragment = 1 << 20
	MaxFrame = Fragment + HeaderSize + MaxText
	// MaxInline is the largest submit sent inside its request. Larger ones
	// are pulled by the device in fragments when their turn comes.
	MaxInline = 64 << 10
)

// Type is a frame's type.
type Type uint8

// Frame types. "→d" frames go from host to device, "→h" from device to host,
// "↔" both ways; "peer" frames go between device processes. The typed
// frames (frames.go) say what each carries.
const (
	THello        Type = iota + 1 // ↔ Hello
	TAuth                         // ↔ Auth
	TReply                        // →h Reply
	TAlloc                        // →d Alloc
	TFree                         // →d Free
	TInfo                         // →d Info
	TCloseQueue                   // →d CloseQueue
	TSubmit                       // →d Submit (data inline)
	TPull                         // →h Pull
	TData                         // ↔ Data
	TRetrieve                     // →d Retrieve
	TXferDone                     // ↔ XferDone
	TExchange                     // →d Exchange
	TLaunch                       // →d Launch
	TRecord                       // →d Record
	TWait                         // →d Wait
	TSync                         // →d Sync
	TSyncDone                     // →h SyncDone
	TEvent                        // →h Event
	TNotify                       // →d Notify
	TExit                         // →d Exit
	TForget                       // →d Forget
	TPing                         // ↔ Ping
	TTag                          // →d Tag
	TClock                        // →d Clock
	TTimes                        // →h Times
	TSubmitPulled                 // →d SubmitPulled
	TSubmitPushed                 // →d SubmitPushed
	TWaitPeer                     // →d WaitPeer
	TPeerPut                      // peer PeerPut
	TPeerEvent                    // peer PeerEvent
	TAnnounce                     // MPI Announce
	TRawBench                     // MPI RawBench
	TCancel                       // →d Cancel
	TStopLaunch                   // →d StopLaunch
	TAddr                         // →d Addr
	TServe                        // →d Serve
	TSibling                      // →d Sibling
	TGraphDef                     // →d GraphDef
	TGraphSet                     // →d GraphSet
	TGraphRun                     // →d GraphRun
	TGraphFree                    // →d GraphFree
	TPeerSignal                   // peer PeerSignal
	tMax
)

var typeNames = [...]string{"", "hello", "auth", "reply", "alloc", "free", "info", "closequeue", "submit", "pull",
	"data", "retrieve", "xferdone", "exchange", "launch", "record", "wait", "sync", "syncdone", "event", "notify", "exit", "forget", "ping", "tag", "clock", "times",
	"submitpulled", "submitpushed", "waitpeer", "peerput", "peerevent", "announce", "rawbench", "cancel", "stoplaunch", "addr", "serve", "sibling",
	"graphdef", "graphset", "graphrun", "graphfree", "peersignal"}

// String is the type's name.
func (t Type) String() string {
	if t > 0 && t < tMax {
		return typeNames[t]
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// Msg is a decoded frame header. Decode sets Payload, and AppendFrame users
// set it for small payloads. Stream readers read large payloads themselves:
// PayloadLen bytes follow the header on the stream.
type Msg struct {
	Type       Type
	Queue      uint32
	ID         uint64
	Ptr        uint64
	Ptr2       uint64
	Size       uint64
	Kernel     uint32
	Code       uint8
	Text       string
	Payload    []byte
	PayloadLen int
}

// ErrFrame is wrapped by every decoding error.
var ErrFrame = errors.New("malformed frame")

// AppendFrame appends m's frame, with payload as its payload, to b.
func AppendFrame(b []byte, m *Msg, payload []byte) []byte {
	n := HeaderSize + len(m.Text) + len(payload)
	b = binary.LittleEndian.AppendUint32(b, uint32(n))
	b = AppendHeader(b, m, len(payload))
	return append(b, payload...)
}

// AppendHeader appends the frame's header (after the length word) without the
// payload. It is for writers that send the payload from its own memory.
func AppendHeader(b []byte, m *Msg, payloadLen int) []byte {
	b = append(b, byte(m.Type))
	b = binary.LittleEndian.AppendUint32(b, m.Queue)
	b = binary.LittleEndian.AppendUint64(b, m.ID)
	b = binary.LittleEndian.AppendUint64(b, m.Ptr)
	b = binary.LittleEndian.AppendUint64(b, m.Ptr2)
	b = binary.LittleEndian.AppendUint64(b, m.Size)
	b = binary.LittleEndian.AppendUint32(b, m.Kernel)
	b = append(b, m.Code)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(m.Text)))
	return append(b, m.Text...)
}

// FrameLen is the value of the length word of a frame for m and a payload
// of payloadLen bytes.
func FrameLen(m *Msg, payloadLen int) int { return HeaderSize + len(m.Text) + payloadLen }

// ParseHeader decodes a frame's header from body, the n bytes after the
// length word. body holds at least the header and text; the payload may
// follow or be left on the stream. n is the length word. It sets PayloadLen
// and, if body holds it, Payload (aliasing body).
func ParseHeader(body []byte, n int) (*Msg, error) {
	if n < HeaderSize || n > MaxFrame {
		return nil, fmt.Errorf("%w: length %d outside [%d, %d]", ErrFrame, n, HeaderSize, MaxFrame)
	}
	if len(body) < HeaderSize {
		return nil, fmt.Errorf("%w: %d header bytes, want %d", ErrFrame, len(body), HeaderSize)
	}
	m := &Msg{Type: Type(body[0])}
	if m.Type == 0 || m.Type >= tMax {
		return nil, fmt.Errorf("%w: unknown type %d", ErrFrame, body[0])
	}
	le := binary.LittleEndian
	m.Queue = le.Uint32(body[1:])
	m.ID = le.Uint64(body[5:])
	m.Ptr = le.Uint64(body[13:])
	m.Ptr2 = le.Uint64(body[21:])
	m.Size = le.Uint64(body[29:])
	m.Kernel = le.Uint32(body[37:])
	m.Code = body[41]
	nt := int(le.Uint32(body[42:]))
	if nt > MaxText || HeaderSize+nt > n {
		return nil, fmt.Errorf("%w: text of %d bytes in a frame of %d", ErrFrame, nt, n)
	}
	if len(body) < HeaderSize+nt {
		return nil, fmt.Errorf("%w: text cut short", ErrFrame)
	}
	m.Text = string(body[HeaderSize : HeaderSize+nt])
	m.PayloadLen = n - HeaderSize - nt
	if rest := body[HeaderSize+nt:]; len(rest) >= m.PayloadLen {
		m.Payload = rest[:m.PayloadLen]
	}
	return m, nil
}

// Decode decodes one whole frame from the start of b and returns it with the
// number of bytes used.
func Decode(b []byte) (*Msg, int, error) {
	if len(b) < 4 {
		return nil, 0, fmt.Errorf("%w: %d bytes, no length word", ErrFrame, len(b))
	}
	n := int(binary.LittleEndian.Uint32(b))
	if n > len(b)-4 {
		if n < HeaderSize || n > MaxFrame {
			return nil, 0, fmt.Errorf("%w: length %d outside [%d, %d]", ErrFrame, n, HeaderSize, MaxFrame)
		}
		return nil, 0, fmt.Errorf("%w: frame of %d bytes, %d present", ErrFrame, n, len(b)-4)
	}
	m, err := ParseHeader(b[4:4+n], n)
	if err != nil {
		return nil, 0, err
	}
	return m, 4 + n, nil
}

// Reader reads frames from a stream. Payloads up to small are read into an
// internal buffer, valid until the next ReadMsg. Larger payloads are left on
// the stream. The caller reads them with ReadPayload, straight into its own
// memory.
type Reader struct {
	r   io.Reader
	hdr []byte
	buf []byte
}

// NewReader returns a frame reader on r.
func NewReader(r io.Reader) *Reader {
	return &Reader{r: r, hdr: make([]byte, 4+HeaderSize+MaxText)}
}

// ReadMsg reads the next frame's header. If the payload is at most MaxInline,
// it is read too and set in m.Payload. Otherwise m.Payload is nil. The caller
// must then call ReadPayload (or Discard) before the next ReadMsg.
func (r *Reader) ReadMsg() (*Msg, error) {
	if _, err := io.ReadFull(r.r, r.hdr[:4]); err != nil {
		return nil, err
	}
	n := int(binary.LittleEndian.Uint32(r.hdr))
	if n < HeaderSize || n > MaxFrame {
		return nil, fmt.Errorf("%w: length %d outside [%d, %d]", ErrFrame, n, HeaderSize, MaxFrame)
	}
	if _, err := io.ReadFull(r.r, r.hdr[4:4+HeaderSize]); err != nil {
		return nil, unexpected(err)
	}
	nt := int(binary.LittleEndian.Uint32(r.hdr[4+42:]))
	if nt > MaxText || HeaderSize+nt > n {
		return nil, fmt.Errorf("%w: text of %d bytes in a frame of %d", ErrFrame, nt, n)
	}
	if _, err := io.ReadFull(r.r, r.hdr[4+HeaderSize:4+HeaderSize+nt]); err != nil {
		return nil, unexpected(err)
	}
	m, err := ParseHeader(r.hdr[4:4+HeaderSize+nt], n)
	if err != nil {
		return nil, err
	}
	if m.PayloadLen <= MaxInline {
		if cap(r.buf) < m.PayloadLen {
			r.buf = make([]byte, MaxInline)
		}
		m.Payload = r.buf[:m.PayloadLen]
		if _, err := io.ReadFull(r.r, m.Payload); err != nil {
			return nil, unexpected(err)
		}
	}
	return m, nil
}

// ReadPayload reads m's payload into dst, which must be PayloadLen bytes.
func (r *Reader) ReadPayload(m *Msg, dst []byte) error {
	if len(dst) != m.PayloadLen {
		return fmt.Errorf("%w: payload of %d bytes into %d", ErrFrame, m.PayloadLen, len(dst))
	}
	_, err := io.ReadFull(r.r, dst)
	return unexpected(err)
}

// Discard skips m's payload.
func (r *Reader) Discard(m *Msg) error {
	_, err := io.CopyN(io.Discard, r.r, int64(m.PayloadLen))
	return unexpected(err)
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
