package stream

// How a tcp:// session is protected (Security). By default it is TLS 1.3
// (crypto/tls). The two sides authenticate each other by the shared secret,
// bound to that very session. After the TLS handshake, each proves
// GOFFLOAD_SECRET with an HMAC over the session's exported keying material,
// the host first. (That is RFC 8446 section 7.5,
// ConnectionState.ExportKeyingMaterial.) A man in the middle who terminates
// TLS on both sides holds two sessions with different keying material. So a
// proof it relays from one to the other fails. The secret itself never
// crosses the wire.
//
// Without a PKI, each side's certificate is an ephemeral self-signed one that
// nobody checks. The proof, not the certificate, authenticates the peer. With
// a PKI, both sides set GOFFLOAD_TLS_CERT, GOFFLOAD_TLS_KEY and
// GOFFLOAD_TLS_CA. Each side then also verifies the other's certificate
// against the CA. The host checks the device's name (the HOST of
// tcp://HOST:PORT) as HTTPS does.
//
// GOFFLOAD_TCP_PLAIN=1, on both sides, keeps a session in the clear, for a
// fabric the user trusts. It uses the older challenge–response (authHost,
// authDevice). The mode is never negotiated. Each side opens with a fixed
// preface that says what it wants. It refuses a peer that wants otherwise,
// saying which side wants what. A relay that rewrites a preface gets the
// session refused, not downgraded.

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/goffload/offload/plugins/remote/proto"
)

// Environment of TCP sessions' protection.
const (
	envSecret  = "GOFFLOAD_SECRET"    // the shared secret of hosts and TCP devices
	envPlain   = "GOFFLOAD_TCP_PLAIN" // "1": sessions in the clear (both sides)
	envTLSCert = "GOFFLOAD_TLS_CERT"  // PEM certificate (chain) of this side
	envTLSKey  = "GOFFLOAD_TLS_KEY"   // PEM private key of this side
	envTLSCA   = "GOFFLOAD_TLS_CA"    // PEM CA certificates the peer's must chain to
)

// The prefaces: the first bytes each side writes on a TCP connection.
const (
	prefaceLen   = 16
	prefaceTLS   = "goffload tls1.3\n"
	prefacePlain = "goffload plain \n"
)

// ekmLabel is the exporter label of the secret's proofs.
const ekmLabel = "EXPORTER-goffload-secret-proof"

// Security is how this process protects its TCP sessions.
type Security struct {
	secret string
	plain  bool
	cert   tls.Certificate // this side's: the user's, or an ephemeral self-signed one
	ca     *x509.CertPool  // the CA the peer's certificate must chain to; nil without a PKI
}

// SecurityFromEnv is the protection the environment asks for, with secret the
// shared secret (GOFFLOAD_SECRET). By default it is TLS 1.3 and the secret's
// proofs. Certificates are checked against a CA if GOFFLOAD_TLS_CERT, _KEY
// and _CA say so. GOFFLOAD_TCP_PLAIN=1 asks for plain TCP. It refuses a
// secret too short to resist guessing, and a half-configured PKI.
func SecurityFromEnv(secret string) (*Security, error) { return securityFromEnv(secret) }

// Plain reports whether sessions go in the clear (GOFFLOAD_TCP_PLAIN=1).
func (s *Security) Plain() bool { return s.plain }

// HostHandshake opens a session with the device at addr on conn (see
// hostHandshake). It returns the connection its frames go over, for Session's
// transport.
func (s *Security) HostHandshake(conn net.Conn, addr string) (net.Conn, error) {
	return s.hostHandshake(conn, addr)
}

// DeviceHandshake admits the host on conn, from source address src, if it
// proves the secret. It returns the connection the session's frames go over.
// lim, if not nil, pauses a source whose proofs failed.
func (s *Security) DeviceHandshake(conn net.Conn, lim *GuessLimiter, src string) (net.Conn, error) {
	var gate *proofGate
	if lim != nil {
		gate = &proofGate{lim: lim, src: src}
	}
	return s.deviceHandshake(conn, gate)
}

// securityFromEnv reads the protection of TCP sessions from the
// environment, for a side that knows the secret.
func securityFromEnv(secret string) (*Security, error) {
	if err := checkSecret(secret); err != nil {
		return nil, err
	}
	s := &Security{secret: secret}
	switch v := strings.TrimSpace(os.Getenv(envPlain)); v {
	case "", "0":
	case "1":
		s.plain = true
	default:
		return nil, fmt.Errorf("%s=%q: want 1 (sessions in the clear, on a fabric you trust) or unset (TLS)", envPlain, v)
	}
	certF, keyF, caF := os.Getenv(envTLSCert), os.Getenv(envTLSKey), os.Getenv(envTLSCA)
	pki := certF != "" || keyF != "" || caF != ""
	if s.plain {
		if pki {
			return nil, fmt.Errorf("%s=1 with %s, %s or %s: a session in the clear uses no certificates; unset one or the other", envPlain, envTLSCert, envTLSKey, envTLSCA)
		}
		return s, nil
	}
	if !pki {
		cert, err := ephemeralCert()
		if err != nil {
			return nil, err
		}
		s.cert = cert
		return s, nil
	}
	if certF == "" || keyF == "" || caF == "" {
		return nil, fmt.Errorf("%s=%q %s=%q %s=%q: set all three (this side's certificate and key, and the CA the peer's must chain to) or none (the shared secret alone authenticates)",
			envTLSCert, certF, envTLSKey, keyF, envTLSCA, caF)
	}
	cert, err := tls.LoadX509KeyPair(certF, keyF)
	if err != nil {
		return nil, fmt.Errorf("%s=%s, %s=%s: %w", envTLSCert, certF, envTLSKey, keyF, err)
	}
	pem, err := os.ReadFile(caF)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", envTLSCA, err)
	}
	s.ca = x509.NewCertPool()
	if !s.ca.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s=%s: no PEM certificate in it", envTLSCA, caF)
	}
	s.cert = cert
	return s, nil
}

// ephemeralCert is this process's self-signed certificate, made once. Its key
// is a fresh P-256 key that lives as long as the process.
var ephemeralCert = sync.OnceValues(func() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "goffload ephemeral"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(100 * 365 * 24 * time.Hour), // checked by nobody: the secret's proof authenticates
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
})

// mode is what this side's preface says it wants, in words.
func (s *Security) mode() string {
	if s.plain {
		return "plain TCP (" + envPlain + "=1)"
	}
	return "TLS 1.3 (" + envPlain + " unset)"
}

func (s *Security) preface() string {
	if s.plain {
		return prefacePlain
	}
	return prefaceTLS
}

// exchangePreface writes this side's preface on conn and reads the peer's.
// self is "host" or "device". A peer that wants the other mode is an error
// wrapping proto.ErrMismatch. The error says which side wants what.
func (s *Security) exchangePreface(conn net.Conn, self string) error {
	if _, err := io.WriteString(conn, s.preface()); err != nil {
		return err
	}
	var b [prefaceLen]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return fmt.Errorf("reading the %s's preface: %w", other(self), err)
	}
	got := string(b[:])
	if got == s.preface() {
		return nil
	}
	peer := &Security{plain: !s.plain}
	if got != peer.preface() {
		return fmt.Errorf("%w: not a goffload %s (it opened with %q)", proto.ErrFrame, other(self), got)
	}
	return fmt.Errorf("%w: the %s wants %s, the %s wants %s: set %s=1 on both sides (a fabric you trust) or on neither",
		proto.ErrMismatch, other(self), peer.mode(), self, s.mode(), envPlain)
}

func other(self string) string {
	if self == "host" {
		return "device"
	}
	return "host"
}

// proof is who's proof of the secret for the TLS session cs.
func (s *Security) proof(who string, cs tls.ConnectionState) ([]byte, error) {
	ekm, err := cs.ExportKeyingMaterial(ekmLabel, nil, 32)
	if err != nil {
		return nil, err
	}
	h := hmac.New(sha256.New, []byte(s.secret))
	h.Write([]byte("goffload tls " + who + " "))
	h.Write(ekm)
	return h.Sum(nil), nil
}

func (s *Security) tlsConfig() *tls.Config {
	return &tls.Config{
		MinVersion:                  tls.VersionTLS13,
		Certificates:                []tls.Certificate{s.cert},
		DynamicRecordSizingDisabled: true, // full records from the start: bulk data is the point
	}
}

// client is the host's TLS side of conn to the device at addr.
func (s *Security) client(conn net.Conn, addr string) *tls.Conn {
	cfg := s.tlsConfig()
	if s.ca != nil {
		cfg.RootCAs = s.ca
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
	} else {
		cfg.Certificates = nil        // the host proves itself by the secret alone
		cfg.InsecureSkipVerify = true // the device's proof of the secret over this session authenticates it
	}
	return tls.Client(conn, cfg)
}

// server is the device's TLS side of conn.
func (s *Security) server(conn net.Conn) *tls.Conn {
	cfg := s.tlsConfig()
	cfg.SessionTicketsDisabled = true
	if s.ca != nil {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		cfg.ClientCAs = s.ca
	}
	return tls.Server(conn, cfg)
}

// hostHandshake opens a session to the device at addr on conn. It exchanges
// prefaces. Then comes the TLS handshake and the proofs, or the plain
// challenge–response. It returns the connection the session's frames go over.
func (s *Security) hostHandshake(conn net.Conn, addr string) (net.Conn, error) {
	if err := s.exchangePreface(conn, "host"); err != nil {
		return nil, err
	}
	if s.plain {
		return conn, authHost(conn, s.secret)
	}
	under := Under(conn)
	tc := s.client(under, addr)
	if err := tc.Handshake(); err != nil {
		return nil, fmt.Errorf("TLS handshake: %w", explainTLS(err, s.ca != nil))
	}
	cs := tc.ConnectionState()
	mine, err := s.proof("host", cs)
	if err != nil {
		return nil, err
	}
	if err := writeAuth(tc, &proto.Auth{Status: proto.Status{Text: hex.EncodeToString(mine)}}); err != nil {
		return nil, err
	}
	m, err := readAuth(tc)
	if err != nil {
		if isClosed(err) {
			return nil, fmt.Errorf("%w: the device closed the connection: %w", proto.ErrAuth, err)
		}
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "remote error" {
			// In TLS 1.3 a device refuses a host's certificate after the host's handshake is done.
			return nil, fmt.Errorf("TLS handshake: %w", explainTLS(err, s.ca != nil))
		}
		return nil, fmt.Errorf("reading the device's proof: %w", explainTLS(err, s.ca != nil))
	}
	if err := m.Status.Err(); err != nil {
		return nil, fmt.Errorf("the device refused the host: %w", err)
	}
	want, err := s.proof("device", cs)
	if err != nil {
		return nil, err
	}
	got, err := hex.DecodeString(m.Text)
	if err != nil || !hmac.Equal(got, want) {
		return nil, fmt.Errorf("%w: the device did not prove the shared secret over this TLS session (GOFFLOAD_SECRET differs, or a relay stands between)", proto.ErrAuth)
	}
	under.Spin()
	return tc, nil
}

// deviceHandshake is the device's side of hostHandshake. On a failure that
// the host could be told of, it tells it why. gate says whether the host's
// proof may be checked now, and hears of a failed one. A nil gate means
// always, and nobody.
func (s *Security) deviceHandshake(conn net.Conn, gate *proofGate) (net.Conn, error) {
	if err := s.exchangePreface(conn, "device"); err != nil {
		return nil, err
	}
	if s.plain {
		return conn, authDevice(conn, s.secret, gate)
	}
	under := Under(conn)
	tc := s.server(under)
	if err := tc.Handshake(); err != nil {
		return nil, fmt.Errorf("TLS handshake: %w", explainTLS(err, s.ca != nil))
	}
	cs := tc.ConnectionState()
	m, err := readAuth(tc)
	if err != nil {
		return nil, fmt.Errorf("reading the host's proof: %w", explainTLS(err, s.ca != nil))
	}
	if err := gate.allow(); err != nil {
		writeAuth(tc, &proto.Auth{Status: proto.StatusOf(err)})
		return nil, err
	}
	want, err := s.proof("host", cs)
	if err != nil {
		return nil, err
	}
	got, derr := hex.DecodeString(m.Text)
	if derr != nil || !hmac.Equal(got, want) {
		gate.failed()
		err := fmt.Errorf("%w: the host did not prove the shared secret over this TLS session (GOFFLOAD_SECRET differs or is unset, or a relay stands between)", proto.ErrAuth)
		writeAuth(tc, &proto.Auth{Status: proto.StatusOf(err)})
		return nil, err
	}
	mine, err := s.proof("device", cs)
	if err != nil {
		return nil, err
	}
	if err := writeAuth(tc, &proto.Auth{Status: proto.Status{Text: hex.EncodeToString(mine)}}); err != nil {
		return nil, err
	}
	under.Spin()
	return tc, nil
}

// isClosed reports whether err is the normal end of a connection.
func isClosed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
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

// The handshake is read straight from the connection, frame by frame with no
// read-ahead, before the link (and its buffers) exist. So a party that has
// not proved the secret can make the other side read at most maxAuthFrame
// bytes a frame, and allocate no more. The longest handshake frame is the
// host's proof (two hex strings) or a refusal with its reason.
const maxAuthFrame = proto.HeaderSize + 512

// readAuth reads one handshake frame: a TAuth frame without payload, of at
// most maxAuthFrame bytes.
func readAuth(r io.Reader) (*proto.Auth, error) {
	var lw [4]byte
	if _, err := io.ReadFull(r, lw[:]); err != nil {
		return nil, err
	}
	n := int(binary.LittleEndian.Uint32(lw[:]))
	if n < proto.HeaderSize || n > maxAuthFrame {
		return nil, fmt.Errorf("%w: a handshake frame of %d bytes; want [%d, %d] before authentication", proto.ErrFrame, n, proto.HeaderSize, maxAuthFrame)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	m, err := proto.ParseHeader(body, n)
	if err != nil {
		return nil, err
	}
	if m.Type != proto.TAuth || m.PayloadLen != 0 {
		return nil, fmt.Errorf("%w: want an auth frame without payload, got %s with %d payload bytes", proto.ErrFrame, m.Type, m.PayloadLen)
	}
	f, err := proto.As[proto.Auth](m)
	return &f, err
}

// writeAuth writes one handshake frame.
func writeAuth(w io.Writer, f *proto.Auth) error {
	if len(f.Text) > maxAuthFrame-proto.HeaderSize {
		f.Text = f.Text[:maxAuthFrame-proto.HeaderSize]
	}
	_, err := w.Write(proto.AppendFrame(nil, proto.Encode(f), nil))
	return err
}

// authHost proves the secret to a device and checks the device's proof. The
// secret itself never crosses the wire.
func authHost(conn io.ReadWriter, secret string) error {
	m, err := readAuth(conn)
	if err != nil {
		return fmt.Errorf("reading the device's challenge: %w", err)
	}
	nd, err := hex.DecodeString(m.Text)
	if err != nil || len(nd) != 32 {
		return fmt.Errorf("%w: malformed challenge", proto.ErrFrame)
	}
	nh := nonce()
	proof := hex.EncodeToString(mac(secret, "host", nd)) + " " + hex.EncodeToString(nh)
	if err := writeAuth(conn, &proto.Auth{Status: proto.Status{Text: proof}}); err != nil {
		return err
	}
	m, err = readAuth(conn)
	if err != nil {
		return fmt.Errorf("%w: the device closed the connection: %v", proto.ErrAuth, err)
	}
	if err := m.Status.Err(); err != nil {
		return fmt.Errorf("the device refused the host: %w", err)
	}
	got, err := hex.DecodeString(m.Text)
	if err != nil || !hmac.Equal(got, mac(secret, "device", nh)) {
		return fmt.Errorf("%w: the device did not prove the shared secret (GOFFLOAD_SECRET differs)", proto.ErrAuth)
	}
	return nil
}

// authDevice challenges a host. On failure it tells the host why. gate is
// deviceHandshake's.
func authDevice(conn io.ReadWriter, secret string, gate *proofGate) error {
	nd := nonce()
	if err := writeAuth(conn, &proto.Auth{Status: proto.Status{Text: hex.EncodeToString(nd)}}); err != nil {
		return err
	}
	m, err := readAuth(conn)
	if err != nil {
		return fmt.Errorf("reading the host's proof: %w", err)
	}
	if err := gate.allow(); err != nil {
		writeAuth(conn, &proto.Auth{Status: proto.StatusOf(err)})
		return err
	}
	f := strings.Fields(m.Text)
	var proof, nh []byte
	if len(f) == 2 {
		proof, _ = hex.DecodeString(f[0])
		nh, _ = hex.DecodeString(f[1])
	}
	if len(nh) != 32 || !hmac.Equal(proof, mac(secret, "host", nd)) {
		gate.failed()
		err := fmt.Errorf("%w: the host did not prove the shared secret (GOFFLOAD_SECRET differs or is unset)", proto.ErrAuth)
		writeAuth(conn, &proto.Auth{Status: proto.StatusOf(err)})
		return err
	}
	return writeAuth(conn, &proto.Auth{Status: proto.Status{Text: hex.EncodeToString(mac(secret, "device", nh))}})
}
