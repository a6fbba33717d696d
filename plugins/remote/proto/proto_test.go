package proto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"reflect"
	"testing"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugin"
)

func TestFrameRoundTrip(t *testing.T) {
	msgs := []*Msg{
		{Type: THello, Text: Magic + " 1 abcdef"},
		{Type: TSubmit, Queue: 7, ID: 1 << 40, Ptr: 0xdeadbeef, Size: 5, Payload: []byte("hello")},
		{Type: TExchange, Queue: 1, ID: 2, Ptr: 3, Ptr2: 4, Size: 5, Kernel: 6},
		{Type: TSyncDone, Queue: 3, ID: 9, Code: 4, Text: "kernel failed"},
		{Type: TData, ID: 5, Ptr: 1 << 20, Payload: bytes.Repeat([]byte{7}, Fragment)},
	}
	var stream []byte
	for _, m := range msgs {
		stream = AppendFrame(stream, m, m.Payload)
	}
	// Decode from bytes.
	rest := stream
	for i, want := range msgs {
		got, n, err := Decode(rest)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		rest = rest[n:]
		checkMsg(t, i, got, want, got.Payload)
	}
	if len(rest) != 0 {
		t.Fatalf("%d bytes left", len(rest))
	}
	// Read from a stream: large payloads are left for ReadPayload.
	r := NewReader(bytes.NewReader(stream))
	for i, want := range msgs {
		got, err := r.ReadMsg()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		payload := got.Payload
		if got.PayloadLen > MaxInline {
			if payload != nil {
				t.Fatalf("frame %d: large payload read into the reader's buffer", i)
			}
			payload = make([]byte, got.PayloadLen)
			if err := r.ReadPayload(got, payload); err != nil {
				t.Fatal(err)
			}
		}
		checkMsg(t, i, got, want, payload)
	}
	if _, err := r.ReadMsg(); err != io.EOF {
		t.Fatalf("at the end: %v, want EOF", err)
	}
}

func checkMsg(t *testing.T, i int, got, want *Msg, payload []byte) {
	t.Helper()
	if got.Type != want.Type || got.Queue != want.Queue || got.ID != want.ID || got.Ptr != want.Ptr || got.Ptr2 != want.Ptr2 ||
		got.Size != want.Size || got.Kernel != want.Kernel || got.Code != want.Code || got.Text != want.Text || !bytes.Equal(payload, want.Payload) {
		t.Fatalf("frame %d: got %+v, want %+v", i, got, want)
	}
}

func TestMalformedFrames(t *testing.T) {
	good := AppendFrame(nil, &Msg{Type: TAlloc, ID: 1, Size: 10, Text: "abc"}, nil)
	cases := map[string][]byte{
		"empty":          {},
		"short length":   {1, 0},
		"huge length":    {0xff, 0xff, 0xff, 0x7f, 1},
		"tiny length":    {3, 0, 0, 0, 1, 2, 3},
		"unknown type":   append(append([]byte{}, good[:4]...), append([]byte{200}, good[5:]...)...),
		"zero type":      append(append([]byte{}, good[:4]...), append([]byte{0}, good[5:]...)...),
		"truncated":      good[:len(good)-1],
		"text too long":  patchText(good, MaxText+1),
		"text past end":  patchText(good, 100),
		"header cut":     good[:20],
		"length too big": append(binary.LittleEndian.AppendUint32(nil, MaxFrame+1), good[4:]...),
	}
	for name, b := range cases {
		if _, _, err := Decode(b); !errors.Is(err, ErrFrame) {
			t.Errorf("%s: Decode = %v, want ErrFrame", name, err)
		}
		_, err := NewReader(bytes.NewReader(b)).ReadMsg()
		if err == nil {
			t.Errorf("%s: ReadMsg accepted it", name)
		}
	}
}

func patchText(frame []byte, n uint32) []byte {
	b := append([]byte{}, frame...)
	b[4+42], b[4+43], b[4+44], b[4+45] = byte(n), byte(n>>8), byte(n>>16), byte(n>>24)
	return b
}

type vec struct {
	x, y float32
	tag  uint8
	on   bool
}

var argKernel, _ = entries.RegisterKernel("proto.test.args", func(b bool, i8 int8, i int, u16 uint16, u uint, f float32, d float64,
	c complex64, z complex128, a [3]int16, v vec, s []float64) {
})

func TestArgsRoundTrip(t *testing.T) {
	args := []plugin.Arg{{Scalar: true}, {Scalar: int8(-5)}, {Scalar: math.MinInt64}, {Scalar: uint16(65535)}, {Scalar: uint(math.MaxUint64)},
		{Scalar: float32(-1.5)}, {Scalar: math.Inf(-1)}, {Scalar: complex64(complex(1, -2))}, {Scalar: complex(3, 4)},
		{Scalar: [3]int16{-1, 2, -3}}, {Scalar: vec{1.5, -2.5, 9, true}}, {Ptr: 0x1000, Len: 77}}
	b, err := AppendArgs(nil, argKernel, args)
	if err != nil {
		t.Fatal(err)
	}
	// 1+1+8+2+8+4+8+8+16+6+(4+4+1+1)+16 = 88 bytes, whatever the architecture.
	if len(b) != 88 {
		t.Errorf("encoded %d bytes, want 88", len(b))
	}
	got, err := DecodeArgs(b, argKernel)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, args) {
		t.Errorf("got %+v\nwant %+v", got, args)
	}
	if _, err := DecodeArgs(b[:len(b)-1], argKernel); !errors.Is(err, ErrFrame) {
		t.Errorf("short: %v", err)
	}
	if _, err := DecodeArgs(append(b, 0), argKernel); !errors.Is(err, ErrFrame) {
		t.Errorf("long: %v", err)
	}
	if _, err := AppendArgs(nil, argKernel, args[:3]); !errors.Is(err, plugin.ErrBadKernel) {
		t.Errorf("too few: %v", err)
	}
}

// FuzzDecode feeds arbitrary bytes to the frame decoders: they must return
// a frame or an error, never panic, and a decoded frame must encode back to
// the same bytes.
func FuzzDecode(f *testing.F) {
	f.Add(AppendFrame(nil, &Msg{Type: THello, Text: Magic}, nil))
	f.Add(AppendFrame(nil, &Msg{Type: TSubmit, Queue: 1, ID: 2, Ptr: 3, Size: 3}, []byte{1, 2, 3}))
	f.Add(AppendFrame(nil, &Msg{Type: TSyncDone, Code: 3, Text: "boom"}, nil))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, n, err := Decode(b)
		if err == nil {
			again := AppendFrame(nil, m, m.Payload)
			if !bytes.Equal(again, b[:n]) {
				t.Fatalf("re-encoding differs:\n%x\n%x", again, b[:n])
			}
		}
		r := NewReader(bytes.NewReader(b))
		for i := 0; i < 4; i++ {
			m, err := r.ReadMsg()
			if err != nil {
				return
			}
			if m.Payload == nil {
				if err := r.Discard(m); err != nil {
					return
				}
			}
		}
	})
}

// FuzzDecodeArgs feeds arbitrary bytes to the argument decoder.
func FuzzDecodeArgs(f *testing.F) {
	good, _ := AppendArgs(nil, argKernel, []plugin.Arg{{Scalar: true}, {Scalar: int8(1)}, {Scalar: 2}, {Scalar: uint16(3)}, {Scalar: uint(4)},
		{Scalar: float32(5)}, {Scalar: 6.0}, {Scalar: complex64(7)}, {Scalar: complex128(8)}, {Scalar: [3]int16{}}, {Scalar: vec{}}, {Ptr: 1, Len: 2}})
	f.Add(good)
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, 120))
	f.Fuzz(func(t *testing.T, b []byte) {
		args, err := DecodeArgs(b, argKernel)
		if err != nil {
			return
		}
		// Floats may come back with a quieted NaN; everything else is exact.
		again, err := AppendArgs(nil, argKernel, args)
		if err != nil || len(again) != len(b) {
			t.Fatalf("re-encoding: %v, %d bytes, want %d", err, len(again), len(b))
		}
		if _, err := DecodeArgs(again, argKernel); err != nil {
			t.Fatalf("re-encoded arguments do not decode: %v", err)
		}
	})
}
