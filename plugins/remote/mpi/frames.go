// Package mpi is the transport of an MPI job's links, built with -tags mpi.
// The layout of frames on MPI messages is here in every build, for its tests.
// World is this process's part of the job: its ranks, and its links to other
// ranks by tag. Each link is a transport.Transport (Link) that can try writes
// and read ahead (transport.TryWriter, transport.Buffered). Raw is the raw
// MPI baseline of the bench.
//
// Each link is a pair of ranks. Control frames travel as messages of the
// link's control tag. Each message is one or more whole frames, in the socket
// transport's framing. A data fragment of at most proto.MaxInline bytes is a
// frame like any other. A larger one goes in two parts. First comes its
// frame's header alone on the control tag, with no payload and the payload's
// length in Size. Then comes the payload as one message on the link's data
// tag, received straight into the transfer's memory. Such a fragment may be
// up to fragment bytes: fewer, larger messages cost MPI less than the socket
// transport's fragments would. MPI keeps the order of messages with the same
// sender and tag. So the k-th such header goes with the k-th data message.
//
// A device rank serves host sessions (a device opened, used and closed). It
// serves several at once if the host opens it again before closing it. The
// host announces each session on the open tag, with its number in a hello
// frame. It ends the rank's service with an exit frame there. A session's
// frames use tags of their own. So they wait inside MPI until the device rank
// has read the announcement. Links between two device ranks in the same
// session use that session's peer tags.
package mpi

import (
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/goffload/offload/plugins/remote/proto"
)

// TagOpen is the tag the host announces sessions on. The host ends a device
// rank's service with an exit frame on it.
const TagOpen = 3

// SessionTags are session gen's tags. They are control and data between host
// and device, and control and data between devices. (MPI promises tags up to
// 32767.)
func SessionTags(gen int) (ctrl, data, peerCtrl, peerData int) {
	g := 16 + 4*(gen%8000)
	return g, g + 1, g + 2, g + 3
}

// fragment is the largest data fragment on an MPI link.
const fragment = 8 << 20

// appendData appends what carries data fragment off of transfer id on the
// control tag. It says whether data goes as a message of its own.
func appendData(b []byte, id uint64, off int, data []byte) ([]byte, bool) {
	m := proto.Msg{Type: proto.TData, ID: id, Ptr: uint64(off)}
	if len(data) <= proto.MaxInline {
		return proto.AppendFrame(b, &m, data), false
	}
	m.Size = uint64(len(data))
	return proto.AppendFrame(b, &m, nil), true
}

// outOfBand reports whether m's payload comes as a data message of its own.
func outOfBand(m *proto.Msg) bool {
	return m.Type == proto.TData && m.Payload == nil
}

// parseFrame decodes the frame at the start of b, a control message's rest.
// It returns m, and how many bytes of b it took. An inline payload aliases b.
func parseFrame(b []byte) (*proto.Msg, int, error) {
	if len(b) < 4 {
		return nil, 0, fmt.Errorf("%w: %d bytes left in a message, want a length word", proto.ErrFrame, len(b))
	}
	n := int(binary.LittleEndian.Uint32(b))
	if n < proto.HeaderSize || n > proto.MaxFrame {
		return nil, 0, fmt.Errorf("%w: length %d outside [%d, %d]", proto.ErrFrame, n, proto.HeaderSize, proto.MaxFrame)
	}
	body := b[4:]
	if len(body) > n {
		body = body[:n]
	}
	m, err := proto.ParseHeader(body, n)
	if err != nil {
		return nil, 0, err
	}
	if m.Type == proto.TData && m.Size != 0 {
		if m.PayloadLen != 0 || m.Size <= proto.MaxInline || m.Size > fragment {
			return nil, 0, fmt.Errorf("%w: data fragment of %d bytes, %d of them inline", proto.ErrFrame, m.Size, m.PayloadLen)
		}
		m.PayloadLen, m.Payload = int(m.Size), nil
		return m, 4 + n, nil
	}
	if m.Payload == nil {
		return nil, 0, fmt.Errorf("%w: a frame of %d bytes in a message with %d left", proto.ErrFrame, n, len(b)-4)
	}
	return m, 4 + n, nil
}

// Ranks maps device numbers to ranks and back. Every rank but the host's is a
// device. Devices are numbered in rank order from base, the number of the
// first.
type Ranks struct {
	Host, Size, Base int
}

// index is the place of device rank r among the device ranks.
func (m Ranks) Index(r int) int {
	if r > m.Host {
		return r - 1
	}
	return r
}

// rankAt is the rank of the i-th device rank (index's inverse).
func (m Ranks) RankAt(i int) int {
	if i >= m.Host {
		return i + 1
	}
	return i
}

// rankOf is the rank of device num.
func (m Ranks) RankOf(num int) (int, error) {
	i := num - m.Base
	if i < 0 || i >= m.Size-1 {
		return 0, fmt.Errorf("device %d is not an MPI device of this job (devices %d to %d)", num, m.Base, m.Base+m.Size-2)
	}
	return m.RankAt(i), nil
}

// numOf is the device number of rank r.
func (m Ranks) NumOf(r int) int { return m.Base + m.Index(r) }

// parseHostRank reads GOFFLOAD_HOST_RANK ("" is rank 0) for a job of size
// ranks.
func parseHostRank(s string, size int) (int, error) {
	if s == "" {
		return 0, nil
	}
	r, err := strconv.Atoi(s)
	if err != nil || r < 0 || r >= size {
		return 0, fmt.Errorf("%s=%q: want a rank from 0 to %d", envHostRank, s, size-1)
	}
	return r, nil
}

const envHostRank = "GOFFLOAD_HOST_RANK"
