package remote

import (
	"encoding/binary"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/goffload/offload/internal/entries"
	"github.com/goffload/offload/plugins/remote/proto"
)

// TestTCPLimitGarbageTLS sends a TLS device what no host sends: garbage
// instead of the preface, instead of TLS after it, and inside the TLS
// session instead of the proof (where the limits on handshake frames hold
// as on a plain session). Each connection is refused at once with a line
// that says why, the device allocates nothing near the sizes claimed, and
// an honest host is served after.
func TestTCPLimitGarbageTLS(t *testing.T) {
	ln := listenLoopback(t)
	sec := security(t, false)
	srv, logs := startTCP(t, ln, time.Minute, sec)
	srv.log.mu.Lock()
	srv.log.burst = 1 << 20 // every refusal's line, to check each
	srv.log.mu.Unlock()
	addr := ln.Addr().String()
	length := func(n uint32, rest []byte) []byte { return append(binary.LittleEndian.AppendUint32(nil, n), rest...) }
	http := []byte("GET / HTTP/1.1\r\nHost: device\r\n\r\n")
	cases := []struct {
		name    string
		preface bool   // send the TLS preface first
		inTLS   bool   // and set up the TLS session, and send garbage inside
		garbage []byte // what is sent then
		says    string // in the device's line
	}{
		{"http", false, false, http, "not a goffload host"},
		{"http after the preface", true, false, http, "does not speak TLS"},
		{"4 GiB frame", true, true, length(0xffffffff, nil), "malformed frame"},
		{"largest frame", true, true, length(proto.MaxFrame, make([]byte, proto.HeaderSize)), "malformed frame"},
		{"short frame", true, true, length(3, []byte{byte(proto.TAuth), 0, 0}), "malformed frame"},
		{"payload", true, true, proto.AppendFrame(nil, &proto.Msg{Type: proto.TAuth, Text: "a b"}, []byte{1, 2, 3}), "malformed frame"},
		{"hello, not auth", true, true, proto.AppendFrame(nil, &proto.Msg{Type: proto.THello, Text: helloText(entries.Current())}, nil), "malformed frame"},
	}
	const rounds = 10
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, c := range cases {
		for range rounds {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			readPreface(t, conn)
			var w net.Conn = conn
			if c.preface {
				conn.Write([]byte(prefaceTLS))
			}
			if c.inTLS {
				tc := sec.client(conn, addr)
				if err := tc.Handshake(); err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				w = tc
			}
			w.Write(c.garbage)
			if err := waitClosed(conn); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			conn.Close()
		}
		if all := strings.Join(logs.lines(), "\n"); !strings.Contains(all, c.says) {
			t.Errorf("%s: no refusal saying %q:\n%s", c.name, c.says, all)
		}
	}
	runtime.ReadMemStats(&after)
	// Both sides of the connections are in this process: a TLS handshake
	// each, the host's included.
	n := uint64(rounds * len(cases))
	if per := (after.TotalAlloc - before.TotalAlloc) / n; per > 256<<10 {
		t.Errorf("%d bytes allocated per refused connection, want some tens of KiB", per)
	} else {
		t.Logf("%d bytes allocated per refused connection, both sides", per)
	}
	for _, l := range logs.lines() {
		if !strings.Contains(l, "refused host") {
			t.Errorf("log line %q, want a refusal", l)
		}
	}
	checkServed(t, openHonest(t, addr))
}
