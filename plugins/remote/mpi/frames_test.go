package mpi

import (
	"bytes"
	"testing"

	"github.com/goffload/offload/plugins/remote/proto"
)

// mpiMessage is what the MPI transport sends for frames and a data
// fragment: the control message and, for a large fragment, its payload.
func mpiMessage(frames []byte, id uint64, data []byte) (ctrl, oob []byte) {
	ctrl, sep := appendData(frames, id, 7, data)
	if sep {
		oob = data
	}
	return ctrl, oob
}

func TestParseMPIFrames(t *testing.T) {
	small, big := bytes.Repeat([]byte{1}, 100), bytes.Repeat([]byte{2}, proto.MaxInline+1)
	ctrl := proto.AppendFrame(nil, &proto.Msg{Type: proto.TPing, Text: "x"}, nil)
	ctrl, _ = mpiMessage(ctrl, 1, small)
	ctrl, oob := mpiMessage(ctrl, 2, big)
	ctrl = proto.AppendFrame(ctrl, &proto.Msg{Type: proto.TExit}, nil)
	if oob == nil {
		t.Fatal("a fragment over MaxInline went inline")
	}
	var got []*proto.Msg
	for len(ctrl) > 0 {
		m, n, err := parseFrame(ctrl)
		if err != nil {
			t.Fatalf("frame %d: %v", len(got), err)
		}
		ctrl = ctrl[n:]
		got = append(got, m)
	}
	if len(got) != 4 || got[0].Type != proto.TPing || got[0].Text != "x" || got[3].Type != proto.TExit {
		t.Fatalf("frames = %+v", got)
	}
	if m := got[1]; m.ID != 1 || !bytes.Equal(m.Payload, small) || outOfBand(m) {
		t.Errorf("small fragment = %+v", m)
	}
	if m := got[2]; m.ID != 2 || m.Payload != nil || m.PayloadLen != len(big) || !outOfBand(m) {
		t.Errorf("large fragment = %+v, want its payload out of band", m)
	}
	// A frame cut short, and a length word alone, are errors.
	whole := proto.AppendFrame(nil, &proto.Msg{Type: proto.TPing}, []byte("abc"))
	bad, _ := appendData(nil, 1, 0, make([]byte, fragment+1))
	for _, b := range [][]byte{whole[:len(whole)-1], whole[:3], {0xff, 0xff, 0xff, 0x7f}, bad} {
		if _, _, err := parseFrame(b); err == nil {
			t.Errorf("parseFrame(%x) = nil error", b)
		}
	}
}

// FuzzMPIFrames feeds the MPI transport's message decoder arbitrary control
// messages: it must never panic, nor take more than the message holds.
func FuzzMPIFrames(f *testing.F) {
	seed, _ := mpiMessage(proto.AppendFrame(nil, &proto.Msg{Type: proto.TLaunch, Kernel: 1}, []byte{1, 2}), 3, make([]byte, proto.MaxInline+5))
	f.Add(seed)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		for len(b) > 0 {
			m, n, err := parseFrame(b)
			if err != nil {
				return
			}
			if n <= 0 || n > len(b) {
				t.Fatalf("took %d of %d bytes", n, len(b))
			}
			if !outOfBand(m) && len(m.Payload) != m.PayloadLen {
				t.Fatalf("inline payload of %d bytes, frame says %d", len(m.Payload), m.PayloadLen)
			}
			b = b[n:]
		}
	})
}

func TestMPIRanks(t *testing.T) {
	for _, host := range []int{0, 1, 3} {
		m := Ranks{Host: host, Size: 4, Base: 5}
		seen := map[int]bool{}
		for r := 0; r < 4; r++ {
			if r == host {
				continue
			}
			num := m.NumOf(r)
			if num < 5 || num > 7 || seen[num] {
				t.Fatalf("host %d: rank %d is device %d", host, r, num)
			}
			seen[num] = true
			if back, err := m.RankOf(num); err != nil || back != r {
				t.Fatalf("host %d: device %d is rank %d, %v; want %d", host, num, back, err, r)
			}
			if at := m.RankAt(m.Index(r)); at != r {
				t.Fatalf("host %d: rankAt(index(%d)) = %d", host, r, at)
			}
		}
		for _, num := range []int{4, 8} {
			if _, err := m.RankOf(num); err == nil {
				t.Errorf("host %d: device %d has a rank", host, num)
			}
		}
	}
	for _, s := range []string{"x", "-1", "4"} {
		if _, err := parseHostRank(s, 4); err == nil {
			t.Errorf("GOFFLOAD_HOST_RANK=%s accepted in a job of 4", s)
		}
	}
	if r, err := parseHostRank("3", 4); r != 3 || err != nil {
		t.Errorf("GOFFLOAD_HOST_RANK=3: %d, %v", r, err)
	}
	c0, d0, p0, q0 := SessionTags(0)
	c1, _, _, q1 := SessionTags(7999)
	if c0 <= TagOpen || d0 == c0 || p0 == d0 || q0 == p0 || c1 <= q0 || q1 > 32767 {
		t.Errorf("session tags overlap or exceed 32767: %d %d %d %d .. %d", c0, d0, p0, q0, q1)
	}
}
