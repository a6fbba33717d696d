package cudafake

import (
	"slices"

	"github.com/goffload/offload/internal/cudadrv"
)

// DeviceCanAccessPeer is the fake cuDeviceCanAccessPeer: every pair of
// distinct GPUs but those with an Isolated one.
func (d *Driver) DeviceCanAccessPeer(dev, peer cudadrv.Device) (bool, error) {
	const fn = "cuDeviceCanAccessPeer"
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, err := d.gpu(fn, dev); err != nil {
		return false, err
	}
	if _, err := d.gpu(fn, peer); err != nil {
		return false, err
	}
	iso := func(g cudadrv.Device) bool { return slices.Contains(d.cfg.Isolated, int(g)) }
	return dev != peer && !iso(dev) && !iso(peer), nil
}

// CtxEnablePeerAccess is the fake cuCtxEnablePeerAccess: the current
// context may access peer's memory, and peer copies between the two are
// direct.
func (d *Driver) CtxEnablePeerAccess(peer cudadrv.Context, flags uint32) error {
	const fn = "cuCtxEnablePeerAccess"
	d.mu.Lock()
	defer d.mu.Unlock()
	c, err := d.cur(fn)
	if err != nil {
		return err
	}
	p := d.ctxs[peer]
	switch {
	case flags != 0:
		return fail(fn, cudadrv.ErrInvalidValue)
	case p == nil || p.refs == 0:
		return fail(fn, cudadrv.ErrInvalidContext)
	case p.gpu == c.gpu:
		return fail(fn, cudadrv.ErrInvalidDevice)
	case slices.Contains(d.cfg.Isolated, c.gpu) || slices.Contains(d.cfg.Isolated, p.gpu):
		return fail(fn, cudadrv.ErrPeerAccessUnsupported)
	case c.peers[p]:
		return fail(fn, cudadrv.ErrPeerAccessAlreadyEnabled)
	}
	if c.peers == nil {
		c.peers = map[*context]bool{}
	}
	c.peers[p] = true
	return nil
}

// PeerCopies returns how many cuMemcpyPeerAsync copies between two
// contexts went through host memory (staged) and how many were direct,
// with peer access enabled in either context.
func (d *Driver) PeerCopies() (staged, direct int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.peerCopies[0], d.peerCopies[1]
}
