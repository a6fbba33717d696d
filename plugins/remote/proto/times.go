package proto

import (
	"encoding/binary"
	"fmt"
)

// OpRecord is one timed operation of a tagged queue, as a TTimes frame
// carries it. Times are nanoseconds of the device's clock, except Sent. Sent
// is the host's clock as the TTag frame carried it. The host aligns the two
// clocks with them. The device got the tag after the host sent it, and the
// operation ran after that.
type OpRecord struct {
	Tag    uint64
	Sent   int64 // host clock: when the tag was sent
	Got    int64 // device clock: when the tag arrived
	Start  int64 // device clock
	End    int64 // device clock
	Bytes  int64
	Kernel uint32 // kernel index (launch)
	Kind   uint8  // plugin.OpKind
	Failed bool
}

// RecordSize is the encoded size of an OpRecord.
const RecordSize = 6*8 + 4 + 1 + 1

// AppendTimes appends r's encoding to b.
func AppendTimes(b []byte, r OpRecord) []byte {
	le := binary.LittleEndian
	b = le.AppendUint64(b, r.Tag)
	for _, v := range [...]int64{r.Sent, r.Got, r.Start, r.End, r.Bytes} {
		b = le.AppendUint64(b, uint64(v))
	}
	b = le.AppendUint32(b, r.Kernel)
	failed := byte(0)
	if r.Failed {
		failed = 1
	}
	return append(b, r.Kind, failed)
}

// ParseTimes decodes a TTimes payload. It takes whole records, each with its
// end no earlier than its start, and a known kind (1 to maxKind).
func ParseTimes(p []byte, maxKind uint8) ([]OpRecord, error) {
	if len(p)%RecordSize != 0 {
		return nil, fmt.Errorf("%w: times payload of %d bytes is not whole %d-byte records", ErrFrame, len(p), RecordSize)
	}
	le := binary.LittleEndian
	out := make([]OpRecord, 0, len(p)/RecordSize)
	for ; len(p) > 0; p = p[RecordSize:] {
		r := OpRecord{
			Tag: le.Uint64(p), Sent: int64(le.Uint64(p[8:])), Got: int64(le.Uint64(p[16:])),
			Start: int64(le.Uint64(p[24:])), End: int64(le.Uint64(p[32:])), Bytes: int64(le.Uint64(p[40:])),
			Kernel: le.Uint32(p[48:]), Kind: p[52], Failed: p[53] != 0,
		}
		if r.Kind == 0 || r.Kind > maxKind || p[53] > 1 {
			return nil, fmt.Errorf("%w: timed operation of kind %d (flags %d)", ErrFrame, r.Kind, p[53])
		}
		if r.End < r.Start || r.Start < r.Got || r.Bytes < 0 {
			return nil, fmt.Errorf("%w: timed operation from %d to %d (tag arrived at %d, %d bytes)", ErrFrame, r.Start, r.End, r.Got, r.Bytes)
		}
		out = append(out, r)
	}
	return out, nil
}
