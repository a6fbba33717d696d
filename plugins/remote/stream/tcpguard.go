package stream

import (
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/goffload/offload/plugins/remote/proto"
)

// Secrets and guesses (issue 47's hardening 12 and 13).
const (
	// minSecret is the shortest GOFFLOAD_SECRET either side accepts,
	// unless GOFFLOAD_WEAK_SECRET=1 says the user knows.
	minSecret = 16
	// envWeakSecret=1 lets a secret shorter than minSecret through.
	envWeakSecret = "GOFFLOAD_WEAK_SECRET"
	// A source address whose proof failed may not try again for failPause.
	// The pause doubles with each failure, up to failPauseMax. A source that
	// has not failed for failForget starts over.
	failPause    = 200 * time.Millisecond
	failPauseMax = 10 * time.Second
	failForget   = 10 * time.Minute
	// maxFailSources bounds the sources the device remembers failures of.
	maxFailSources = 4096
)

// checkSecret refuses a secret shorter than minSecret unless the user
// opted out (GOFFLOAD_WEAK_SECRET=1).
func checkSecret(secret string) error {
	if len(secret) >= minSecret || os.Getenv(envWeakSecret) == "1" {
		return nil
	}
	return fmt.Errorf("%s is %d bytes, shorter than %d: a short secret can be guessed; make one with `openssl rand -hex 32` (the same on the hosts and the device), or set %s=1 to use this one anyway",
		envSecret, len(secret), minSecret, envWeakSecret)
}

// GuessLimiter slows guessing of the secret down per source address. After a
// failed proof, the source's next proofs are refused unchecked until its
// pause is over. So it learns nothing from them. It is plain state: the
// caller says what time it is.
type GuessLimiter struct {
	mu  sync.Mutex
	src map[string]*guesses
}

type guesses struct {
	fails int
	until time.Time // no proof of this source is checked before
	last  time.Time // of the last failure
}

// NewGuessLimiter is a limiter that knows no failures yet.
func NewGuessLimiter() *GuessLimiter { return &GuessLimiter{src: map[string]*guesses{}} }

// allow reports how long src must wait before a proof of its is checked (0:
// check it now).
func (g *GuessLimiter) allow(src string, now time.Time) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.src[src]
	if s == nil || !now.Before(s.until) {
		return 0
	}
	return s.until.Sub(now)
}

// failed notes a failed proof of src. It returns the pause before its next
// proof is checked.
func (g *GuessLimiter) failed(src string, now time.Time) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.src[src]
	if s != nil && now.Sub(s.last) >= failForget {
		s = nil // quiet long enough: it starts over
	}
	if s == nil {
		if len(g.src) >= maxFailSources {
			g.sweep(now)
		}
		s = &guesses{}
		g.src[src] = s
	}
	s.fails++
	pause := failPauseMax
	if s.fails <= 16 {
		pause = min(failPause<<(s.fails-1), failPauseMax)
	}
	s.last = now
	s.until = now.Add(pause)
	return pause
}

// Proved forgets src's failures: it knows the secret.
func (g *GuessLimiter) Proved(src string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.src, src)
}

// sweep drops the sources that were quiet for failForget. If there are still
// maxFailSources, it drops the one that failed least recently.
func (g *GuessLimiter) sweep(now time.Time) {
	var oldest string
	for k, s := range g.src {
		if now.Sub(s.last) >= failForget {
			delete(g.src, k)
		} else if oldest == "" || s.last.Before(g.src[oldest].last) {
			oldest = k
		}
	}
	if len(g.src) >= maxFailSources {
		delete(g.src, oldest)
	}
}

// proofGate is what a device's handshake asks before it checks a host's
// proof. It is told when the proof fails. A nil *proofGate allows all.
type proofGate struct {
	lim *GuessLimiter
	src string
}

// allow returns an error (wrapping proto.ErrAuth) if the source's proofs are
// refused unchecked for now.
func (p *proofGate) allow() error {
	if p == nil {
		return nil
	}
	if wait := p.lim.allow(p.src, time.Now()); wait > 0 {
		return fmt.Errorf("%w: too many failed proofs from %s: try again in %v", proto.ErrAuth, p.src, wait.Round(time.Millisecond))
	}
	return nil
}

func (p *proofGate) failed() {
	if p != nil {
		p.lim.failed(p.src, time.Now())
	}
}

// Source is the address a connection's guesses and handshake slots are
// counted under: its IP, without the port.
func Source(addr net.Addr) string {
	if a, ok := addr.(*net.TCPAddr); ok {
		return a.IP.String()
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return addr.String()
	}
	return host
}
