package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/goffload/offload/plugins/remote/shm"
)

// Raw peers over shared memory: where a Remote suite's device is local and
// its link the default shared memory (GOFFLOAD_LOCAL_LINK unset or shm),
// the spinning raw baselines of suite remote talk to their peer over the
// same kind of link, a ring pair in a memory file (shm.NewFile,
// shm.Open), instead of a socketpair. The peer is the same child
// process with the same roles and traffic (peer.go); it inherits the
// memory file as descriptor 3 and GOFFLOAD_BENCH_SHM_FD names it. Both
// sides read as the transport's link does: polling for transport.SpinBudget,
// then parking on a futex. The end of the stream is the link's Close,
// which the other side reads as io.EOF; the peer's exit closes the host's
// side (peer.start), so that a failed peer's error shows.

// envPeerShm names the descriptor of the memory file a peer serves over;
// unset, the peer serves over the socket on descriptor 3.
const envPeerShm = "GOFFLOAD_BENCH_SHM_FD"

// startShmPeer starts this executable as a peer in role over a new
// shared-memory link; size is an xfer peer's largest message.
func startShmPeer(role string, size int) (*peer, error) {
	f, err := shm.NewFile()
	if err != nil {
		return nil, fmt.Errorf("shared-memory link: %w", err)
	}
	defer f.Close() // the mappings stay
	link, err := shm.Open(f, 0)
	if err != nil {
		return nil, err
	}
	p := &peer{w: link, r: &sockReader{r: link}, shm: link}
	if err := p.start(role, size, f, fmt.Sprintf("%s=%d", envPeerShm, peerFD)); err != nil {
		link.Close()
		return nil, err
	}
	return p, nil
}

// servePeerShm serves as a peer in role over the shared-memory link whose
// memory file this process inherited as descriptor fd (the value of
// GOFFLOAD_BENCH_SHM_FD).
func servePeerShm(fd, role string, size int) error {
	n, err := strconv.Atoi(fd)
	if err != nil || n < peerFD {
		return fmt.Errorf("%s=%q: want an inherited descriptor, %d or more", envPeerShm, fd, peerFD)
	}
	f := os.NewFile(uintptr(n), "bench-peer-shm")
	if f == nil {
		return fmt.Errorf("no inherited descriptor %d", n)
	}
	link, err := shm.Open(f, 1)
	f.Close() // the mapping stays
	if err != nil {
		return fmt.Errorf("inherited shared memory: %w", err)
	}
	defer link.Close()
	return servePeerStream(link, &sockReader{r: link}, role, size)
}
