package cuda

import "github.com/goffload/offload/internal/cudadrv"

// peerAccess enables direct access from d's context to other's memory the
// first time d copies to other. libomptarget's CUDA plugin does the same. It
// reports whether d has it. cuMemcpyPeerAsync between the two is then a
// direct copy over NVLink or PCIe, not one staged through host memory. GPUs
// that cannot still copy, through host memory. (cuDeviceCanAccessPeer says
// no, or enabling fails.) The answer is kept, and asked again only of a
// device opened anew. It runs with d's context current, on the issuing
// goroutine.
func (d *device) peerAccess(other *device) bool {
	d.peerMu.Lock()
	defer d.peerMu.Unlock()
	if ok, seen := d.peers[other]; seen {
		return ok
	}
	for p := range d.peers { // forget closed devices: the map holds only live ones
		if p.alive() != nil {
			delete(d.peers, p)
		}
	}
	ok := false
	if can, err := d.drv.DeviceCanAccessPeer(d.cu, other.cu); err == nil && can {
		err = d.drv.CtxEnablePeerAccess(other.ctx, 0)
		ok = err == nil || cudadrv.Code(err) == cudadrv.ErrPeerAccessAlreadyEnabled
	}
	if d.peers == nil {
		d.peers = map[*device]bool{}
	}
	d.peers[other] = ok
	return ok
}
