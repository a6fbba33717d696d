package proto

import (
	"bytes"
	"errors"
	"testing"
)

func TestTimesRoundTrip(t *testing.T) {
	recs := []OpRecord{
		{Tag: 7, Sent: 100, Got: 5, Start: 6, End: 9, Kernel: 3, Kind: 1},
		{Tag: 8, Sent: -4, Got: 10, Start: 10, End: 10, Bytes: 1 << 40, Kind: 4, Failed: true},
	}
	var b []byte
	for _, r := range recs {
		b = AppendTimes(b, r)
	}
	if len(b) != 2*RecordSize {
		t.Fatalf("%d bytes, want %d", len(b), 2*RecordSize)
	}
	got, err := ParseTimes(b, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != recs[0] || got[1] != recs[1] {
		t.Fatalf("got %+v, want %+v", got, recs)
	}
	for _, bad := range [][]byte{
		b[:RecordSize-1], // cut short
		AppendTimes(nil, OpRecord{Kind: 0, End: 1}),                   // no kind
		AppendTimes(nil, OpRecord{Kind: 6}),                           // unknown kind
		AppendTimes(nil, OpRecord{Kind: 1, Start: 5, End: 4}),         // ends before it starts
		AppendTimes(nil, OpRecord{Kind: 1, Got: 9, Start: 5, End: 9}), // starts before its tag came
		AppendTimes(nil, OpRecord{Kind: 1, Bytes: -1}),                // negative size
	} {
		if _, err := ParseTimes(bad, 5); !errors.Is(err, ErrFrame) {
			t.Errorf("%x: %v, want ErrFrame", bad, err)
		}
	}
}

// FuzzParseTimes feeds arbitrary bytes to the decoder of timed operations,
// which come from the device process: records come back whole and encode
// back to the same bytes.
func FuzzParseTimes(f *testing.F) {
	f.Add(AppendTimes(nil, OpRecord{Tag: 1, Start: 1, End: 2, Kind: 1}))
	f.Add([]byte{})
	f.Add(bytes.Repeat([]byte{0xff}, RecordSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		recs, err := ParseTimes(b, 5)
		if err != nil {
			return
		}
		var again []byte
		for _, r := range recs {
			if r.End < r.Start || r.Kind == 0 || r.Kind > 5 {
				t.Fatalf("accepted %+v", r)
			}
			again = AppendTimes(again, r)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n%x\n%x", again, b)
		}
	})
}
