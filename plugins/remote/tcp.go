package remote

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/goffload/offload/internal/plugin"
	"github.com/goffload/offload/plugins/remote/proto"
)

// Environment of TCP devices.
const (
	envListen = "GOFFLOAD_LISTEN" // address a device process serves hosts on
	envSecret = "GOFFLOAD_SECRET" // shared secret of hosts and TCP devices
)

// ErrAuth is wrapped when a host and a TCP device do not share the secret.
var ErrAuth = errors.New("authentication failed")

func init() {
	plugin.RegisterKind(plugin.Kind{
		Name:  "tcp",
		Open:  openTCP,
		Order: 60,
		Help:  "tcp://HOST:PORT  a device process serving on HOST:PORT (GOFFLOAD_ROLE=device GOFFLOAD_LISTEN=…), with GOFFLOAD_SECRET on both sides",
	})
}

func openTCP(addr string) ([]plugin.Device, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("%w: tcp://%s: want tcp://HOST:PORT: %v", plugin.ErrBadSpec, addr, err)
	}
	secret := os.Getenv(envSecret)
	if secret == "" {
		return nil, fmt.Errorf("%w: tcp://%s: %s is not set; TCP devices serve only hosts that prove the shared secret", plugin.ErrBadSpec, addr, envSecret)
	}
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	l := newLink(conn)
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	if err := authHost(l, secret); err != nil {
		conn.Close()
		return nil, fmt.Errorf("tcp://%s: %w", addr, err)
	}
	conn.SetDeadline(time.Time{})
	d := newDevice(l, "remote device tcp://"+addr)
	d.closeFn = func() error { return nil }
	return []plugin.Device{d}, nil
}

func mac(secret, who string, nonce []byte) []byte {
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte("goffload " + who + " "))
	h.Write(nonce)
	return h.Sum(nil)
}

func nonce() []byte {
	b := make([]byte, 32)
	rand.Read(b)
	return b
}

// authHost proves the secret to a device and checks the device's proof; the
// secret itself never crosses the wire.
func authHost(l *link, secret string) error {
	m, err := l.r.ReadMsg()
	if err != nil {
		return fmt.Errorf("reading the device's challenge: %w", err)
	}
	if m.Type != proto.TAuth {
		return fmt.Errorf("%w: want a challenge, got %s", proto.ErrFrame, m.Type)
	}
	nd, err := hex.DecodeString(m.Text)
	if err != nil || len(nd) != 32 {
		return fmt.Errorf("%w: malformed challenge", proto.ErrFrame)
	}
	nh := nonce()
	proof := hex.EncodeToString(mac(secret, "host", nd)) + " " + hex.EncodeToString(nh)
	if err := l.send(&proto.Msg{Type: proto.TAuth, Text: proof}, nil); err != nil {
		return err
	}
	m, err = l.r.ReadMsg()
	if err != nil {
		return fmt.Errorf("%w: the device closed the connection: %v", ErrAuth, err)
	}
	if err := decodeErr(m.Code, m.Text); err != nil {
		return fmt.Errorf("the device refused the host: %w", err)
	}
	got, err := hex.DecodeString(m.Text)
	if m.Type != proto.TAuth || err != nil || !hmac.Equal(got, mac(secret, "device", nh)) {
		return fmt.Errorf("%w: the device did not prove the shared secret (GOFFLOAD_SECRET differs)", ErrAuth)
	}
	return nil
}

// authDevice challenges a host; on failure it tells the host why.
func authDevice(l *link, secret string) error {
	nd := nonce()
	if err := l.send(&proto.Msg{Type: proto.TAuth, Text: hex.EncodeToString(nd)}, nil); err != nil {
		return err
	}
	m, err := l.r.ReadMsg()
	if err != nil {
		return fmt.Errorf("reading the host's proof: %w", err)
	}
	f := strings.Fields(m.Text)
	var proof, nh []byte
	if len(f) == 2 {
		proof, _ = hex.DecodeString(f[0])
		nh, _ = hex.DecodeString(f[1])
	}
	if m.Type != proto.TAuth || len(nh) != 32 || !hmac.Equal(proof, mac(secret, "host", nd)) {
		err := fmt.Errorf("%w: the host did not prove the shared secret (GOFFLOAD_SECRET differs or is unset)", ErrAuth)
		l.send(withErr(&proto.Msg{Type: proto.TAuth}, err), nil)
		return err
	}
	return l.send(&proto.Msg{Type: proto.TAuth, Text: hex.EncodeToString(mac(secret, "device", nh))}, nil)
}
