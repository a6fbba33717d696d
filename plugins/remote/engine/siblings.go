package engine

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"sync"
)

// Sessions of one process that serve devices of one host link to each other
// inside the process. They do so when the host introduces them (Sibling). The
// session has a token, which its Serve answer tells the host. The host tells
// each the other's.

// processToken tells the host which sessions share a process.
var processToken = randomToken()

// siblings are the process's proxying sessions, by token.
var siblings = struct {
	sync.Mutex
	by map[uint64]*Session
}{by: map[uint64]*Session{}}

func randomToken() uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on Linux
	}
	return binary.LittleEndian.Uint64(b[:]) | 1
}

// enlist gives the session its token, among the process's siblings.
func (s *Session) enlist() uint64 {
	siblings.Lock()
	defer siblings.Unlock()
	if s.token == 0 {
		s.token = randomToken()
		siblings.by[s.token] = s
	}
	return s.token
}

// unlist takes the session out of its process's siblings.
func (s *Session) unlist() {
	siblings.Lock()
	defer siblings.Unlock()
	if s.token != 0 {
		delete(siblings.by, s.token)
	}
}

// linkSibling links the session and the process's session token (the host's
// device peer) with a link inside the process. Their exchanges and waits go
// over it. Exchanges go straight between their served devices where the kind
// can copy so (servedExchange).
func (s *Session) linkSibling(peer int, token uint64) {
	siblings.Lock()
	o := siblings.by[token]
	siblings.Unlock()
	if o == nil || o == s || s.PairLinks == nil {
		fmt.Fprintf(os.Stderr, "goffload device %d (pid %d): no session %#x in this process to link to as device %d\n", s.num, os.Getpid(), token, peer)
		return
	}
	a, b, err := s.PairLinks()
	if err != nil {
		fmt.Fprintf(os.Stderr, "goffload device %d (pid %d): link to device %d: %v\n", s.num, os.Getpid(), peer, err)
		return
	}
	s.mu.Lock()
	s.sibs[peer] = o
	s.mu.Unlock()
	o.mu.Lock()
	o.sibs[s.num] = s
	o.mu.Unlock()
	s.AddPeer(peer, a)
	o.AddPeer(s.num, b)
}

// sibling is the session of this process that serves device peer, or nil.
func (s *Session) sibling(peer int) *Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sibs[peer]
}
